import { builtInMode, runMode } from './src/simulate/run.js';
import { cloneParams, findScenario } from './src/simulate/scenarios.js';
const name = process.env.SC ?? 'crowd-10x10';
const p = cloneParams(findScenario(name)!.params);
p.seed = Number(process.env.SEED ?? 42);
const r = await runMode(name, p, builtInMode('defaults'));
console.log('RESULT', r.throttled, (r as any).lastSuccessSeconds, r.gaveUp, r.rejected);
