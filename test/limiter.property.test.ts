import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

type Command =
  | { op: 'acquire'; units: number; abortable: boolean }
  | { op: 'abort'; index: number }
  | { op: 'success'; index: number }
  | { op: 'throttle'; index: number; retryAfterMs: number | undefined }
  | { op: 'advance'; ms: number };

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      op: fc.constant('acquire'),
      units: fc.integer({ min: 1, max: 4 }),
      abortable: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('abort'), index: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('success'), index: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('throttle'),
      index: fc.nat(),
      retryAfterMs: fc.option(fc.integer({ min: 0, max: 20_000 }), { nil: undefined }),
    }),
  },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('advance'), ms: fc.integer({ min: 0, max: 3_000 }) }) },
) as fc.Arbitrary<Command>;

interface Request {
  units: number;
  at: number;
  controller: AbortController | undefined;
  state: 'waiting' | 'granted' | 'rejected' | 'aborted';
  permit?: Permit;
}

const MAX_RATE = 600; // units/min: 10 a second
const MIN_RATE = 30;
const MAX_WAIT = 8_000;

describe('AdaptiveRateLimiter invariants (fast-check)', () => {
  it('never grants more than the rate and the burst allow, settles every acquire, and returns aborted units', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(command, { minLength: 1, maxLength: 120 }),
        fc.constantFrom('aimd', 'cubic') as fc.Arbitrary<'aimd' | 'cubic'>,
        async (commands, controller) => {
          const clock = new ManualClock();
          const limiter = new AdaptiveRateLimiter({
            clock,
            controller,
            initialUnitsPerMinute: 300,
            minUnitsPerMinute: MIN_RATE,
            maxUnitsPerMinute: MAX_RATE,
            maxWait: MAX_WAIT,
            queueLimit: 20,
            maxPause: 10_000,
            decreaseCooldown: 500,
          });
          const requests: Request[] = [];
          // Grant times come from the limiter's event: a manual clock runs timers inside advance(),
          // before any promise callback can read the time.
          const grants: { at: number; units: number; waited: number }[] = [];
          limiter.on('acquired', (e) => grants.push({ at: clock.now(), units: e.units, waited: e.waited }));
          const rates: number[] = [limiter.rate];
          const pick = (index: number, state: Request['state']) => {
            const candidates = requests.filter((r) => r.state === state);
            return candidates.length === 0 ? undefined : candidates[index % candidates.length];
          };
          for (const c of commands) {
            if (c.op === 'acquire') {
              const controller = c.abortable ? new AbortController() : undefined;
              const request: Request = { units: c.units, at: clock.now(), controller, state: 'waiting' };
              requests.push(request);
              limiter.acquire(c.units, { signal: controller?.signal }).then(
                (permit) => {
                  request.state = 'granted';
                  request.permit = permit;
                },
                (error: unknown) => {
                  request.state = error instanceof RateLimitRejectedError ? 'rejected' : 'aborted';
                },
              );
            } else if (c.op === 'abort') {
              pick(c.index, 'waiting')?.controller?.abort();
            } else if (c.op === 'success') {
              pick(c.index, 'granted')?.permit?.success();
            } else if (c.op === 'throttle') {
              pick(c.index, 'granted')?.permit?.throttled(c.retryAfterMs);
            } else {
              clock.advance(c.ms);
            }
            await flush();
            rates.push(limiter.rate);
          }
          clock.advance(MAX_WAIT + 10_000 + 1);
          await flush();

          // Every acquire settled, and the queue holds nothing: aborted reservations came back.
          expect(requests.filter((r) => r.state === 'waiting')).toEqual([]);
          expect(limiter.snapshot()).toMatchObject({ queued: 0, queuedUnits: 0 });
          // The rate stayed in [min, max].
          for (const rate of rates) {
            expect(rate).toBeGreaterThanOrEqual(MIN_RATE);
            expect(rate).toBeLessThanOrEqual(MAX_RATE);
          }
          // No waiter was granted after waiting longer than maxWait.
          expect(grants).toHaveLength(requests.filter((r) => r.state === 'granted').length);
          for (const g of grants) expect(g.waited).toBeLessThanOrEqual(MAX_WAIT);
          // Units granted in any window fit the rate plus the burst: a bucket of one second at the
          // highest rate, plus the debt a request larger than the smallest bucket may leave.
          const top = Math.max(...rates);
          const smallestBucket = Math.max(Math.min(...rates) / 60, 1);
          const burst = top / 60 + Math.max(0, 4 - smallestBucket);
          for (let i = 0; i < grants.length; i++) {
            let units = 0;
            for (let j = i; j < grants.length; j++) {
              units += grants[j]!.units;
              const window = grants[j]!.at - grants[i]!.at;
              expect(units).toBeLessThanOrEqual(burst + (top * window) / 60_000 + 1e-6);
            }
          }
          limiter.close();
        },
      ),
      { numRuns: 150 },
    );
  });
});
