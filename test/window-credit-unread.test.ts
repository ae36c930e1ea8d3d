import { describe, expect, it } from 'vitest';
import type { ManualClock } from '../src/clock.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { ReadQuota } from '../src/limiter/types.js';
import { grantsOver, take, windowLimiter } from './helpers/window-limiter.js';

// A fixed window's credit and the answers that tell nothing about the window (a proxy's 502, a
// 429 with no quota headers), and requests of several units. Every limiter runs on a manual
// clock; grants are counted with tryAcquire as the clock is stepped, never against real time.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** GitHub's hour as its profile reads it (5,000 a window), spent at 900 a minute. */
const hour = (remaining: number, resetMs: number): ReadQuota[] => [
  { policy: 'github:core', limit: 5_000, windowMs: 3_600_000, remaining, resetMs, burstPerMinute: 900 },
];

/** Two calls answered 10 and then 9 left of the hour: a fixed window, 9 left, nothing in flight. */
function windowWithNineLeft(clock: ManualClock, limiter: AdaptiveRateLimiter): void {
  take(limiter).success(undefined, hour(10, 3_000_000));
  clock.advance(50);
  take(limiter).success(undefined, hour(9, 2_999_950));
  expect(limiter.snapshot().announcedRate).toBe(900);
}

describe("a fixed window's credit and answers with no quota headers", () => {
  it("releases the unit of an answer with no quota headers (a proxy's 502): no hold until the reset", () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    const sent = grantsOver(clock, limiter);
    expect(sent).toHaveLength(9);
    expect(limiter.snapshot().heldUntil).toBeDefined();
    // A load balancer answers three with a 502 page (the others still in flight): no reading
    // will ever count them, and nothing else answers before the reset, 50 minutes away.
    for (const permit of sent.slice(0, 3)) permit.failed();
    expect(limiter.snapshot().heldUntil).toBeUndefined();
    expect(grantsOver(clock, limiter, 10)).toHaveLength(3);
  });

  it('releases the unit of a success with no quota headers', () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    const sent = grantsOver(clock, limiter);
    for (const permit of sent.slice(0, 2)) permit.success();
    expect(grantsOver(clock, limiter, 10)).toHaveLength(2);
  });

  it('counts a call throttled with no quota headers and then retried once', async () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    // 8 calls in flight, 1 left; the ninth is answered 429 with no quota headers.
    const sent = grantsOver(clock, limiter, 9);
    expect(sent).toHaveLength(9);
    sent[8]?.throttled(0);
    // Its retry takes the one unit left; with both counted it waited for the reset (50 minutes).
    let retried = false;
    limiter.acquire().then((p) => {
      retried = true;
      p.success(undefined, hour(0, 2_999_000));
    });
    clock.advance(100);
    await flush();
    expect(retried).toBe(true);
    expect(limiter.tryAcquire()).toBeUndefined();
  });
});

describe("a fixed window's credit and requests of several units", () => {
  it('holds a request larger than the credit left until a newer reading', async () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    // 7 in flight: 2 left.
    const sent = grantsOver(clock, limiter, 7);
    expect(sent).toHaveLength(7);
    clock.advance(100);
    expect(limiter.tryAcquire(5)).toBeUndefined();
    let granted = false;
    limiter.acquire(5).then((p) => {
      granted = true;
      p.success();
    });
    clock.advance(1_000);
    await flush();
    expect(granted).toBe(false);
    expect(limiter.snapshot().heldUntil).toBeDefined();
    // The last call sent, answered 1 s after it went, found 8 left: 8 more.
    sent[6]?.success(undefined, hour(8, 2_998_000));
    await flush();
    expect(granted).toBe(true);
  });

  it("goes with the credit left once it is enough, a small request not held by a large one's need", () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    grantsOver(clock, limiter, 7);
    clock.advance(100);
    expect(limiter.tryAcquire(2)).toBeDefined();
    clock.advance(100);
    expect(limiter.tryAcquire(1)).toBeUndefined();
  });

  it("lets a request larger than the window's whole limit go while any credit is left, as one of 1", async () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    let granted = false;
    limiter.acquire(6_000).then((p) => {
      granted = true;
      p.success(undefined, hour(0, 2_999_000));
    });
    // Its bucket's turn comes; the window has 9 left: it goes, the server deciding.
    for (let i = 0; i < 400 && !granted; i++) {
      clock.advance(1_000);
      await flush();
    }
    expect(granted).toBe(true);
  });

  it("holds a request larger than the window's whole limit while nothing is left, as one of 1", async () => {
    const { clock, limiter } = windowLimiter();
    windowWithNineLeft(clock, limiter);
    // 9 in flight: nothing left until a newer reading or the reset.
    expect(grantsOver(clock, limiter, 9)).toHaveLength(9);
    expect(limiter.tryAcquire(6_000)).toBeUndefined();
    expect(limiter.tryAcquire(1)).toBeUndefined();
  });
});

describe("a cold start's first reading of a window", () => {
  it('grants nothing past 0 before a second answer tells the window from a bucket', async () => {
    const { clock, limiter } = windowLimiter();
    // Five calls go before any answer; the first is answered: 3 left, the other 4 in flight.
    const first = take(limiter);
    const inFlight = grantsOver(clock, limiter, 4);
    expect(inFlight).toHaveLength(4);
    first.success(undefined, hour(3, 3_000_000));
    // One reading: not known yet as a window, and its credit (3 less 4 in flight) is below 0.
    expect(grantsOver(clock, limiter)).toHaveLength(0);
    expect(limiter.snapshot().heldUntil).toBeDefined();
    let granted = false;
    limiter.acquire().then(() => {
      granted = true;
    });
    // The last call in flight, answered: 1 left, nothing granted after it: the request goes.
    inFlight[3]?.success(undefined, hour(1, 2_989_900));
    await flush();
    expect(granted).toBe(true);
  });

  it("reads the first answer's quota before the cold start's cap lets a waiting request go", async () => {
    const { clock, limiter } = windowLimiter({ slowStart: 10 });
    // The cold start's 10 in flight at once, all the window had: the first answer says 9 left.
    const sent = Array.from({ length: 10 }, () => take(limiter));
    expect(limiter.tryAcquire()).toBeUndefined();
    let granted = false;
    limiter.acquire().then(() => {
      granted = true;
    });
    clock.advance(1_000);
    sent[0]?.success(undefined, hour(9, 2_999_000));
    await flush();
    expect(granted).toBe(false);
  });

  it.each([
    ['a 403 with nothing left (GitHub), throttled', 'throttled'],
    ['a 502 with the quota headers, failed', 'failed'],
  ] as const)(
    "reads the first answer's quota before the cold start's cap lets a waiting request go: %s",
    async (_, kind) => {
      const { clock, limiter } = windowLimiter({ slowStart: 10 });
      const sent = Array.from({ length: 10 }, () => take(limiter));
      let granted = false;
      limiter.acquire().then(() => {
        granted = true;
      });
      clock.advance(1_000);
      const quota = hour(kind === 'throttled' ? 0 : 9, 2_999_000);
      if (kind === 'throttled') sent[9]?.throttled(undefined, quota);
      else sent[0]?.failed(undefined, quota);
      await flush();
      expect(granted).toBe(false);
    },
  );
});
