import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';

// The announced bucket (`burst: 'announced'`) numbers the permits it grants and keeps each one's
// units until it is answered (an answer's `remaining` has not counted the units granted after its
// call). A permit its caller drops without settling it is never answered: its entry stayed for the
// life of the limiter, and every later answer walked over it. Before the numbering, such a permit
// left nothing behind but a count.

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

async function heapAfterGc(): Promise<number> {
  for (let i = 0; i < 4; i++) {
    gc();
    // Finalizers run in a task of their own, after the gc that found their objects dead.
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  gc();
  return process.memoryUsage().heapUsed;
}

const minute = 60_000;

describe("burst: 'announced', permits dropped without an answer", () => {
  it('100,000 permits never settled are not kept once their caller lets go of them', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, burst: 'announced', slowStart: false, reserve: 0 });
    const quota = (remaining: number) => [{ limit: 1_000_000_000, remaining, windowMs: minute }];
    limiter.tryAcquire(1)?.success(undefined, quota(999_999_999));
    const before = await heapAfterGc();
    for (let i = 0; i < 100_000; i++) limiter.tryAcquire(1);
    const after = await heapAfterGc();
    // Each kept entry cost about 30 bytes (3 MB in all); nothing is kept for them now.
    expect(after - before).toBeLessThan(1_000_000);
    // The limiter goes on: an answer counts the units granted after its call and still in flight.
    const first = limiter.tryAcquire(100);
    const second = limiter.tryAcquire(200);
    if (first === undefined || second === undefined) throw new Error('not granted');
    first.success(undefined, quota(1_000));
    expect(limiter.snapshot().tokens).toBeCloseTo(800, 0);
    second.success(undefined, quota(800));
    expect(limiter.snapshot().tokens).toBeCloseTo(800, 0);
  });
});

describe("burst: 'announced', a refund after an answer that counted the units still in flight", () => {
  it("does not lift the level above the answer's remaining less the units granted after its call", () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ name: 'tokens', burst: 'announced', clock, reserve: 0 });
    const quota = (remaining: number) => [{ limit: 20_000, remaining, windowMs: minute }];
    limiter.tryAcquire(500)?.success(undefined, quota(19_500));
    const sent = [500, 500, 500, 500].map((units) => limiter.tryAcquire(units));
    if (sent.some((p) => p === undefined)) throw new Error('not granted');
    // Another process drained the key: 2,000 remain at the answer to the first of the four, and
    // the three still in flight will take 1,500 of them.
    sent[0]?.success(undefined, quota(2_000));
    expect(limiter.snapshot().tokens).toBeCloseTo(500, 0);
    // Its usage came under its estimate by 300: the API counted the usage in that `remaining`.
    limiter.charge(-300);
    // Lifted to 800, the process sent 300 tokens more than the key had left: a 429.
    expect(limiter.snapshot().tokens).toBeLessThanOrEqual(500);
    // A call granted after the answer keeps its refund (the API had not counted it).
    const later = limiter.tryAcquire(400);
    if (later === undefined) throw new Error('not granted');
    limiter.charge(-100);
    expect(limiter.snapshot().tokens).toBeCloseTo(200, 0);
  });

  it("several budgets: a refused call's draw, given back, still lifts the level by its units", () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      burst: 'announced',
      reserve: 0,
      slowStart: false,
      budgets: { requests: {}, tokens: {} },
    });
    const quota = (requests: number, tokens: number) => [
      { budget: 'requests', limit: 1_000, remaining: requests, windowMs: minute },
      { budget: 'tokens', limit: 20_000, remaining: tokens, windowMs: minute },
    ];
    const level = () => limiter.snapshot().budgets?.tokens?.tokens;
    limiter.tryAcquire(1, { tokens: 500 })?.success(undefined, quota(999, 19_500));
    const answered = limiter.tryAcquire(1, { tokens: 500 });
    const refused = limiter.tryAcquire(1, { tokens: 500 });
    if (answered === undefined || refused === undefined) throw new Error('not granted');
    answered.success(undefined, quota(998, 19_000));
    expect(level()).toBeCloseTo(18_500, 0);
    // Refused for its requests: the API never charged its 500 tokens, which come back.
    refused.throttled(undefined, quota(0, 19_000));
    expect(level()).toBeCloseTo(19_000, 0);
  });
});
