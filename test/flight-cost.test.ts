import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { Flight } from '../src/limiter/flight.js';

// What an answer costs the announced bucket's flight, counted in the loop steps it takes (its
// `steps`), never timed. The flight walked every call granted before the answered one and still
// in flight: nothing when answers come in grant order, all of them when they come newest first
// (20,000 calls answered in reverse took 1.1 s, 200 million steps).

const n = 20_000;

function grantAll(flight: Flight<object>, count: number): object[] {
  const permits: object[] = [];
  for (let i = 0; i < count; i++) {
    const permit = {};
    flight.granted(permit, 1);
    permits.push(permit);
  }
  return permits;
}

describe('Flight: the cost of an answer', () => {
  it('20,000 calls answered newest first take O(log n) steps each, not one per call before', () => {
    const flight = new Flight<object>();
    const permits = grantAll(flight, n);
    const from = flight.steps;
    for (let i = n - 1; i >= 0; i--) expect(flight.landed(permits[i]!, 1)).toBe(0);
    const steps = flight.steps - from;
    expect(steps).toBeGreaterThan(0);
    // A search, a prefix sum and an update of about log2(20,000) = 14 steps each, and the
    // compactions as the calls leave: the walk took n * (n - 1) / 2 = 200 million.
    expect(steps).toBeLessThanOrEqual(4 * n * Math.log2(n));
  });

  it('20,000 calls answered in grant order take O(1) steps each, amortized', () => {
    const flight = new Flight<object>();
    const permits = grantAll(flight, n);
    const from = flight.steps;
    for (let i = 0; i < n; i++) expect(flight.landed(permits[i]!, 1)).toBe(n - 1 - i);
    expect(flight.steps - from).toBeLessThanOrEqual(4 * n);
  });

  it('every other call answered, oldest first then newest first: O(log n) steps each', () => {
    const flight = new Flight<object>();
    const permits = grantAll(flight, n);
    const from = flight.steps;
    for (let i = 1; i < n; i += 2) expect(flight.landed(permits[i]!, 1)).toBe(n - 1 - i);
    for (let i = n - 2; i >= 0; i -= 2) expect(flight.landed(permits[i]!, 1)).toBe(0);
    expect(flight.steps - from).toBeLessThanOrEqual(4 * n * Math.log2(n));
  });

  it('a call held for ever keeps one slot, not one per later grant', () => {
    const flight = new Flight<object>();
    const [held] = grantAll(flight, 1);
    for (let round = 0; round < 1_000; round++) {
      const permits = grantAll(flight, 100);
      for (const permit of permits) flight.landed(permit, 1);
    }
    // 100,000 grants later: the slots the 101 calls in flight at most needed, no more.
    expect(flight.capacity).toBeLessThanOrEqual(8);
    const later = grantAll(flight, 3);
    expect(flight.landed(held!, 1)).toBe(3);
    expect(flight.landed(later[1]!, 1)).toBe(1);
  });

  it('gives its slots back once the calls of a burst have left', () => {
    const flight = new Flight<object>();
    const [held] = grantAll(flight, 1);
    const permits = grantAll(flight, n);
    expect(flight.capacity).toBeGreaterThan(n);
    for (let i = n - 1; i >= 0; i--) flight.landed(permits[i]!, 1);
    expect(flight.capacity).toBeLessThanOrEqual(8);
    expect(flight.landed(held!, 1)).toBe(0);
  });
});

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

describe('Flight: permits dropped and collected', () => {
  it('leave the flight, and answers in reverse then count the calls kept only', async () => {
    const flight = new Flight<object>();
    const kept: object[] = [];
    // Every third permit is dropped by its caller: nothing holds it after the grant.
    for (let i = 0; i < 3_000; i++) {
      const permit = {};
      flight.granted(permit, 2);
      if (i % 3 !== 0) kept.push(permit);
    }
    for (let i = 0; i < 4; i++) {
      gc();
      // Finalizers run in a task of their own, after the gc that found their objects dead.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    // The first of the kept answered last: the others, answered newest first, count none after.
    for (let i = kept.length - 1; i > 0; i--) expect(flight.landed(kept[i]!, 2)).toBe(0);
    expect(flight.capacity).toBeLessThanOrEqual(8);
    const later = grantAll(flight, 2);
    expect(flight.landed(kept[0]!, 2)).toBe(2);
    expect(flight.landed(later[0]!, 1)).toBe(1);
  });
});
