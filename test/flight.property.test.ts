import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Flight } from '../src/limiter/flight.js';

// The announced bucket's flight against a model (a plain array of the calls in flight, in grant
// order): grants one at a time and in bursts, answers in grant order, newest first and in any
// order, permits dropped (what the FinalizationRegistry does once one is collected), a second
// answer to a permit that left. The flight moves its calls to the front of its slots (and builds
// its tree again) whenever they run out or are mostly gone: sequences this long do so many times.

type Op =
  | { kind: 'grant'; units: number }
  | { kind: 'burst'; count: number; units: number }
  | { kind: 'land'; pick: number }
  | { kind: 'run'; count: number; order: 'oldest' | 'newest' }
  | { kind: 'drop'; pick: number }
  | { kind: 'again'; pick: number };

const whole = fc.oneof(fc.integer({ min: 0, max: 1_000 }), fc.constant(1));
// Token estimates need not be whole: sums of fractions round, in the tree as in the model.
const fraction = fc.double({ min: 0, max: 1_000, noNaN: true });

const ops = (units: fc.Arbitrary<number>): fc.Arbitrary<Op[]> => fc.array(opOf(units), { maxLength: 300 });

const opOf = (units: fc.Arbitrary<number>): fc.Arbitrary<Op> =>
  fc.oneof(
    { weight: 5, arbitrary: units.map((u) => ({ kind: 'grant', units: u }) as Op) },
    {
      weight: 1,
      arbitrary: fc
        .record({ count: fc.integer({ min: 1, max: 80 }), units })
        .map(({ count, units: u }) => ({ kind: 'burst', count, units: u }) as Op),
    },
    { weight: 4, arbitrary: fc.nat().map((pick) => ({ kind: 'land', pick }) as Op) },
    {
      weight: 1,
      arbitrary: fc
        .record({ count: fc.integer({ min: 1, max: 80 }), order: fc.constantFrom('oldest', 'newest') })
        .map(({ count, order }) => ({ kind: 'run', count, order }) as Op),
    },
    { weight: 1, arbitrary: fc.nat().map((pick) => ({ kind: 'drop', pick }) as Op) },
    { weight: 1, arbitrary: fc.nat().map((pick) => ({ kind: 'again', pick }) as Op) },
  );

interface Call {
  readonly permit: object;
  readonly units: number;
}

/** Runs `sequence` on a flight and on the model; `near` compares the units each tells. */
function check(sequence: readonly Op[], near: (actual: number, expected: number) => void): boolean {
  const flight = new Flight<object>();
  // Slots made again past the first (the calls moved to their front, the tree built again).
  let compacted = false;
  const live: Call[] = [];
  const gone: Call[] = [];
  let unanswered = 0;
  const grant = (u: number) => {
    const call = { permit: {}, units: u };
    flight.granted(call.permit, u);
    live.push(call);
    unanswered += u;
  };
  const land = (index: number) => {
    const call = live[index]!;
    const after = live.slice(index + 1).reduce((sum, c) => sum + c.units, 0);
    near(flight.landed(call.permit, call.units), after);
    unanswered -= call.units;
    live.splice(index, 1);
    gone.push(call);
  };
  for (const o of sequence) {
    if (o.kind === 'grant') grant(o.units);
    else if (o.kind === 'burst') for (let i = 0; i < o.count; i++) grant(o.units);
    else if (o.kind === 'land') {
      if (live.length > 0) land(o.pick % live.length);
    } else if (o.kind === 'run') {
      for (let i = 0; i < o.count && live.length > 0; i++) land(o.order === 'oldest' ? 0 : live.length - 1);
    } else if (o.kind === 'drop') {
      if (live.length === 0) continue;
      const [call] = live.splice(o.pick % live.length, 1);
      flight.dropped(call!.permit);
      gone.push(call!);
    } else if (gone.length > 0) {
      // A permit that left (answered or dropped) is in flight no more: nothing after it.
      const call = gone[o.pick % gone.length]!;
      expect(flight.landed(call.permit, 0)).toBe(0);
      flight.dropped(call.permit);
    }
    expect(flight.units).toBe(unanswered);
    if (flight.capacity > 8) compacted = true;
    // Calls that left cost no slots: at most 8 per call in flight, 8 at least.
    expect(flight.capacity).toBeLessThanOrEqual(Math.max(8, 8 * live.length));
  }
  // What is left, answered newest first then in grant order, still matches.
  while (live.length > 1) land(live.length - 1);
  if (live.length > 0) land(0);
  expect(flight.capacity).toBeLessThanOrEqual(8);
  return compacted;
}

describe('Flight against a model', () => {
  it('tells the units granted after an answered call and still in flight, in any order of answers', () => {
    let compacted = false;
    fc.assert(
      fc.property(ops(whole), (o) => {
        compacted = check(o, (actual, expected) => expect(actual).toBe(expected)) || compacted;
      }),
      { numRuns: 300 },
    );
    // The calls were moved to the front of new slots (and the tree built again) in some runs.
    expect(compacted).toBe(true);
  });

  it('units that are not whole: the same within rounding', () => {
    fc.assert(
      fc.property(ops(fraction), (o) => {
        check(o, (actual, expected) => expect(Math.abs(actual - expected)).toBeLessThanOrEqual(1e-6));
      }),
      { numRuns: 100 },
    );
  });
});
