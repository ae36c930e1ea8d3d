import { describe, expect, it } from 'vitest';
import { meanQuota, RunCollector, unitsInLastMinute } from '../src/simulate/metrics.js';
import { ModelApi } from '../src/simulate/model-api.js';
import { Prng } from '../src/simulate/prng.js';
import { baseParams, fitDemand } from '../src/simulate/scenarios.js';
import { VirtualClock } from '../src/simulate/virtual-clock.js';

describe('VirtualClock', () => {
  it('runs timers in order of due time, then of creation, and rounds delays up to whole ms', async () => {
    const clock = new VirtualClock();
    const seen: string[] = [];
    clock.setTimeout(() => seen.push(`b@${clock.now()}`), 10);
    clock.setTimeout(() => seen.push(`a@${clock.now()}`), 2.2);
    clock.setTimeout(() => seen.push(`c@${clock.now()}`), 10);
    const cleared = clock.setTimeout(() => seen.push('never'), 5);
    clock.clearTimeout(cleared);
    await clock.runUntil(100);
    expect(seen).toEqual(['a@3', 'b@10', 'c@10']);
    expect(clock.now()).toBe(100);
    expect(clock.pendingTimers).toBe(0);
  });

  it('lets promise callbacks started by a timer finish before time moves on', async () => {
    const clock = new VirtualClock();
    const work = { busy: 0 };
    const seen: number[] = [];
    clock.setTimeout(() => {
      work.busy++;
      void (async () => {
        await null;
        await Promise.resolve();
        seen.push(clock.now());
        clock.setTimeout(() => seen.push(clock.now()), 0);
        work.busy--;
      })();
    }, 5);
    clock.setTimeout(() => seen.push(clock.now() * 10), 6);
    await clock.runUntil(10, { busy: () => work.busy });
    expect(seen).toEqual([5, 5, 60]);
  });

  it('falls back to a macrotask per instant without a busy counter', async () => {
    const clock = new VirtualClock();
    const seen: number[] = [];
    clock.setTimeout(() => {
      void Promise.resolve().then(() => seen.push(clock.now()));
    }, 7);
    clock.setTimeout(() => seen.push(-clock.now()), 8);
    await clock.runUntil(20);
    expect(seen).toEqual([7, -8]);
  });
});

describe('Prng', () => {
  it('gives the same numbers for the same seed and stream, and others for another stream', () => {
    const a = new Prng(42, 'arrivals-0');
    const b = new Prng(42, 'arrivals-0');
    const c = new Prng(42, 'arrivals-1');
    const xs = Array.from({ length: 5 }, () => a.next());
    expect(Array.from({ length: 5 }, () => b.next())).toEqual(xs);
    expect(Array.from({ length: 5 }, () => c.next())).not.toEqual(xs);
    for (const x of xs) expect(x >= 0 && x < 1).toBe(true);
  });

  it('draws exponential gaps with the mean asked for', () => {
    const random = new Prng(7);
    let sum = 0;
    for (let i = 0; i < 20_000; i++) sum += random.exponential(30);
    expect(sum / 20_000).toBeGreaterThan(29);
    expect(sum / 20_000).toBeLessThan(31);
  });
});

describe('ModelApi', () => {
  function setup(quota = 600, burstSeconds = 1) {
    const clock = new VirtualClock();
    const api = new ModelApi({
      clock,
      quota,
      burstSeconds,
      latencyMedianMs: 100,
      latencySigma: 0.5,
      random: new Prng(1),
    });
    return { clock, api };
  }

  it('accepts a burst from a full bucket, then answers 429 with Retry-After in whole seconds', () => {
    const { api } = setup(600, 1); // 10 units/s, a bucket of 10
    for (let i = 0; i < 10; i++) expect(api.decide(1)).toEqual({ status: 200 });
    expect(api.decide(1)).toEqual({ status: 429, retryAfterMs: 1000 });
    expect(api.acceptedUnits).toBe(10);
    expect(api.throttled).toBe(1);
  });

  it('asks for as many whole seconds as the bucket needs to hold the request', async () => {
    const { api } = setup(60, 5); // 1 unit/s, a bucket of 5
    expect(api.decide(5)).toEqual({ status: 200 });
    expect(api.decide(3)).toEqual({ status: 429, retryAfterMs: 3000 });
  });

  it('refills at the quota and follows a change of quota', async () => {
    const { clock, api } = setup(600, 1);
    for (let i = 0; i < 10; i++) api.decide(1);
    await clock.runUntil(500);
    for (let i = 0; i < 5; i++) expect(api.decide(1).status).toBe(200);
    expect(api.decide(1).status).toBe(429);
    api.setQuota(60);
    await clock.runUntil(1500);
    expect(api.decide(1).status).toBe(200);
    expect(api.acceptedBySecond).toEqual([15, 1]);
  });

  it("answers as nginx's limit_req (3,000 r/m, burst=10 nodelay): burst + 1 at the start, a refusal changes nothing", async () => {
    const clock = new VirtualClock();
    const api = new ModelApi({
      clock,
      quota: 3_000,
      burstSeconds: 2,
      latencyMedianMs: 100,
      latencySigma: 0.5,
      random: new Prng(1),
      leakyBurst: 10,
    });
    // The first request makes the key's node with no excess; the next 10 fill the burst.
    for (let i = 0; i < 11; i++) expect(api.decide(1)).toEqual({ status: 200 });
    expect(api.decide(1)).toEqual({ status: 429, retryAfterMs: 1_000 });
    // 20 ms drains one request: one more goes, the next does not (the refusal took nothing).
    await clock.runUntil(20);
    expect(api.decide(3).status).toBe(200);
    expect(api.decide(1).status).toBe(429);
    // Drained past empty (1 s: 50 requests), the next one costs nothing: 11 go again.
    await clock.runUntil(1_020);
    for (let i = 0; i < 11; i++) expect(api.decide(1).status).toBe(200);
    expect(api.decide(1).status).toBe(429);
    // Requests are counted, not units; a 429 is not.
    expect(api.acceptedRequests).toBe(23);
    expect(api.acceptedUnits).toBe(25);
    expect(api.throttled).toBe(3);
  });
});

describe('metrics', () => {
  it('takes the 95th percentile of the waits by nearest rank', () => {
    const run = new RunCollector();
    for (let i = 1; i <= 100; i++) run.recordWait(i * 10);
    expect(run.waitQuantile(0.95)).toBe(950);
    expect(new RunCollector().waitQuantile(0.95)).toBe(0);
  });

  it('averages the quota over the run, drops included', () => {
    const params = { ...baseParams(), quotaEvents: [{ atMs: 300_000, durationMs: 60_000, factor: 0.5 }] };
    expect(meanQuota(params)).toBe(2_900);
  });

  it('sums the units of the last 60 s', () => {
    const perSecond = Array.from({ length: 120 }, (_, i) => i);
    expect(unitsInLastMinute(perSecond, 60)).toBe((59 * 60) / 2);
    expect(unitsInLastMinute(perSecond, 10)).toBe(45);
  });

  it('fits a demand list to the instances by using it in turn', () => {
    expect(fitDemand([2_000], 3)).toEqual([2_000, 2_000, 2_000]);
    expect(fitDemand([3_800, 200], 4)).toEqual([3_800, 200, 3_800, 200]);
  });
});
