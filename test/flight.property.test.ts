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

const units = fc.oneof(fc.integer({ min: 0, max: 1_000 }), fc.constant(1));

const op: fc.Arbitrary<Op> = fc.oneof(
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

describe('Flight against a model', () => {
  it('tells the units granted after an answered call and still in flight, in any order of answers', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 300 }), (ops) => {
        const flight = new Flight<object>();
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
          expect(flight.landed(call.permit, call.units)).toBe(after);
          unanswered -= call.units;
          live.splice(index, 1);
          gone.push(call);
        };
        for (const o of ops) {
          if (o.kind === 'grant') grant(o.units);
          else if (o.kind === 'burst') for (let i = 0; i < o.count; i++) grant(o.units);
          else if (o.kind === 'land') {
            if (live.length > 0) land(o.pick % live.length);
          } else if (o.kind === 'run') {
            for (let i = 0; i < o.count && live.length > 0; i++)
              land(o.order === 'oldest' ? 0 : live.length - 1);
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
          // Calls that left cost no slots: at most 8 per call in flight, 8 at least.
          expect(flight.capacity).toBeLessThanOrEqual(Math.max(8, 8 * live.length));
        }
        // What is left, answered newest first then in grant order, still matches.
        while (live.length > 1) land(live.length - 1);
        if (live.length > 0) land(0);
        expect(flight.capacity).toBeLessThanOrEqual(8);
      }),
      { numRuns: 300 },
    );
  });
});
