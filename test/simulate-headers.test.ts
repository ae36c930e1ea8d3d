import { describe, expect, it } from 'vitest';
import { modesFor } from '../src/simulate/args.js';
import { builtInMode, headersMode, runMode } from '../src/simulate/run.js';
import { cloneParams, findScenario } from '../src/simulate/scenarios.js';

describe('simulator: an API that announces its quota', () => {
  it('runs each limited mode beside the same mode against the announcing API', () => {
    expect(modesFor(['none', 'aimd'], undefined, false, false, true).map((m) => m.label)).toEqual([
      'No limiter',
      'AIMD',
      'AIMD (headers)',
    ]);
  });

  it('the headers scenario: AIMD reading the announced quota gets no 429 and more throughput', async () => {
    const scenario = findScenario('headers');
    if (scenario === undefined) throw new Error('no headers scenario');
    const params = cloneParams(scenario.params);
    const aimd = builtInMode('aimd');
    const blind = await runMode('headers', params, aimd);
    const reading = await runMode('headers', params, headersMode(aimd)!);
    expect(blind.details.acceptedUnits).toBeGreaterThan(0);
    expect(blind.throttled).toBeGreaterThan(0);
    expect(reading.throttled).toBe(0);
    expect(reading.details.acceptedUnits).toBeGreaterThan(blind.details.acceptedUnits);
  });

  it('token-bucket-headers: the defaults read r and t as a refilling bucket and take the quota with no 429', async () => {
    const scenario = findScenario('token-bucket-headers');
    if (scenario === undefined) throw new Error('no token-bucket-headers scenario');
    const params = cloneParams(scenario.params);
    const reading = await runMode('token-bucket-headers', params, headersMode(builtInMode('defaults'))!);
    expect(reading.throttled).toBe(0);
    // Remaining over the rounded-up `t` (the rule for a window) took 90 % of this quota.
    expect(reading.share).toBeGreaterThanOrEqual(0.98);
  });
});
