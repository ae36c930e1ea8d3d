import { describe, expect, it } from 'vitest';
import type { ManualClock } from '../src/clock.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { ReadQuota } from '../src/limiter/types.js';
import { grantsOver, take, windowLimiter } from './helpers/window-limiter.js';

// A review of the fixed window's credit (see window-credit.test.ts). Every limiter runs on a
// manual clock; grants are counted with tryAcquire as the clock is stepped, never against real time.

/** GitHub's headers as the profile reads them: one resource's window, spent at 900 a minute. */
const github = (resource: string, limit: number, windowMs: number) => (remaining: number, resetMs: number) =>
  [{ policy: `github:${resource}`, limit, windowMs, remaining, resetMs, burstPerMinute: 900 }] as ReadQuota[];
const core = github('core', 5_000, 3_600_000);
const search = github('search', 30, 60_000);

describe("a fixed window's credit, reviewed", () => {
  it("does not set calls answered by another policy against a window's credit (GitHub's search and core on one origin)", () => {
    const { clock, limiter } = windowLimiter();
    // core and search both read as fixed windows: core with 3,999 left, search with 2.
    const first = [take(limiter), take(limiter), take(limiter), take(limiter)];
    first[0]?.success(undefined, core(4_000, 3_000_000));
    clock.advance(100);
    first[1]?.success(undefined, core(3_999, 2_999_900));
    first[2]?.success(undefined, search(3, 50_000));
    clock.advance(100);
    first[3]?.success(undefined, search(2, 49_900));
    expect(limiter.snapshot().announcedRate).toBe(900);
    // Two core calls, answered as core's: search still has its 2, core thousands.
    clock.advance(100);
    const a = take(limiter);
    clock.advance(100);
    const b = take(limiter);
    a.success(undefined, core(3_998, 2_999_500));
    b.success(undefined, core(3_997, 2_999_400));
    // Held until search's reset (49 s away) while no policy's window was spent.
    expect(grantsOver(clock, limiter, 10).length).toBeGreaterThan(0);
  });
});

describe("a fixed window's hold, reviewed", () => {
  /** An hour read as a fixed window this process is alone on, with 1 left; the next call spends it. */
  function windowWithOneLeft(clock: ManualClock, limiter: AdaptiveRateLimiter): void {
    take(limiter).success(undefined, core(2, 3_000_000));
    clock.advance(50);
    take(limiter).success(undefined, core(1, 2_999_950));
    expect(limiter.snapshot().announcedRate).toBe(900);
  }

  it('holds an exhausted window no longer than maxPause, as its pause', () => {
    const { clock, limiter } = windowLimiter({ maxPause: 60_000 });
    windowWithOneLeft(clock, limiter);
    clock.advance(100);
    take(limiter).success(undefined, core(0, 2_999_850));
    expect(limiter.snapshot().pausedUntil).toBe(clock.now() + 60_000);
    clock.advance(60_000);
    // The pause ended at maxPause; the hold went on to the reset, 49 minutes later.
    expect(limiter.tryAcquire()).toBeDefined();
  });
});

describe("a fixed window's hold in snapshot(), reviewed", () => {
  it('tells until when a used-up credit holds grants, where nothing else says why requests wait', () => {
    const { clock, limiter } = windowLimiter();
    take(limiter).success(undefined, core(2, 3_000_000));
    clock.advance(50);
    const readAt = clock.now();
    take(limiter).success(undefined, core(1, 2_999_950));
    clock.advance(100);
    take(limiter); // in flight: it spends the 1 left
    clock.advance(100);
    expect(limiter.tryAcquire()).toBeUndefined();
    const snapshot = limiter.snapshot();
    expect(snapshot.pausedUntil).toBeUndefined();
    expect(snapshot.heldUntil).toBe(readAt + 2_999_950);
  });
});
