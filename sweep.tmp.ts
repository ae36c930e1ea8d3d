import { builtInMode, runMode } from './src/simulate/run.js';
import { cloneParams, findScenario } from './src/simulate/scenarios.js';
const seeds = (process.env.SEEDS ?? '42,1,2,3,4,5,6,7,8,9,10').split(',').map(Number);
for (const name of ['crowd', 'crowd-10x10']) {
  const rows: string[] = [];
  let sumT = 0, sumD = 0, maxD = 0, maxT = 0;
  for (const seed of seeds) {
    const p = cloneParams(findScenario(name)!.params);
    p.seed = seed;
    const r = await runMode(name, p, builtInMode('defaults'));
    const d = (r as any).lastSuccessSeconds as number;
    rows.push(`${seed}:${r.throttled}/${d}`);
    sumT += r.throttled; sumD += d; maxD = Math.max(maxD, d); maxT = Math.max(maxT, r.throttled);
  }
  console.log(`${process.env.CROWD_RULE ?? 'double'} f=${process.env.CROWD_F ?? ''} ${name.padEnd(12)} mean429 ${(sumT / seeds.length).toFixed(1)} max ${maxT} meanDone ${(sumD / seeds.length).toFixed(1)} maxDone ${maxD} | ${rows.join(' ')}`);
}
