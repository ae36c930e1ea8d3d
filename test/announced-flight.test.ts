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
