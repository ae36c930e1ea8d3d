import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { kNoCrowdWait } from '../src/internal.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { CROWD_LEARNED, CrowdWait } from '../src/limiter/crowd-wait.js';
import type { Permit } from '../src/limiter/types.js';

describe('CrowdWait: the wait after a 429 that says nothing, before a rate is learned', () => {
  it('draws a fresh limiter wait over a minute: at least 1 s, within the cap', () => {
    const crowd = new CrowdWait();
    expect(crowd.throttled(0, 60_000, 0)).toBe(1_000);
    expect(new CrowdWait().throttled(0.5, 60_000, 0)).toBe(30_500);
    expect(new CrowdWait().throttled(0.999, 60_000, 0)).toBeCloseTo(59_941, 0);
    // maxWait caps the window: the wait alone never makes a retry refused.
    expect(new CrowdWait().throttled(0.5, 10_000, 0)).toBe(5_500);
    expect(new CrowdWait().throttled(0.5, 400, 0)).toBe(400);
  });

  it('shortens the first window by the part of the successes it had', () => {
    const crowd = new CrowdWait();
    for (let i = 0; i < CROWD_LEARNED / 2; i++) crowd.success();
    // Half learned: a window of 30 s.
    expect(crowd.throttled(1 - Number.EPSILON, 60_000, 0)).toBeCloseTo(30_000, 0);
  });

  it('sends a second such 429 in a row past the end of the first window, into a fifth of it more', () => {
    const low = new CrowdWait();
    const high = new CrowdWait();
    for (let i = 0; i < CROWD_LEARNED / 2; i++) {
      low.success();
      high.success();
    }
    // Both meet the bucket at 30 s and draw 10 s of a window of 30 s (ending at 60 s), and meet it
    // empty again at 40 s: the next wait ends between 60 s and 66 s (the window grown by a fifth),
    // not among the crowd's first retries (the old doubled window: 41-100 s).
    const first = 1_000 + (9_000 / 29_000) * 29_000;
    expect(low.throttled(9_000 / 29_000, 60_000, 30_000)).toBeCloseTo(first, 6);
    expect(high.throttled(9_000 / 29_000, 60_000, 30_000)).toBeCloseTo(first, 6);
    expect(low.throttled(0, 60_000, 40_000)).toBe(20_000);
    expect(high.throttled(1 - Number.EPSILON, 60_000, 40_000)).toBeCloseTo(26_000, 0);
    // A third: past 66 s, within a slice half as long (3 s): 66-69 s (those left are fewer: a
    // slice 1.3 times as long, 66-73.8 s, sent the last of them past what the bucket needs).
    expect(low.throttled(0, 60_000, 61_000)).toBe(5_000);
    expect(high.throttled(1 - Number.EPSILON, 60_000, 64_000)).toBeCloseTo(5_000, 0);
    // A fourth that comes after the window has ended (a pause cut short): a slice as long from
    // now (3 s), at least 1 s.
    expect(low.throttled(0, 60_000, 90_000)).toBe(1_000);
    expect(high.throttled(1 - Number.EPSILON, 60_000, 90_000)).toBeCloseTo(3_000, 0);
    // From the fifth in a row the slices grow 1.3 times each: 3.9 s, then 5.07 s.
    expect(high.throttled(1 - Number.EPSILON, 60_000, 100_000)).toBeCloseTo(3_900, 0);
    expect(high.throttled(1 - Number.EPSILON, 60_000, 110_000)).toBeCloseTo(5_070, 0);
    // A success starts the windows again, from the successes had.
    low.success();
    expect(low.throttled(1 - Number.EPSILON, 60_000, 100_000)).toBeLessThan(30_000);
  });

  it('after a success soon after its wait, draws a bare 429 late in a window that ends where the last one did, or after 0.55 of the first', () => {
    /** A limiter's wait that had one success, a bare 429 at 0 (a window of 58 s), then 3 successes. */
    const served = () => {
      const crowd = new CrowdWait();
      crowd.success();
      crowd.throttled(0.5, 60_000, 0);
      for (let i = 0; i < 3; i++) crowd.success();
      return crowd;
    };
    // 4 successes: a first window of 52 s. At 10 s the last window has 48 s left: the window is
    // 48 s, the wait drawn from 0.6 of it (a fresh window from now: 1-52 s).
    expect(served().throttled(0, 60_000, 10_000)).toBeCloseTo(28_800, 6);
    expect(served().throttled(1 - Number.EPSILON, 60_000, 10_000)).toBeCloseTo(48_000, 0);
    // At 40 s (18 s left) and after it: 0.55 of 52 s, 28.6 s, the wait from 17.16 s.
    expect(served().throttled(0, 60_000, 40_000)).toBeCloseTo(17_160, 6);
    expect(served().throttled(1 - Number.EPSILON, 60_000, 40_000)).toBeCloseTo(28_600, 0);
    // So until a fresh window (52 s) after the last wait's end (29.5 s): 81.5 s.
    expect(served().throttled(0, 60_000, 81_500)).toBeCloseTo(17_160, 6);
    // Later, the bucket has refilled at the quota's pace since: a fresh window, 1-52 s.
    expect(served().throttled(0, 60_000, 81_501)).toBe(1_000);
    expect(served().throttled(1 - Number.EPSILON, 60_000, 81_501)).toBeCloseTo(52_000, 0);
    expect(served().throttled(0, 60_000, 3_600_000)).toBe(1_000);
    // Never longer than the first window: at 1 s (57 s left), 52 s.
    expect(served().throttled(1 - Number.EPSILON, 60_000, 1_000)).toBeCloseTo(52_000, 0);
    // A second in a row after it: a slice of a fifth of that window past its end.
    const again = served();
    again.throttled(0, 60_000, 40_000);
    expect(again.throttled(1 - Number.EPSILON, 60_000, 60_000)).toBeCloseTo(68_600 + 5_720 - 60_000, 0);
  });

  it("keeps a limiter whose only success came after its wait in the crowd's window on its next bare 429", () => {
    // A process of a crowd that started late: its first request met the empty bucket at 0 (a
    // window of 60 s), again at 10 s (past 60 s, within a slice of 12 s: until 65 s; the next
    // slice 6 s), served at 66 s, and meets the bucket at 67 s: the crowd's window ends at 72 s.
    const late = () => {
      const crowd = new CrowdWait();
      crowd.throttled(0, 60_000, 0);
      expect(crowd.throttled(0.5, 60_000, 10_000)).toBe(55_000);
      crowd.success();
      return crowd;
    };
    // Within it (5 s left, a slice of 6 s: the longer), from 0.6 of it: 3.6-6 s, not 19.1-31.9 s
    // (0.55 of a fresh window of 58 s, which sent it 20 s past the rest of the crowd).
    expect(late().throttled(0, 60_000, 67_000)).toBeCloseTo(3_600, 6);
    expect(late().throttled(1 - Number.EPSILON, 60_000, 67_000)).toBeCloseTo(6_000, 0);
    // After the window's end: a slice from now.
    expect(late().throttled(1 - Number.EPSILON, 60_000, 80_000)).toBeCloseTo(6_000, 0);
    // Its slices go on: a second in a row after it, past that window (73 s) within the slice it
    // had left (6 s; not a fifth of a fresh window, 11.6 s).
    const again = () => {
      const crowd = late();
      crowd.throttled(0, 60_000, 67_000);
      return crowd;
    };
    expect(again().throttled(0, 60_000, 71_000)).toBe(2_000);
    expect(again().throttled(1 - Number.EPSILON, 60_000, 71_000)).toBeCloseTo(8_000, 0);
    // A limiter with a success before its wait as well keeps the later window (0.55 of 56 s).
    const twice = late();
    twice.success();
    expect(twice.throttled(1 - Number.EPSILON, 60_000, 67_000)).toBeCloseTo(30_800, 0);
  });

  it('keeps the row through a success sent before the wait, and counts it toward learning', () => {
    const crowd = new CrowdWait();
    crowd.throttled(0.5, 60_000, 0);
    crowd.success(true);
    // Still a second in a row: past the first window's end (60 s), within 12 s more.
    expect(crowd.throttled(0, 60_000, 30_500)).toBe(29_500);
    for (let i = 0; i < CROWD_LEARNED - 2; i++) crowd.success(true);
    expect(crowd.learned).toBe(false);
    crowd.success(true);
    expect(crowd.learned).toBe(true);
  });

  it('never waits more than a minute nor the cap', () => {
    const crowd = new CrowdWait();
    crowd.success();
    // One success: a window of 58 s; the second 429 at 1 s: past 58 s, within 69.6 s, at most 60 s.
    crowd.throttled(0, 60_000, 0);
    expect(crowd.throttled(0, 60_000, 1_000)).toBe(57_000);
    expect(crowd.throttled(1 - Number.EPSILON, 60_000, 2_000)).toBeCloseTo(60_000, 0);
    const capped = new CrowdWait();
    capped.throttled(0.5, 10_000, 0);
    // The window used was the cap's 10 s: the next one ends within 2 s after it.
    expect(capped.throttled(1 - Number.EPSILON, 10_000, 9_000)).toBeCloseTo(3_000, 0);
    // The next one (12-13 s) at 9 s with a cap of 2 s: the cap.
    expect(capped.throttled(0.5, 2_000, 9_000)).toBe(2_000);
  });

  it('waits no more once the limiter has learned a rate', () => {
    const crowd = new CrowdWait();
    for (let i = 0; i < CROWD_LEARNED - 1; i++) crowd.success();
    expect(crowd.learned).toBe(false);
    expect(crowd.throttled(0.5, 60_000, 0)).toBeGreaterThan(0);
    crowd.success();
    expect(crowd.learned).toBe(true);
    expect(crowd.throttled(0.5, 60_000, 0)).toBe(0);
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

  it('pauses a second bare 429 in a row until after the first window, within a fifth of it more', () => {
    const { clock, limiter } = fresh();
    take(limiter).success();
    take(limiter).throttled();
    // One success: a window of 58 s from 0; its middle, 29.5 s.
    const first = limiter.snapshot().pausedUntil ?? 0;
    expect(first).toBeCloseTo(29_500, 6);
    clock.advance(Math.ceil(first));
    take(limiter).throttled();
    // Past 58 s, in the middle of the 11.6 s the window grows by (a doubled one: 60 s).
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(58_000 + 5_800, 6);
  });

  it('counts the bare 429s of requests sent together as one: those answered during its wait sent before it', () => {
    const { clock, limiter } = fresh();
    const burst = [take(limiter), take(limiter), take(limiter)];
    for (const permit of burst) permit.throttled();
    // No success: a window of 60 s, the wait in its middle (30.5 s), not past the window's end
    // (the second 429 read as another in a row: 60 s, for every process of a crowd alike).
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(30_500, 6);
    clock.advance(30_500);
    // The next request's 429 is the second in a row: past 60 s, in the middle of the next 12 s.
    take(limiter).throttled();
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(60_000 + 6_000, 6);
  });

  it('keeps a success answered during its wait from ending the row: its request was sent before the wait', () => {
    const { clock, limiter } = fresh();
    const early = take(limiter);
    take(limiter).throttled();
    // No success: a window of 60 s, the wait in its middle (30.5 s).
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(30_500, 6);
    // The other request, sent with the first, is served during the wait: it says nothing of the
    // bucket since, and counts toward learning only.
    clock.advance(1_000);
    early.success();
    clock.advance(29_500);
    // The next request's 429 is the second in a row: past 60 s, in the middle of the next 12 s
    // (not read as a 429 after a served wait: late in a window of 0.55 of 58 s, at 56.02 s).
    take(limiter).throttled();
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(60_000 + 6_000, 6);
  });

  it('ends the fourth bare 429 in a row within short slices after the first: 81.2 s for one success', () => {
    const { clock, limiter } = fresh();
    take(limiter).success();
    const ends: number[] = [];
    for (let i = 0; i < 5; i++) {
      take(limiter).throttled();
      const until = limiter.snapshot().pausedUntil ?? 0;
      ends.push(until);
      clock.advance(Math.ceil(until - clock.now()));
    }
    // The window of 58 s, a slice of 11.6 s, two of 5.8 s, then one of 7.54 s: each wait in the
    // middle of its slice (growing slices of 15.08 s and 19.6 s ended the fourth at 94.5 s).
    expect(ends[0]).toBeCloseTo(29_000 + 500, 6);
    expect(ends[1]).toBeCloseTo(58_000 + 5_800, 6);
    expect(ends[2]).toBeCloseTo(69_600 + 2_900, 6);
    expect(ends[3]).toBeCloseTo(75_400 + 2_900, 6);
    expect(ends[4]).toBeCloseTo(81_200 + 3_770, 6);
  });

  it('pauses a bare 429 after a served wait to late in a shorter window', () => {
    const { clock, limiter } = fresh();
    for (let i = 0; i < 4; i++) take(limiter).success();
    take(limiter).throttled();
    // 4 successes: a window of 52 s, the wait in its middle (26.5 s); then a fifth, sent after
    // it, is served, and the next request (0.1 s later) meets the bucket it emptied.
    clock.advance(26_500);
    take(limiter).success();
    clock.advance(100);
    take(limiter).throttled();
    // 5 successes: 50 s, at least 0.55 of it (27.5 s; the last window has 25.4 s left), the wait
    // from 0.6 of it: the middle of 16.5-27.5 s from 26.6 s (a fresh window: 25.4 s, ending at 52 s).
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(26_600 + 16_500 + 0.5 * (27_500 - 16_500), 6);
  });

  it('draws a fresh window for a bare 429 long after a served wait (a quiet process, an hour later)', () => {
    const { clock, limiter } = fresh();
    for (let i = 0; i < 10; i++) take(limiter).success();
    take(limiter).throttled();
    // 10 successes: a window of 40 s, the wait in its middle (20.5 s); then a request sent after
    // it is served.
    clock.advance(21_000);
    take(limiter).success();
    // An hour later, with 11 successes: a fresh window of 38 s from now, the wait in its middle
    // (not drawn from 0.6 of 0.55 of it: 16.72 s).
    clock.advance(3_600_000);
    take(limiter).throttled();
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(clock.now() + 1_000 + 0.5 * (38_000 - 1_000), 6);
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
