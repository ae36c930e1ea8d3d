import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { builtInMode, type ModeResult, runMode, runScenario, sharedMode } from '../src/simulate/run.js';
import { cloneParams, findScenario, type SimParams } from '../src/simulate/scenarios.js';
import { calls } from './fixtures/step-controller.js';
import { cli } from './helpers/simulate-cli.js';

function paramsOf(name: string, minutes?: number): SimParams {
  const scenario = findScenario(name);
  if (!scenario) throw new Error(`no scenario ${name}`);
  const params = cloneParams(scenario.params);
  if (minutes !== undefined) params.minutes = minutes;
  return params;
}

const modes = [builtInMode('none'), builtInMode('fixed'), builtInMode('aimd'), builtInMode('cubic')];

function byMode(results: readonly ModeResult[]): Record<string, ModeResult> {
  return Object.fromEntries(results.map((r) => [r.mode, r]));
}

const withoutWallTime = (results: readonly ModeResult[]) =>
  JSON.stringify(results.map(({ wallMs: _wallMs, ...rest }) => rest));

describe('npm run simulate', () => {
  const dir = mkdtempSync(join(tmpdir(), 'simulate-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('gives the same JSON, byte for byte, for the same seed (wall time aside)', async () => {
    const params = paramsOf('quota-drop', 7);
    const first = await runScenario('quota-drop', params, modes, { series: true });
    const second = await runScenario('quota-drop', params, modes, { series: true });
    expect(withoutWallTime(second)).toBe(withoutWallTime(first));

    const other = await runMode('quota-drop', { ...params, seed: 43 }, builtInMode('aimd'));
    expect(other.details.requests).not.toBe(first[2]!.details.requests);
    // Nine 7-minute runs with their series: 24.6 s on the 2-core machine at load 24.
  }, 60_000);

  it('prints the same --json twice, and only wallMs differs', async () => {
    const args = ['--scenario', 'steady', '--minutes', '2', '--json'];
    const a = await cli(args);
    const b = await cli(args);
    expect(a.code).toBe(0);
    const strip = (text: string) => text.replace(/"wallMs": \d+/g, '"wallMs": 0');
    expect(strip(b.stdout)).toBe(strip(a.stdout));
    const parsed = JSON.parse(a.stdout) as ModeResult[];
    expect(parsed.map((r) => r.mode)).toEqual(['none', 'fixed', 'aimd', 'cubic', 'probe', 'defaults']);
    for (const r of parsed) {
      expect(Object.keys(r)).toEqual(
        expect.arrayContaining([
          'throughput',
          'share',
          'throttled',
          'rejected',
          'gaveUp',
          'callers429',
          'p95WaitSeconds',
          'recoverySeconds',
          'parameters',
          'wallMs',
        ]),
      );
      expect(r.parameters.seed).toBe(42);
    }
    expect(a.stderr).toMatch(/^took \d+\.\d s \(6 runs\)\n$/);
  });

  it('keeps the shape of the seed in steady', async () => {
    const results = byMode(await runScenario('steady', paramsOf('steady', 6), modes));
    const { none, fixed, aimd, cubic } = results as Record<'none' | 'fixed' | 'aimd' | 'cubic', ModeResult>;
    // No limiter: by far the most 429s and gave-ups.
    expect(none.throttled).toBeGreaterThan(10 * Math.max(fixed.throttled, aimd.throttled, cubic.throttled));
    expect(none.gaveUp).toBeGreaterThan(100);
    expect(Math.max(fixed.gaveUp, aimd.gaveUp, cubic.gaveUp)).toBeLessThan(none.gaveUp / 10);
    // Fixed: close to its fixed rate (1,500 units/min) with few 429s.
    expect(fixed.throughput).toBeGreaterThan(1_450);
    expect(fixed.throughput).toBeLessThan(1_560);
    expect(fixed.throttled).toBeLessThan(10);
    // AIMD: fewer 429s than CUBIC; CUBIC: at least AIMD's share.
    expect(aimd.throttled).toBeLessThan(cubic.throttled);
    expect(cubic.share).toBeGreaterThanOrEqual(aimd.share);
    // Without a quota drop there is no recovery to report.
    expect(aimd.recovered).toBeNull();
  });

  it('reports a recovery in quota-drop', async () => {
    const results = await runScenario('quota-drop', paramsOf('quota-drop', 10), modes);
    for (const r of results) {
      expect(r.recovered, r.mode).toBe(true);
      expect(r.recoverySeconds, r.mode).toBeGreaterThanOrEqual(0);
    }
    // The fixed rate (1,500) never needed more than the dropped quota (1,500).
    expect(byMode(results).fixed!.recoverySeconds).toBe(0);
    const { stdout, code } = await cli([
      '--scenario',
      'quota-drop',
      '--minutes',
      '7',
      '--modes',
      'fixed,cubic',
    ]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^Fixed rate .* 0 s$/m);
    expect(stdout).toMatch(/^CUBIC .*( \d+ s|> \d+ s)$/m);
  });

  it("finds a strict leaky bucket's quota with one shared budget and no options, as nginx's bench row", async () => {
    // The control bench's shared nginx row: 3 × 1,500/min against 3,000/min with a burst of 10.
    const params = paramsOf('leaky-bucket', 3);
    params.instances = 3;
    params.demand = [1_500];
    params.leakyBucket = { burst: 10 };
    const defaults = builtInMode('defaults');
    const aimd = builtInMode('aimd');
    const [shared, oldDefault] = await runScenario('leaky-bucket', params, [
      sharedMode(defaults)!,
      sharedMode(aimd)!,
    ]);
    // The shared default (the probe controller, its books in the store) against the old one (AIMD).
    expect(shared!.share).toBeGreaterThanOrEqual(0.9);
    expect(shared!.throttled / shared!.details.requests).toBeLessThanOrEqual(0.01);
    expect(shared!.share).toBeGreaterThan(oldDefault!.share + 0.1);
  });

  it('shares one budget by demand with --shared: in uneven-demand the busy instance no longer starves', async () => {
    const params = paramsOf('uneven-demand', 5);
    const aimd = builtInMode('aimd');
    const [statics, shared] = await runScenario('uneven-demand', params, [aimd, sharedMode(aimd)!]);
    expect(shared!.label).toBe('AIMD (shared)');
    expect(shared!.shared).toBe(true);
    expect(statics!.shared).toBe(false);
    // Static shares cap the busy instance at max / 2 = 1,500 units/min; one shared budget does not.
    expect(statics!.details.finalRates[0]).toBeLessThanOrEqual(1_500);
    expect(shared!.details.finalRates[0]).toBeGreaterThan(2_000);
    expect(shared!.throughput).toBeGreaterThan(1.3 * statics!.throughput);
    expect(shared!.share).toBeGreaterThan(statics!.share);
    expect(shared!.details.sharedBudget?.rate).toBeGreaterThan(2_500);
    expect(statics!.details.sharedBudget).toBeNull();

    const again = await runMode('uneven-demand', params, sharedMode(aimd)!, { series: true });
    const twice = await runMode('uneven-demand', params, sharedMode(aimd)!, { series: true });
    expect(withoutWallTime([twice])).toBe(withoutWallTime([again]));
  });

  it('keeps a shared CUBIC budget within its maximum: try-cubic-max-2700 --shared sends at most 2,700', async () => {
    const params = paramsOf('try-cubic-max-2700');
    const shared = await runMode('try-cubic-max-2700', params, sharedMode(builtInMode('cubic'))!, {
      series: true,
    });
    const series = shared.series!;
    // The members' rates add up to at most the maximum, every second of the run (before the fix
    // they reached 2 × 2,700 and the instances sent 3,001 units/min)...
    expect(Math.max(...series.sumRate.map(Number))).toBeLessThanOrEqual(2_700 + 1e-6);
    // ...so the instances send at most the maximum (plus the first second's full buckets), which
    // is below the quota (3,000): no 429, no cut.
    expect(shared.throughput).toBeLessThanOrEqual(2_700);
    expect(Math.max(...series.used60)).toBeLessThanOrEqual(2_700 + 2_700 / 60);
    expect(shared.throttled).toBe(0);
    expect(shared.details.sharedBudget).toEqual({ rate: 2_700, cuts: 0 });
  });

  it('adds a shared row after each limited mode with --shared, and drops them with --no-shared', async () => {
    const args = ['--scenario', 'steady', '--minutes', '1', '--shared', '--json'];
    const a = await cli(args);
    const b = await cli(args);
    expect(a.code).toBe(0);
    const strip = (text: string) => text.replace(/"wallMs": \d+/g, '"wallMs": 0');
    expect(strip(b.stdout)).toBe(strip(a.stdout));
    const parsed = JSON.parse(a.stdout) as ModeResult[];
    expect(parsed.map((r) => r.label)).toEqual([
      'No limiter',
      'Fixed rate',
      'Fixed rate (shared)',
      'AIMD',
      'AIMD (shared)',
      'CUBIC',
      'CUBIC (shared)',
      'Probe',
      'Probe (shared)',
      'Defaults',
      'Defaults (shared)',
    ]);
    expect(parsed[2]!.parameters.shared).toEqual({ heartbeatInterval: 250, floorFraction: 0.05 });

    const table = await cli(['--scenario', 'uneven-demand', '--minutes', '1', '--modes', 'aimd']);
    expect(table.stdout).toMatch(/^AIMD \(shared\) +[\d,]+ +\d+%/m);
    const without = await cli([
      '--scenario',
      'uneven-demand',
      '--minutes',
      '1',
      '--modes',
      'aimd',
      '--no-shared',
    ]);
    expect(without.stdout).toMatch(/^AIMD +[\d,]+ +\d+%/m);
    expect(without.stdout).not.toMatch(/^AIMD \(shared\)/m);
    const bad = await cli(['--shared', '--floor-fraction', '2']);
    expect(bad.stderr).toContain('--floor-fraction: must be a number from 0 to 1, received "2"');
    // The quota drops to a fraction of itself: above 1 it would rise, which the scenario does not model.
    const rise = await cli(['--scenario', 'quota-drop', '--drop-to', '1.5']);
    expect(rise.code).toBe(2);
    expect(rise.stderr).toContain('--drop-to: must be a number from 0 to 1, received "1.5"');
  });

  it('runs a custom controller module given with --controller', async () => {
    const before = { ...calls };
    const { code, stdout } = await cli([
      '--controller',
      'test/fixtures/step-controller.js',
      '--modes',
      'custom',
      '--minutes',
      '3',
      '--json',
    ]);
    expect(code).toBe(0);
    const [result] = JSON.parse(stdout) as ModeResult[];
    expect(result!.mode).toBe('custom');
    expect(result!.label).toBe('Custom (step-controller.js)');
    expect(result!.parameters.limiterOptions?.controller).toBe('custom');
    expect(result!.throughput).toBeGreaterThan(1_000);
    expect(calls.onSuccess).toBeGreaterThan(before.onSuccess);
  });

  it('prints the seed table with every column, and says how long it took', async () => {
    const { code, stdout } = await cli(['--minutes', '1']);
    expect(code).toBe(0);
    expect(stdout).toMatch(
      /^Mode +Throughput +Share +429s +Rejected +Gave up +429 callers +p95 wait +Recovery$/m,
    );
    for (const label of ['No limiter', 'Fixed rate', 'AIMD', 'CUBIC', 'Probe', 'Defaults']) {
      expect(stdout).toMatch(
        new RegExp(`^${label} +[\\d,]+ +\\d+% +[\\d,]+ +[\\d,]+ +[\\d,]+ +[\\d,]+ +\\d+\\.\\d s +-$`, 'm'),
      );
    }
    expect(stdout).toMatch(/^took \d+\.\d s \(6 runs\)$/m);
  });

  it('writes a self-contained HTML report with the chart library inlined', async () => {
    const file = join(dir, 'report.html');
    const { code } = await cli(['--minutes', '1', '--modes', 'none,aimd', '--html', file]);
    expect(code).toBe(0);
    const html = readFileSync(file, 'utf8');
    expect(html).toContain('var uPlot=');
    expect(html).toContain('id="sim-data"');
    expect(html).not.toMatch(/<script[^>]+src=|<link[^>]+href=/);
    const data = JSON.parse(html.match(/id="sim-data">([^<]*)<\/script>/)![1]!) as {
      modes: { series: { t: number[]; rates: unknown[][] } }[];
    }[];
    expect(data[0]!.modes[1]!.series.t).toHaveLength(60);
    expect(data[0]!.modes[1]!.series.rates).toHaveLength(2);
  });

  it('says in one line, exit 2, when the HTML report cannot be written (a folder that does not exist)', async () => {
    const file = join(dir, 'no-such-folder', 'report.html');
    const { code, stderr } = await cli(['--minutes', '1', '--modes', 'none', '--html', file]);
    expect(code).toBe(2);
    expect(stderr).toContain(`simulate: --html: must be a file in a folder that exists, received "${file}"`);
    expect(stderr).not.toContain('    at ');
  });

  it('names the command it was run as in its help and its HTML report (the bin)', async () => {
    const help = await cli(['--help'], 'adaptive-rate-limit simulate');
    expect(help.stdout).toMatch(/^Usage: adaptive-rate-limit simulate \[options\]/);
    expect((await cli(['--help'])).stdout).toMatch(/^Usage: npm run simulate -- \[options\]/);
    const file = join(dir, 'bin-report.html');
    await cli(['--minutes', '1', '--modes', 'aimd', '--html', file], 'adaptive-rate-limit simulate');
    expect(readFileSync(file, 'utf8')).toContain(
      `<code>adaptive-rate-limit simulate --minutes 1 --modes aimd --html ${file}</code>`,
    );
  });

  it('names a bad flag and its value', async () => {
    const bad = await cli(['--instances', 'two']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--instances: must be a whole number from 1 to 1000, received "two"');
    const endless = await cli(['--minutes', '1e9']);
    expect(endless.code).toBe(2);
    expect(endless.stderr).toContain(
      '--minutes: must be a number from 0.0167 (a second, the first sample of a run) to 1440 (a virtual day), received "1e9"',
    );
    const unknown = await cli(['--scenario', 'nope']);
    expect(unknown.stderr).toContain('unknown scenario "nope"');
    const limiter = await cli(['--max-units-per-minute', '1000', '--minutes', '1']);
    expect(limiter.code).toBe(2);
    expect(limiter.stderr).toContain('initialUnitsPerMinute');
  });
});
