import { describe, expect, it } from 'vitest';
import { Pacer } from '../src/limiter/pacer.js';

/** Grants one-unit waiters at `now` while the pacer lets them go (a timer wake's drain); how many. */
function drain(pacer: Pacer, now: number): number {
  let n = 0;
  while (pacer.canTake(1, now)) {
    pacer.take(1, now, true);
    n++;
  }
  return n;
}

/** A pacer at `rate` with a line of waiters served on time every ms up to 100 ms, then a wake at 100 + `late` ms. */
function lateWake(rate: number, late: number): { pacer: Pacer; at: number; bunch: number } {
  const pacer = new Pacer(rate, 0);
  for (let t = 0; t <= 100; t++) drain(pacer, t);
  const at = 100 + late;
  return { pacer, at, bunch: drain(pacer, at) };
}

describe('pacer: a late timer at 60,000-240,000 units/min', () => {
  it('lets at most 2 ms of the rate go at once (5 requests at 150,000/min, not a 4 ms tick of 10)', () => {
    const { bunch } = lateWake(150_000, 4);
    // 2 ms of the rate, plus the slot due at the wake.
    expect(bunch).toBeLessThanOrEqual(6);
    expect(bunch).toBeGreaterThanOrEqual(5);
  });

  it('keeps the slots past that bound: they come back over the next wakes, and the rate holds', () => {
    const rate = 150_000;
    const { pacer, at } = lateWake(rate, 4);
    // Every ms after the late wake, the drain sends a little more than the rate until the owed
    // slots are back (2 % of each gap: 2 ms of slots in 100 ms), never a bunch.
    let total = 0;
    let most = 0;
    for (let t = at + 1; t <= at + 150; t++) {
      const n = drain(pacer, t);
      most = Math.max(most, n);
      total += n;
    }
    expect(most).toBeLessThanOrEqual(4);
    // The 150 ms after the wake hold their own slots (375 at 150,000/min) and the 2 ms owed (5).
    expect(total).toBeGreaterThanOrEqual(375 + 4);
    expect(total).toBeLessThanOrEqual(375 + 6);
  });

  it('leaves slower rates as they were: 4 requests of a gap at 15,000/min, a 4 ms tick at 480,000/min', () => {
    // 4 ms apart, the next slot at 104 ms: a wake at 116 ms lets the 4 slots due go at once.
    expect(lateWake(15_000, 16).bunch).toBe(4);
    // Slots 0.125 ms apart (a batched wake's): a wake 4 ms late serves 4 ms of them.
    expect(lateWake(480_000, 4).bunch).toBeGreaterThanOrEqual(32);
  });
});
