import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AcceptedRate } from '../src/limiter/accepted-rate.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';

/** One success of one unit every `every` ms from `from` until before `to`. */
function successes(rate: AcceptedRate, from: number, to: number, every: number): void {
  for (let t = from; t < to; t += every) rate.record(1, t);
}

describe('the accepted rate', () => {
  it('reads the 3 s window over a second at least in the first second, over a slot after it', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    successes(rate, 0, 500, 50); // 10 units in the first 500 ms
    expect(rate.value(500)).toBeCloseTo(600); // 10 units over 1 s: one early answer is no rate
    successes(rate, 500, 1_500, 50); // 20 more
    expect(rate.value(1_500)).toBeCloseTo(1_200); // 30 units over 1.5 s
  });

  it('leaves the time a pause took out of the window', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    successes(rate, 0, 1_000, 50); // 20 units, then a pause of 1 s, then 20 more
    successes(rate, 2_000, 3_000, 50);
    // The window (2.75 s to 3 s with the open slot) holds 35 units over 2.75 s, 1 s of it
    // paused: 20 units/s while sending.
    expect(rate.value(3_000, (from) => Math.max(0, 2_000 - Math.max(from, 1_000)))).toBeCloseTo(1_200);
    expect(rate.value(3_000)).toBeCloseTo((35 * 60_000) / 2_750);
  });

  it('reads the last second from the first answer, over a slot at least', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    expect(rate.recent(100)).toBeUndefined();
    successes(rate, 100, 400, 10); // answers from 100 ms on (a latency after the first grant)
    // 30 units over the 300 ms since the first answer: 6,000/min (the window, from the first
    // grant: 4,500; 30 answers are enough to read a rate in the first second).
    expect(rate.recent(400)).toBeCloseTo(6_000);
    expect(rate.value(400)).toBeCloseTo(4_500);
    successes(rate, 400, 3_000, 10);
    expect(rate.recent(3_000)).toBeCloseTo(6_000); // steady: the same as the window
    expect(rate.value(3_000)).toBeCloseTo(6_000, -2);
  });
});

describe('the refill since the first cut', () => {
  it('a bucket that refilled during the pause: what got through over all the time since the cut, the pause included', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    successes(rate, 0, 100, 5); // the bucket's 20 in 100 ms, then the first cut
    rate.mark(100);
    expect(rate.refillSinceMark(150, 0)).toBeUndefined(); // nothing got through since: no reading
    // A pause of 1 s, then the 20 refilled during it and 2 more in 100 ms: 22 over 1.1 s.
    for (let i = 0; i < 22; i++) rate.record(1, 1_100 + 4 * i);
    expect(rate.refillSinceMark(1_200, 1_000)).toBeCloseTo(1_200);
    // The window less the pause read them over the 100 ms after it (and the burst before).
    expect(rate.sinceMark(1_200, 1_000)).toBeCloseTo(5_280);
  });

  it('a bucket smaller than the pause refills: what got through after the pause, less the burst before the cut', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    successes(rate, 0, 100, 10); // 10 in 100 ms, the first cut
    rate.mark(100);
    // After a pause of 1 s, 10 stored and 6,000 a minute for 500 ms (50 more): 60 units.
    for (let i = 0; i < 60; i++) rate.record(1, 1_100 + 8 * i);
    // Over the 1.5 s since the cut: 2,400; after the pause less the 10 of the burst: 6,000.
    expect(rate.refillSinceMark(1_600, 1_000)).toBeCloseTo(6_000);
  });

  it('less since the cut than the burst before it (a 429 a few ms after the pause): no reading of a refill', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    successes(rate, 0, 100, 5); // 20, the first cut
    rate.mark(100);
    for (let i = 0; i < 13; i++) rate.record(1, 1_100 + i / 4); // 13 within 5 ms of the pause's end
    expect(rate.refillSinceMark(1_105, 1_000)).toBeUndefined();
  });
});

