import { describe, expect, it } from 'vitest';
import type { ReadQuota } from '../src/limiter/types.js';
import { grantsOver, take, windowLimiter } from './helpers/window-limiter.js';

// An API that sends its quota headers on some answers only (GitHub's on most, a proxy's cached
// or error pages on none): what the last headers said holds until their window's reset, then is
// forgotten. Every limiter runs on a manual clock; grants are counted with tryAcquire.

/** A GitHub-like hour (5,000 a window, the reset `resetMs` away), spent at GitHub's 900 a minute. */
const hour = (remaining: number, resetMs: number): ReadQuota[] => [
  { policy: 'core', limit: 5_000, windowMs: 3_600_000, remaining, resetMs, burstPerMinute: 900 },
];

describe('a window read from the headers of some answers only', () => {
  it('keeps its ceiling and its credit through answers without quota headers, until the reset', () => {
    const { clock, limiter } = windowLimiter();
    take(limiter).success(undefined, hour(10, 600_000));
    clock.advance(50);
    take(limiter).success(undefined, hour(9, 599_950));
    expect(limiter.snapshot().announcedRate).toBe(900);
    // Six answers with no quota headers (each one's unit released: no reading counts it yet).
    for (let i = 0; i < 6; i++) {
      clock.advance(100);
      take(limiter).success();
    }
    expect(limiter.snapshot().announcedRate).toBe(900);
    // One call answered with 3 left of the window; nothing granted since: 3 more, then held.
    clock.advance(100);
    take(limiter).success(undefined, hour(3, 599_000));
    for (let i = 0; i < 5; i++) {
      clock.advance(100);
      take(limiter).success();
    }
    expect(limiter.snapshot().announcedRate).toBe(900);
    const inFlight = grantsOver(clock, limiter);
    expect(inFlight).toHaveLength(3);
  });

  it('forgets what the headers said once their reset has passed', () => {
    const { clock, limiter } = windowLimiter();
    take(limiter).success(undefined, hour(10, 60_000));
    clock.advance(50);
    take(limiter).success(undefined, hour(9, 59_950));
    for (let i = 0; i < 6; i++) {
      clock.advance(100);
      take(limiter).success();
    }
    expect(limiter.snapshot().announcedRate).toBe(900);
    clock.advance(60_000);
    take(limiter).success();
    expect(limiter.snapshot().announcedRate).toBeUndefined();
  });
});
