import { describe, expect, it } from 'vitest';
import { builtInMode, runMode } from '../src/simulate/run.js';
import { cloneParams, findScenario } from '../src/simulate/scenarios.js';

describe('simulator: a crowd of short-lived processes', () => {
  const params = () => {
    const scenario = findScenario('crowd');
    if (scenario === undefined) throw new Error('no crowd scenario');
    return cloneParams(scenario.params);
  };

  it('each process sends its requests one at a time and ends: 50 x 2 requests, no more', async () => {
    const once = params();
    once.crowd = { requestsEach: 2 };
    const blind = await runMode('crowd', once, builtInMode('none'));
    expect(blind.details.requests).toBe(100);
    // The bucket's 50, then every second request answered 429 on each of its 4 attempts: with no
    // Retry-After and no limiter, nothing makes a retry wait.
    expect(blind.details.acceptedUnits).toBe(50);
    expect(blind.throttled).toBe(200);
    expect(blind.gaveUp).toBe(50);
  });

  it('a script that must finish calls a request that ended with its 429 again, until served', async () => {
    const blind = await runMode('crowd', params(), builtInMode('none'));
    // Every request served in the end (the bucket refills 40 a minute), each 429 given up on
    // after 4 attempts called again at once.
    expect(blind.details.acceptedUnits).toBe(100);
    expect(blind.details.requests).toBe(100 + blind.gaveUp);
    expect(blind.throttled).toBeGreaterThanOrEqual(4 * blind.gaveUp);
    expect(blind.gaveUp).toBeGreaterThan(50);
  });

  it('a fixed share of the quota serves all 100 with no 429 (the last within about 75 s)', async () => {
    const fixed = await runMode('crowd', params(), builtInMode('fixed'));
    expect(fixed.details.acceptedUnits).toBe(100);
    expect(fixed.throttled).toBe(0);
  });
});

describe('simulator: the crowd wait of the library with no options', () => {
  const params = (name: string) => {
    const scenario = findScenario(name);
    if (scenario === undefined) throw new Error(`no ${name} scenario`);
    return cloneParams(scenario.params);
  };

  it('spreads a crowd of 50 x 2 out: under 40 % of the 429s of one blind round, none gives up after 4 attempts', async () => {
    const defaults = await runMode('crowd', params('crowd'), builtInMode('defaults'));
    expect(defaults.throttled).toBeLessThan(0.4 * 200);
    expect(defaults.gaveUp).toBe(0);
    expect(defaults.details.acceptedUnits).toBe(100);
  });

  it('serves a crowd of 50 x 2 within 90 s on each of 20 seeds (ideal 75 s), with under 40 % of the 429s of a blind round', async () => {
    const last: number[] = [];
    for (let seed = 1; seed <= 20; seed++) {
      const p = params('crowd');
      p.seed = seed;
      const defaults = await runMode('crowd', p, builtInMode('defaults'));
      expect(defaults.details.acceptedUnits).toBe(100);
      expect(defaults.throttled).toBeLessThan(0.4 * 200);
      last.push(defaults.lastSuccessSeconds ?? Number.POSITIVE_INFINITY);
    }
    // Slices that grew after the first window sent the last process to 96-105 s on 3 of them.
    expect(Math.max(...last)).toBeLessThanOrEqual(90);
  });

  it('serves a crowd of 10 x 10 within 90 s with at most 25 429s on most of 20 seeds', async () => {
    let met = 0;
    let throttled = 0;
    for (let seed = 1; seed <= 20; seed++) {
      const p = params('crowd-10x10');
      p.seed = seed;
      const defaults = await runMode('crowd-10x10', p, builtInMode('defaults'));
      expect(defaults.details.acceptedUnits).toBe(100);
      throttled += defaults.throttled;
      if (defaults.throttled <= 25 && (defaults.lastSuccessSeconds ?? Number.POSITIVE_INFINITY) <= 90) met++;
    }
    // A fresh first window from now after each served burst: both met on 4 of the 20.
    expect(met).toBeGreaterThanOrEqual(16);
    expect(throttled / 20).toBeLessThanOrEqual(25);
  });

  it('serves a crowd of 10 x 10 with at most 25 429s', async () => {
    const defaults = await runMode('crowd-10x10', params('crowd-10x10'), builtInMode('defaults'));
    expect(defaults.throttled).toBeLessThanOrEqual(25);
    expect(defaults.details.acceptedUnits).toBe(100);
  });
});
