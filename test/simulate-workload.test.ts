import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { cli } from './helpers/simulate-cli.js';

// A command that would run for hours or run out of memory is refused before it starts, naming
// the flags that weigh on it. The bin runs in a child process, killed after a bound: before these
// checks a billion instances ended the process out of memory, and a demand of 1e12 ran unbounded.
const run = promisify(execFile);
const KILL_AFTER_MS = 30_000;

async function bin(args: string[]) {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      ['--import', 'tsx', 'src/bin.ts', 'simulate', ...args],
      { timeout: KILL_AFTER_MS, maxBuffer: 1 << 20 },
    );
    return { code: 0, stdout, stderr, killed: false };
  } catch (error) {
    const e = error as { code?: number; killed?: boolean; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr, killed: e.killed === true };
  }
}

describe('simulate: no command runs for hours or out of memory', () => {
  it('refuses a billion instances with a usage error, not a heap out of memory', async () => {
    const result = await bin(['--instances', '1e9', '--minutes', '1', '--modes', 'none']);
    expect(result.killed).toBe(false);
    expect(result.code).toBe(2);
    expect(result.stderr.split('\n')[0]).toBe(
      'simulate: --instances: must be a whole number from 1 to 1000, received "1e9"',
    );
    expect(result.stdout).toBe('');
  }, 40_000);

  it('refuses a demand that would never end, naming the flag and its value', async () => {
    const result = await bin(['--demand', '1e12']);
    expect(result.killed).toBe(false);
    expect(result.code).toBe(2);
    expect(result.stderr.split('\n')[0]).toMatch(
      /^simulate: --demand "1e12": 6 runs would take up to 3\.6e\+14 steps .*more than 200,000,000/,
    );
  }, 40_000);

  it('counts the burst, the attempts, the heartbeats and every scenario of the command', async () => {
    const burst = await cli(['--burst-factor', '1e9', '--minutes', '10']);
    expect(burst.code).toBe(2);
    expect(burst.stderr).toMatch(/^simulate: --minutes "10", --burst-factor "1e9": 6 runs would take/);
    const attempts = await cli(['--max-attempts', '1000000', '--modes', 'none']);
    expect(attempts.stderr).toMatch(/^simulate: --max-attempts "1000000", --modes "none": 1 run would take/);
    // The heartbeats alone: 1,000 instances with no demand, one heartbeat each every 10 ms (the least).
    const heartbeats = await cli([
      ...['--instances', '1000', '--demand', '0', '--minutes', '60'],
      ...['--heartbeat-interval', '10', '--shared', '--modes', 'aimd'],
    ]);
    expect(heartbeats.stderr).toMatch(
      /^simulate: --instances "1000", --demand "0", --minutes "60", --heartbeat-interval "10", --modes "aimd": 2 runs would take up to 3\.7e\+8 steps/,
    );
    const all = await cli(['--scenario', 'all', '--minutes', '1440']);
    expect(all.stderr).toMatch(/^simulate: --minutes "1440", --scenario "all": 113 runs would take/);
    for (const r of [burst, attempts, heartbeats, all]) {
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
    }
  });

  it("counts a crowd's calls again after each 429, one per answer's latency at most", async () => {
    // Before, this passed the check (its demand is 0) and would have run some 4e9 attempts.
    const crowd = await cli([
      '--scenario',
      'crowd',
      '--modes',
      'none',
      '--minutes',
      '1440',
      '--latency',
      '1ms',
      '--instances',
      '400',
    ]);
    expect(crowd.code).toBe(2);
    expect(crowd.stdout).toBe('');
    expect(crowd.stderr).toMatch(
      /^simulate: --instances "400", --minutes "1440", --latency "1ms", --scenario "crowd", --modes "none": 1 run would take up to 6\.9e\+9 steps/,
    );
  });

  it('refuses time series that would run to gigabytes, naming --series or --html', async () => {
    const series = await cli([
      '--instances',
      '1000',
      '--demand',
      '0',
      '--minutes',
      '300',
      '--json',
      '--series',
    ]);
    expect(series.code).toBe(2);
    expect(series.stderr.split('\n')[0]).toBe(
      'simulate: --series: the time series would keep 108,756,000 samples (one per instance and virtual second, per mode), more than 10,000,000; lower --instances or --minutes, or run fewer scenarios or modes',
    );
    const html = await cli(['--instances', '1000', '--demand', '0', '--minutes', '300', '--html', 'x.html']);
    expect(html.stderr).toMatch(/^simulate: --html "x\.html": the time series would keep/);
  });
});
