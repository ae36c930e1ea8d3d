import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AnnouncedBucket } from '../src/limiter/announced-bucket.js';
import type { AnnouncedQuota } from '../src/limiter/types.js';

// The announced bucket driven directly against its contract: announcements (one policy or two,
// with units in flight and units granted after the answered call), draws, charges and refunds
// (counted or not), clock advances and rate changes (which resize the bucket and its reserve).
// A model keeps the bound the class documents: the last announcement's level (its `remaining`
// less the reserve, not below 0, less the units in flight at the first announcement and less the
// units granted after the answered call at a later one; a refund may lift the level back to what
// the API announced at the first), refilled since at the refill rate, within the bucket's size at
// the time (a rate change moves the size with the reserve: a bound refilled up to the old size may
// be lifted to the new one, as the class's headroom is clamped to the size when a charge comes). A
// draw lowers the level and may be given back by a refund, so it does not lower the bound; a
// charge lowers the level, never the bound. Only an `uncounted` refund (a refused call's draw)
// may lift the level past it, by at most the units granted after the answered call. Each charge
// is checked too: a counted one lowers the level by at most its units (what the announcements
// took off is set against it first, never a negative amount), an uncounted one by all of them,
// a refund never lowers it nor lifts it by more than its units; the level is always a finite
// number within the bucket's size.

type Op =
  | {
      kind: 'sync';
      limit: number;
      remaining: number;
      second: { limit: number; remaining: number } | undefined;
      inFlight: number;
      sentAfter: number;
    }
  | { kind: 'take'; units: number }
  | { kind: 'charge'; delta: number; uncounted: boolean }
  | { kind: 'advance'; ms: number }
  | { kind: 'rate'; rate: number };

const LIMITS = [600, 10_000, 40_000];
const RATES = [600, 6_000, 10_000, 60_000];

const sync: fc.Arbitrary<Op> = fc
  .record({
    limit: fc.constantFrom(...LIMITS),
    share: fc.double({ min: 0, max: 1.1, noNaN: true }),
    second: fc.option(
      fc.record({ limit: fc.constantFrom(...LIMITS), share: fc.double({ min: 0, max: 1, noNaN: true }) }),
      { nil: undefined },
    ),
    inFlight: fc.integer({ min: 0, max: 8_000 }),
    after: fc.double({ min: 0, max: 1, noNaN: true }),
  })
  .map(({ limit, share, second, inFlight, after }) => ({
    kind: 'sync' as const,
    limit,
    remaining: Math.round(limit * share),
    second:
      second === undefined
        ? undefined
        : { limit: second.limit, remaining: Math.round(second.limit * second.share) },
    inFlight,
    sentAfter: Math.round(inFlight * after),
  }));

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: sync },
  {
    weight: 4,
    arbitrary: fc
      .oneof(fc.integer({ min: 0, max: 3_000 }), fc.double({ min: 0, max: 500, noNaN: true }))
      .map((units) => ({ kind: 'take' as const, units })),
  },
  {
    weight: 5,
    arbitrary: fc
      .record({
        delta: fc.oneof(
          fc.integer({ min: -4_000, max: 4_000 }),
          fc.double({ min: -50, max: 50, noNaN: true }),
        ),
        uncounted: fc.boolean(),
      })
      .filter(({ delta }) => delta !== 0)
      .map(({ delta, uncounted }) => ({ kind: 'charge' as const, delta, uncounted })),
  },
  {
    weight: 3,
    arbitrary: fc.integer({ min: 0, max: 30_000 }).map((ms) => ({ kind: 'advance' as const, ms })),
  },
  { weight: 1, arbitrary: fc.constantFrom(...RATES).map((rate) => ({ kind: 'rate' as const, rate })) },
);

const EPS = 1e-6;

function quotas(o: Extract<Op, { kind: 'sync' }>): AnnouncedQuota[] {
  const first = { limit: o.limit, remaining: o.remaining };
  return o.second === undefined ? [first] : [o.second, first];
}

describe('an announced bucket against its contract (property)', () => {
  it('never lifts the level above the last announcement refilled since, and charges within their units', () => {
    fc.assert(
      fc.property(fc.constantFrom(...RATES), fc.array(op, { minLength: 1, maxLength: 120 }), (rate, ops) => {
        let now = 1_000;
        const bucket = new AnnouncedBucket(rate, now, 1_500);
        // The model: the bound on the level (none before the first announcement; refilled without
        // the size, which the check applies), the units an uncounted refund may still lift it past
        // the bound by, and the time it was refilled to.
        let bound = Number.POSITIVE_INFINITY;
        let uncountedLeft = 0;
        let announced = false;
        let refilledAt = now;
        const refillBound = () => {
          bound += ((now - refilledAt) * bucket.sendRate) / 60_000;
          refilledAt = now;
        };
        for (const o of ops) {
          // The clock moves only in `advance`; the bound refills at the rate and size in force.
          if (o.kind === 'advance') {
            refillBound();
            now += o.ms;
            continue;
          }
          refillBound();
          // The level now (what the operation's own refill would make it).
          bucket.refill(now);
          const before = bucket.tokens;
          switch (o.kind) {
            case 'sync': {
              const first = !announced;
              bucket.sync(quotas(o), o.inFlight, now, o.sentAfter);
              const remaining = Math.min(o.remaining, o.second?.remaining ?? Number.POSITIVE_INFINITY);
              const level = Math.max(0, remaining - bucket.reserve);
              bound = first ? level : level - o.sentAfter;
              uncountedLeft = first ? 0 : o.sentAfter;
              announced = true;
              // The level is the announcement's, or this process's own count when that is lower.
              expect(bucket.tokens).toBeLessThanOrEqual(
                Math.min(bucket.capacity, level - (first ? o.inFlight : o.sentAfter)) + EPS,
              );
              break;
            }
            case 'take':
              bucket.take(o.units, now);
              expect(bucket.tokens).toBeCloseTo(before - o.units, 6);
              break;
            case 'rate':
              bucket.setRate(o.rate, now);
              break;
            case 'charge': {
              bucket.charge(o.delta, now, o.uncounted);
              const after = bucket.tokens;
              if (o.delta > 0) {
                // Never lower by more than the units (nothing negative is set against them);
                // whole when uncounted.
                expect(after).toBeGreaterThanOrEqual(before - o.delta - EPS);
                expect(after).toBeLessThanOrEqual(before + EPS);
                if (o.uncounted) expect(after).toBeCloseTo(before - o.delta, 6);
              } else {
                expect(after).toBeGreaterThanOrEqual(before - EPS);
                expect(after).toBeLessThanOrEqual(before - o.delta + EPS);
                if (o.uncounted) {
                  const extra = Math.min(-o.delta, uncountedLeft);
                  uncountedLeft -= extra;
                  bound += extra;
                }
              }
              break;
            }
          }
          expect(Number.isFinite(bucket.tokens)).toBe(true);
          expect(bucket.tokens).toBeLessThanOrEqual(bucket.capacity + EPS);
          if (announced) expect(bucket.tokens).toBeLessThanOrEqual(Math.min(bucket.capacity, bound) + EPS);
        }
      }),
      { numRuns: 3000 },
    );
  });
});
