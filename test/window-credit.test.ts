import { describe, expect, it } from 'vitest';
import type { ManualClock } from '../src/clock.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { noAnswer, notSent } from '../src/limiter/permit.js';
import type { AnnouncedQuota, ReadQuota } from '../src/limiter/types.js';
import { grantsOver, take, windowLimiter } from './helpers/window-limiter.js';

// A fixed window's credit: what this process may still send in it, the last `remaining` less the
// units granted after the request whose answer gave that reading. Every limiter runs on a manual
// clock; grants are counted with tryAcquire as the clock is stepped, never against real time.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A GitHub-like hour (5,000 a window, the reset `resetMs` away), spent at GitHub's 900 a minute. */
const hour = (remaining: number, resetMs: number): ReadQuota[] => [
  { policy: 'core', limit: 5_000, windowMs: 3_600_000, remaining, resetMs, burstPerMinute: 900 },
];

/**
 * Two calls one after the other, answered 10 and then 9 left of the hour (the same reset): read
 * as a fixed window this process is alone on, spent at 900 a minute, 9 left and nothing in flight.
 */
function windowWithNineLeft(clock: ManualClock, limiter: AdaptiveRateLimiter): void {
  take(limiter).success(undefined, hour(10, 3_000_000));
  clock.advance(50);
  take(limiter).success(undefined, hour(9, 2_999_950));
  expect(limiter.snapshot().announcedRate).toBe(900);
}

describe("a fixed window's credit: remaining less the calls granted after the reading", () => {
  it('grants what the reading left less the calls still in flight, then no more', () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    clock.advance(100);
    const c = take(limiter);
    clock.advance(100);
    take(limiter);
    // 8 left once c arrived; the call granted after it is in flight: 7 more.
    c.success(undefined, hour(8, 2_999_850));
    expect(grantsOver(clock, limiter)).toHaveLength(7);
  });

  it('a newer reading gives the credit again, and a waiting request goes at once', async () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    const inFlight = grantsOver(clock, limiter);
    expect(inFlight).toHaveLength(9);
    let granted = false;
    const waiting = limiter.acquire().then((p) => {
      granted = true;
      return p;
    });
    await flush();
    expect(granted).toBe(false);
    // The last call granted arrived first and found 4 left: nothing granted since it, 4 more.
    inFlight[8]?.success(undefined, hour(4, 2_989_000));
    await flush();
    expect(granted).toBe(true);
    // Still in flight (an answer with no quota headers would release its unit).
    await waiting;
    expect(grantsOver(clock, limiter)).toHaveLength(3);
  });

  it('calls in flight that end with no answer release it: no stall', async () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    const inFlight = grantsOver(clock, limiter);
    expect(inFlight).toHaveLength(9);
    let granted = false;
    // Granted and still in flight (an answer with no quota headers would release its unit).
    limiter.acquire().then(() => {
      granted = true;
    });
    // Their connections refused (never sent) or reset (no answer): the API counted none.
    for (const [i, permit] of inFlight.entries()) {
      if (i % 2 === 0) notSent(permit);
      else noAnswer(permit);
    }
    await flush();
    expect(granted).toBe(true);
    expect(grantsOver(clock, limiter)).toHaveLength(8);
  });

  it("the window's reset releases it, with calls still in flight", async () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    expect(grantsOver(clock, limiter)).toHaveLength(9);
    let granted = false;
    limiter.acquire().then((p) => {
      granted = true;
      p.success();
    });
    clock.advance(2_999_950 - 100 * 100 - 1);
    await flush();
    expect(granted).toBe(false);
    clock.advance(1);
    await flush();
    expect(granted).toBe(true);
  });

  it('a refilling bucket is paced at its quota, its calls in flight not set against remaining', () => {
    const { clock, limiter } = windowLimiter();
    const bucket = (remaining: number): AnnouncedQuota[] => [
      { policy: 'b', limit: 600, windowMs: 60_000, remaining, resetMs: 1_000 },
    ];
    take(limiter).success(undefined, bucket(1));
    clock.advance(200);
    take(limiter).success(undefined, bucket(2));
    expect(limiter.snapshot().announcedRate).toBe(600);
    // 2 left and none answered: still one every 100 ms for 10 s.
    expect(grantsOver(clock, limiter)).toHaveLength(100);
  });

  it("burst: 'announced' on a fixed window grants no more than its credit", () => {
    const { clock, limiter } = windowLimiter({ burst: 'announced' });
    windowWithNineLeft(clock, limiter);
    expect(grantsOver(clock, limiter)).toHaveLength(9);
  });
});
