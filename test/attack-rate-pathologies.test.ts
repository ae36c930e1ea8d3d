import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AnnouncedQuota, Permit } from '../src/limiter/types.js';

// Rate pathologies: sequences of answers, announced quotas and clock moves after which a limiter
// is stuck far below what it was sending or what the API announces.

const HOUR = 3_600_000;
const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Acquires (tokens drawn when given), the clock moved a second at a time for at most 70 s. */
async function take(
  limiter: AdaptiveRateLimiter,
  clock: ManualClock,
  tokens?: number,
): Promise<Permit | undefined> {
  let result: Permit | Error | undefined;
  limiter.acquire(1, tokens === undefined ? {} : { costs: { tokens } }).then(
    (permit) => {
      result = permit;
    },
    (error: Error) => {
      result = error;
    },
  );
  await tick();
  for (let s = 0; s < 70 && result === undefined; s++) {
    clock.advance(1_000);
    await tick();
  }
  return result instanceof Error ? undefined : result;
}

/** The tokens policy of an hourly window of 1,000,000 tokens. */
const hourly = (remaining: number, resetMs: number): AnnouncedQuota[] => [
  { budget: 'tokens', limit: 1_000_000, windowMs: HOUR, remaining, resetMs },
];

/**
 * 500-token calls 10 s apart (3,000 tokens/min); two in flight, the first answered "1,000 tokens
 * left, reset in `resetMs`" (others drained the window), the second a 429 (Retry-After 1 s). Then
 * the reset passes, and the calls go on 10 s apart, each answered with a fresh window. How many of
 * `calls` were refused.
 */
async function refusedAfterReset(left: number, resetMs: number, calls: number): Promise<number> {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, budgets: { requests: {}, tokens: {} } });
  for (let i = 0; i < 10; i++) {
    const permit = await take(limiter, clock, 500);
    clock.advance(200);
    permit?.success(undefined, hourly(900_000 - 500 * i, HOUR - clock.now()));
    clock.advance(9_800);
  }
  const a = await take(limiter, clock, 500);
  const b = await take(limiter, clock, 500);
  clock.advance(200);
  a?.success(undefined, hourly(left, resetMs));
  b?.throttled(1_000, undefined, ['tokens']);
  clock.advance(resetMs);
  let refused = 0;
  for (let i = 0; i < calls; i++) {
    const permit = await take(limiter, clock, 500);
    if (permit === undefined) refused++;
    else {
      clock.advance(200);
      permit.success(undefined, hourly(990_000 - 500 * i, HOUR - 10_000 * i));
    }
    clock.advance(9_800);
  }
  limiter.close();
  return refused;
}

describe('a cut capped by a remaining-over-reset ceiling outlives the reset', () => {
  it('a tokens budget cut while 1,000 tokens were left for 40 min stays at 22 tokens/min after the window resets', async () => {
    // Before the 429 the process sent 3,000 tokens/min; after the reset the API announces 16,666/min.
    // Today: rate 22.5 tokens/min, the first call after the reset books 22 min of slots and
    // 59 of the next 60 calls (10 min) are refused at maxWait; no success comes to raise it.
    const refused = await refusedAfterReset(1_000, 2_400_000, 60);
    expect(refused).toBeLessThanOrEqual(2);
  });

  it('property: after the reset, a steady caller of 3,000 tokens/min is served again', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 200, max: 5_000 }),
        fc.integer({ min: 300_000, max: 3_000_000 }),
        async (left, resetMs) => (await refusedAfterReset(left, resetMs, 12)) <= 2,
      ),
      { numRuns: 6, seed: 7 },
    );
  });
});

describe('what held', () => {
  it('no sequence of answers, quotas, charges and quiet spells leaves a rate of NaN, 0, or Infinity after a cut', async () => {
    const quota = fc.record(
      {
        budget: fc.constantFrom('tokens', 'requests'),
        limit: fc.integer({ min: 1, max: 200_000 }),
        windowMs: fc.constantFrom(1_000, 60_000, HOUR),
        remaining: fc.integer({ min: 0, max: 200_000 }),
        resetMs: fc.integer({ min: 0, max: HOUR }),
      },
      { requiredKeys: ['budget'] },
    );
    const event = fc.oneof(
      fc.constant({ k: 'ok' as const }),
      fc.record({
        k: fc.constant('429' as const),
        ra: fc.option(fc.integer({ min: 0, max: 60_000 }), { nil: undefined }),
        q: fc.option(fc.array(quota, { minLength: 1, maxLength: 2 }), { nil: undefined }),
      }),
      fc.constant({ k: 'fail' as const }),
      fc.record({ k: fc.constant('quiet' as const), ms: fc.integer({ min: 0, max: HOUR }) }),
      fc.record({ k: fc.constant('charge' as const), d: fc.integer({ min: -100_000, max: 100_000 }) }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 100_000 }),
        fc.array(event, { maxLength: 8 }),
        async (cost, events) => {
          const clock = new ManualClock();
          const limiter = new AdaptiveRateLimiter({ clock, budgets: { requests: {}, tokens: {} } });
          for (let i = 0; i < 5; i++) {
            const permit = await take(limiter, clock, cost);
            clock.advance(200);
            permit?.success();
            clock.advance(5_000);
          }
          for (const e of events) {
            if (e.k === 'quiet') clock.advance(e.ms);
            else if (e.k === 'charge') limiter.charge({ tokens: e.d });
            else {
              const permit = await take(limiter, clock, cost);
              clock.advance(200);
              if (e.k === 'ok') permit?.success();
              else if (e.k === 'fail') permit?.failed();
              else permit?.throttled(e.ra, e.q, ['tokens']);
            }
          }
          for (const b of Object.values(limiter.snapshot().budgets ?? {})) {
            expect(Number.isNaN(b.rate)).toBe(false);
            expect(b.rate).toBeGreaterThan(0);
            if (b.cuts > 0) expect(Number.isFinite(b.rate)).toBe(true);
          }
          limiter.close();
        },
      ),
      { numRuns: 60, seed: 11 },
    );
  });
});
