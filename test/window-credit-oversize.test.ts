import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateLimitRejectedError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { ReadQuota } from '../src/limiter/types.js';
import { grantsOver, take, windowLimiter } from './helpers/window-limiter.js';

// A fixed window's credit and a request of more units than the window's whole limit, and a
// waiter held for its units that leaves. Every limiter runs on a manual clock.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** GitHub's hour as its profile reads it (5,000 a window), spent at 900 a minute. */
const hour = (remaining: number, resetMs: number): ReadQuota[] => [
  { policy: 'github:core', limit: 5_000, windowMs: 3_600_000, remaining, resetMs, burstPerMinute: 900 },
];

describe("a request larger than a fixed window's whole limit", () => {
  it('goes within maxWait on a window with all but 2 of its limit left, not refused after it', async () => {
    // maxWait 2 minutes, maxPause its default 10 minutes; GitHub's hour, 50 minutes to its reset.
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, slowStart: false, maxWait: 120_000 });
    // A window read twice, 4,998 left, nothing in flight. The API counts the call each answer
    // answers: no reading of it says 5,000 left, the "full window" the request would wait for.
    take(limiter).success(undefined, hour(4_999, 3_000_000));
    clock.advance(50);
    take(limiter).success(undefined, hour(4_998, 2_999_950));
    const outcome: string[] = [];
    limiter.acquire(6_000).then(
      (p) => {
        outcome.push('granted');
        p.success(undefined, hour(0, 2_999_000));
      },
      (error: RateLimitRejectedError) => outcome.push(error.reason),
    );
    for (let i = 0; i < 121; i++) {
      clock.advance(1_000);
      await flush();
    }
    // Refused with max-wait after 2 minutes (it waited for the reset, or for maxPause after the
    // reading), every request behind it held as long, where it went at its bucket's turn (60 s).
    expect(outcome).toEqual(['granted']);
  });
});

describe('a waiter held for its units that leaves', () => {
  it('lets the smaller request behind it go with the credit left, and the hold ends', async () => {
    const { clock, limiter } = windowLimiter();
    take(limiter).success(undefined, hour(10, 3_000_000));
    clock.advance(50);
    take(limiter).success(undefined, hour(9, 2_999_950));
    // 7 in flight: 2 left; a request of 5 waits, one of 1 behind it.
    expect(grantsOver(clock, limiter, 7)).toHaveLength(7);
    const abort = new AbortController();
    limiter.acquire(5, { signal: abort.signal }).catch(() => {});
    let granted = false;
    limiter.acquire(1).then(() => {
      granted = true;
    });
    await flush();
    expect(limiter.snapshot().heldUntil).toBeDefined();
    abort.abort();
    clock.advance(200);
    await flush();
    expect(granted).toBe(true);
    expect(limiter.snapshot().heldUntil).toBeUndefined();
  });
});
