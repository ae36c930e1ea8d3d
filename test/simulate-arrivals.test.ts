import { describe, expect, it } from 'vitest';
import { builtInMode, runMode } from '../src/simulate/run.js';
import { cloneParams, findScenario, type SimParams } from '../src/simulate/scenarios.js';
import { cli } from './helpers/simulate-cli.js';

function leakyParams(): SimParams {
  const scenario = findScenario('leaky-bucket');
  if (!scenario) throw new Error('no scenario leaky-bucket');
  const params = cloneParams(scenario.params);
  // One sender at half of a leaky bucket with no burst: nginx refuses a request less than 20 ms
  // after the one before it.
  params.instances = 1;
  params.demand = [1_500];
  params.minutes = 2;
  params.leakyBucket = { burst: 0 };
  return params;
}

describe("the simulator's arrival models", () => {
  it('sends one request every mean gap with interval arrivals, as the control bench does', async () => {
    const params = leakyParams();
    const poisson = await runMode('leaky-bucket', params, builtInMode('none'));
    const interval = await runMode('leaky-bucket', { ...params, arrivals: 'interval' }, builtInMode('none'));
    // Requests 40 ms apart never come within nginx's 20 ms; Poisson gaps often do.
    expect(interval.throttled).toBe(0);
    expect(interval.details.requests).toBeGreaterThanOrEqual(2_999);
    expect(interval.details.requests).toBeLessThanOrEqual(3_000);
    expect(poisson.throttled).toBeGreaterThan(500);
  });

  it('follows a change of the demand with interval arrivals, request for request', async () => {
    const params = leakyParams();
    params.leakyBucket = undefined;
    params.quota = 100_000;
    params.demand = [600];
    params.minutes = 10;
    // Three times the demand from 2:00 for 1 min: 600 x 10 + 1,200 more.
    params.demandEvents = [{ atMs: 120_000, durationMs: 60_000, factor: 3 }];
    params.arrivals = 'interval';
    const result = await runMode('leaky-bucket', params, builtInMode('none'));
    expect(Math.abs(result.details.requests - 7_200)).toBeLessThanOrEqual(1);
    // The same seed, the same phase and the same run.
    const again = await runMode('leaky-bucket', params, builtInMode('none'));
    expect(again.details.requests).toBe(result.details.requests);
  });

  it('takes --arrivals, names it in the title, and names a bad value', async () => {
    const run = await cli([
      '--scenario',
      'steady',
      '--minutes',
      '1',
      '--modes',
      'fixed',
      '--arrivals',
      'interval',
    ]);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('arrivals at a fixed interval');
    const json = await cli(['--minutes', '1', '--modes', 'fixed', '--arrivals', 'interval', '--json']);
    expect((JSON.parse(json.stdout) as { parameters: SimParams }[])[0]!.parameters.arrivals).toBe('interval');
    const help = await cli(['--help']);
    expect(help.stdout).toContain('--arrivals MODEL');
    const bad = await cli(['--arrivals', 'even']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--arrivals: must be one of poisson, interval, received "even"');
  });
});