describe('the accepted rate since a time', () => {
  it('reads the same slots as the window and the last second, with the same pauses left out', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    // Uneven answers (1 to 3 units every 13 ms) with a pause from 3,500 to 4,200 ms.
    for (let t = 0, i = 0; t < 6_000; t += 13, i++) if (t < 3_500 || t >= 4_200) rate.record(1 + (i % 3), t);
    let checked = 0;
    for (let now = 3_000; now < 6_000; now += 37) {
      // The time paused from `from` until now.
      const paused = (from: number) => Math.max(0, Math.min(4_200, now) - Math.max(from, 3_500));
      const slot = Math.floor(now / 250);
      // From the window's first slot (12 slots, the open one included) or earlier: the window.
      const window = rate.value(now, paused)!;
      expect(rate.since(0, now, paused)).toBeCloseTo(window, 9);
      expect(rate.since((slot - 11) * 250, now, paused)).toBeCloseTo(window, 9);
      expect(rate.since((slot - 11) * 250 - 249, now, paused)).toBeCloseTo(window, 9);
      // From the first of the last four slots: the last second, or none when less than a slot
      // of it was sending (the last second reads its floor of a slot then).
      const start = (slot - 3) * 250;
      const lastSecond = now - start - paused(start) < 250 ? undefined : rate.recent(now, paused);
      expect(rate.since(start, now, paused)).toBe(lastSecond);
      expect(rate.since(start - 249, now, paused)).toBe(lastSecond);
      checked += lastSecond === undefined ? 0 : 1;
    }
    expect(checked).toBeGreaterThan(60); // of 82 times
  });

  it('gives no rate from a time in the open slot, or when less than a slot of sending is left', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    successes(rate, 0, 2_000, 10);
    expect(rate.since(1_760, 2_000)).toBeUndefined(); // the open slot begins at 2,000: none after it
    expect(rate.since(1_750, 1_990)).toBeUndefined(); // 240 ms of the slot: less than a slot
    expect(rate.since(1_500, 2_000)).toBeCloseTo((50 * 60_000) / 500);
    expect(rate.since(1_500, 2_000, () => 300)).toBeUndefined(); // 200 ms sending
  });
});

describe('the accepted rate at thousands a second', () => {
  it('reads 16 answers or more in the first second over the time since the first grant, not over a second', () => {
    const rate = new AcceptedRate();
    rate.open(0);
    successes(rate, 1, 16, 1); // 15 answers by 15 ms: too few, over a second as before
    expect(rate.value(15)).toBeCloseTo(15 * 60);
    successes(rate, 16, 31, 1); // 30 answers by 30 ms: 1,000 a second
    expect(rate.value(30)).toBeCloseTo(60_000);
    // The last second keeps its slot: answers that came together are no rate.
    expect(rate.recent(30)).toBeCloseTo((30 * 60_000) / 250);
  });

  it('has a first cut of a fast limiter start from what got through, not a tenth of it', () => {
    const clock = new ManualClock(0);
    // 3,000 a second granted and answered at once for 20 ms, then a throttle.
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 180_000, controller: 'probe' });
    for (let i = 0; i < 60; i++) {
      limiter.tryAcquire()?.success();
      clock.advance(1 / 3);
    }
    limiter.tryAcquire()!.throttled();
    // Probe drains at 0.9 of the accepted rate (about 180,000/min); over a slot it read 14,400.
    expect(limiter.rate).toBeGreaterThan(0.6 * 180_000);
  });
});

describe('a limiter paused by a Retry-After', () => {
  it('reports its accepted rate without the pause, and cuts again from it', () => {
    const clock = new ManualClock(0);
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 6_000, controller: 'aimd' });
    for (let t = 0; t < 1_000; t += 20) {
      limiter.tryAcquire()?.success();
      clock.advance(20);
    }
    limiter.tryAcquire()!.throttled(1_000); // a cut, and 1 s of pause
    clock.advance(1_000);
    for (let t = 0; t < 1_000; t += 20) {
      limiter.tryAcquire()?.success();
      clock.advance(20);
    }
    // About 50 units a second while sending, over the 2 s it sent (not the 3 s).
    expect(limiter.snapshot().acceptedRate! / 3_000).toBeGreaterThan(0.9);
  });
});
