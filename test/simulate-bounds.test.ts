import { describe, expect, it } from 'vitest';
import { builtInMode, runScenario, sharedMode } from '../src/simulate/run.js';
import { cloneParams, findScenario, type SimParams } from '../src/simulate/scenarios.js';

// Bounds that real-time tests printed but cannot hold on a loaded machine, checked on the
// simulator's virtual clock with the library's own limiter, attempt loop and shared budget.

function paramsOf(name: string): SimParams {
  const scenario = findScenario(name);
  if (!scenario) throw new Error(`no scenario ${name}`);
  return cloneParams(scenario.params);
}

describe('bounds on the virtual clock', () => {
  it('hands no caller a 429 in a cold burst of 200 requests with no options, and draws at most 60 (test/http-cold-start.test.ts on a real server)', async () => {
    const params = paramsOf('cold-burst');
    // 6,000 requests/min with a bucket of 10, answers in about 2 ms: the real server's shape.
    params.quota = 6_000;
    params.apiBurstSeconds = 0.1;
    params.initialBurst = 200;
    params.demand = [1];
    params.minutes = 1;
    params.latency = { medianMs: 2, sigma: 0.5 };
    const [result] = await runScenario('cold-burst', params, [builtInMode('defaults')]);
    expect(result!.callers429).toBe(0);
    expect(result!.gaveUp).toBe(0);
    expect(result!.rejected).toBe(0);
    expect(result!.throttled).toBeLessThanOrEqual(60);
  });

  it('accepts 90-102 % of a 3,000 units/min quota with one shared budget and uneven demand (test/redis.e2e.test.ts on real processes)', async () => {
    const params = paramsOf('uneven-demand');
    // Two busy members (demand past the quota: the rest waits or is refused) and a light one
    // (5 requests/s), a first guess above the quota (4,500).
    params.instances = 3;
    params.quota = 3_000;
    params.demand = [4_800, 4_800, 300];
    params.minutes = 1;
    params.unitsPerRequest = { min: 1, max: 1 };
    params.apiBurstSeconds = 1;
    params.limiter.initialUnitsPerMinute = 4_500;
    params.limiter.maxUnitsPerMinute = 60_000;
    const [result] = await runScenario('uneven-demand', params, [sharedMode(builtInMode('probe'))!]);
    expect(result!.share).toBeGreaterThanOrEqual(0.9);
    expect(result!.share).toBeLessThanOrEqual(1.02);
  });
});
