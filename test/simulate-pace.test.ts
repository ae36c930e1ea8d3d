import { describe, expect, it } from 'vitest';
import { builtInMode, type LiveCounts, type ModeResult, runMode, sharedMode } from '../src/simulate/run.js';
import { cloneParams, findScenario } from '../src/simulate/scenarios.js';
import { formatTable, tableCells } from '../src/simulate/table.js';

function params(scenario: string, minutes: number) {
  const p = cloneParams(findScenario(scenario)!.params);
  p.minutes = minutes;
  return p;
}

const withoutWall = ({ wallMs: _wallMs, ...rest }: ModeResult) => rest;

describe('a paced run (the playground)', () => {
  it.each([
    ['quota-drop', 'cubic'],
    ['uneven-demand', 'aimd (shared)'],
  ] as const)(
    '%s / %s gives the numbers of an unpaced run while it waits between instants',
    async (scenario, name) => {
      const p = params(scenario, 6);
      const aimd = builtInMode(name.startsWith('aimd') ? 'aimd' : 'cubic');
      const mode = name.endsWith('(shared)') ? sharedMode(aimd)! : aimd;
      const plain = await runMode(scenario, p, mode, { series: true });
      let asked = 0;
      let waited = 0;
      const seconds: number[] = [];
      const paced = await runMode(scenario, p, mode, {
        series: true,
        // Every 400th quiet moment waits for a macrotask, as the page does to draw.
        pace: () => {
          asked++;
          if (asked % 400 !== 0) return undefined;
          waited++;
          return new Promise<void>((resolve) => setTimeout(resolve, 0));
        },
        onSecond: (live: LiveCounts) => seconds.push(live.second),
      });
      expect(waited).toBeGreaterThan(20);
      expect(seconds).toEqual(Array.from({ length: 360 }, (_, i) => i + 1));
      expect(withoutWall(paced)).toEqual(withoutWall(plain));
    },
  );

  it('stops when the pace rejects', async () => {
    const stop = new Error('stopped');
    const run = runMode('steady', params('steady', 15), builtInMode('aimd'), {
      pace: (t) => (t > 30_000 ? Promise.reject(stop) : undefined),
    });
    await expect(run).rejects.toBe(stop);
  });

  it('reports the counts so far each virtual second', async () => {
    const last: LiveCounts[] = [];
    const result = await runMode('steady', params('steady', 2), builtInMode('aimd'), {
      onSecond: (live) => {
        if (live.second === 120) last.push(live);
      },
    });
    const end = last[0]!;
    expect(end.throttled).toBe(result.throttled);
    expect(end.rejected).toBe(result.rejected);
    expect(end.gaveUp).toBe(result.gaveUp);
    expect(end.p95WaitSeconds()).toBe(result.p95WaitSeconds);
  });
});

describe('tableCells', () => {
  it('holds the cells formatTable lays out', async () => {
    const results = [await runMode('steady', params('steady', 1), builtInMode('fixed'))];
    const { header, rows } = tableCells(results);
    const text = formatTable(results).split('\n');
    expect(text[0]!.split(/\s{2,}/)).toEqual(header);
    expect(text[2]!.split(/\s{2,}/)).toEqual(rows[0]);
  });
});
