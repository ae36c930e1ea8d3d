import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { kNoCrowdWait } from '../src/internal.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { CROWD_LEARNED, CrowdWait } from '../src/limiter/crowd-wait.js';
import type { Permit } from '../src/limiter/types.js';

describe('CrowdWait: the wait after a 429 that says nothing, before a rate is learned', () => {
  it('draws a fresh limiter wait over a minute: at least 1 s, within the cap', () => {
    const crowd = new CrowdWait();
    expect(crowd.throttled(0, 60_000)).toBe(1_000);
    expect(new CrowdWait().throttled(0.5, 60_000)).toBe(30_500);
    expect(new CrowdWait().throttled(0.999, 60_000)).toBeCloseTo(59_941, 0);
    // maxWait caps the window: the wait alone never makes a retry refused.
    expect(new CrowdWait().throttled(0.5, 10_000)).toBe(5_500);
    expect(new CrowdWait().throttled(0.5, 400)).toBe(400);
  });

  it('shortens the window by the part of the successes it had, and doubles it for each such 429 in a row', () => {
    const crowd = new CrowdWait();
    for (let i = 0; i < CROWD_LEARNED / 2; i++) crowd.success();
    // Half learned: a window of 30 s.
    expect(crowd.throttled(1 - Number.EPSILON, 60_000)).toBeCloseTo(30_000, 0);
    // The second in a row: 60 s.
    expect(crowd.throttled(1 - Number.EPSILON, 60_000)).toBeCloseTo(60_000, 0);
    // Then no more than the longest window (60 s).
    expect(crowd.throttled(1 - Number.EPSILON, 600_000)).toBeCloseTo(60_000, 0);
    // A success starts the windows again.
    crowd.success();
    expect(crowd.throttled(1 - Number.EPSILON, 60_000)).toBeLessThan(30_000);
  });

  it('waits no more once the limiter has learned a rate', () => {
    const crowd = new CrowdWait();
    for (let i = 0; i < CROWD_LEARNED - 1; i++) crowd.success();
    expect(crowd.learned).toBe(false);
    expect(crowd.throttled(0.5, 60_000)).toBeGreaterThan(0);
    crowd.success();
    expect(crowd.learned).toBe(true);
    expect(crowd.throttled(0.5, 60_000)).toBe(0);
  });
});

describe('AdaptiveRateLimiter: the crowd wait of a cold start', () => {
  /** A limiter with no options but the clock and a fixed random number. */
  const fresh = (options: { initialUnitsPerMinute?: number; maxWait?: number } = {}) => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, random: () => 0.5, ...options });
    return { clock, limiter };
  };
  const take = (limiter: AdaptiveRateLimiter): Permit => {
    const permit = limiter.tryAcquire();
    if (permit === undefined) throw new Error('no permit');
    return permit;
  };

  it('pauses every send for a drawn wait after a bare 429 (no Retry-After, no quota), and tells it', () => {
    const { clock, limiter } = fresh();
    const paused: { ms: number; requestedMs: number }[] = [];
    limiter.on('paused', (e) => paused.push(e));
    take(limiter).success();
    take(limiter).throttled();
    // One success of 30: a window of 58 s, the middle of it after the least second.
    const wait = 1_000 + 0.5 * (60_000 * (1 - 1 / CROWD_LEARNED) - 1_000);
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(wait, 6);
    expect(paused).toEqual([
      { limiter: 'default', until: limiter.snapshot().pausedUntil, ms: wait, requestedMs: wait },
    ]);
    expect(limiter.tryAcquire()).toBeUndefined();
    clock.advance(Math.ceil(wait));
    expect(limiter.tryAcquire()).toBeDefined();
  });

  it('keeps the wait within maxWait, so a retry is not refused for it alone', () => {
    const { limiter } = fresh({ maxWait: 4_000 });
    take(limiter).throttled();
    expect(limiter.snapshot().pausedUntil).toBe(1_000 + 0.5 * 3_000);
  });

  it('waits for a Retry-After instead, and not at all with an initial rate, once learned, or in a shared budget', () => {
    const told = fresh();
    take(told.limiter).throttled(2_000);
    expect(told.limiter.snapshot().pausedUntil).toBe(2_000);

    const configured = fresh({ initialUnitsPerMinute: 600 });
    take(configured.limiter).throttled();
    expect(configured.limiter.snapshot().pausedUntil).toBeUndefined();

    const learned = fresh();
    for (let i = 0; i < CROWD_LEARNED; i++) take(learned.limiter).success();
    take(learned.limiter).throttled();
    expect(learned.limiter.snapshot().pausedUntil).toBeUndefined();

    const member = fresh();
    member.limiter[kNoCrowdWait]();
    take(member.limiter).throttled();
    expect(member.limiter.snapshot().pausedUntil).toBeUndefined();
  });

  it('does not wait after a 429 from an API that announced its quota (the quota says how long)', () => {
    const { limiter } = fresh();
    take(limiter).success(undefined, [{ remaining: 5, resetMs: 10_000, limit: 10, windowMs: 10_000 }]);
    take(limiter).throttled();
    expect(limiter.snapshot().pausedUntil).toBeUndefined();
  });
});
