import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

type Command =
  | { op: 'acquire'; tokens: number; abort: boolean }
  | { op: 'advance'; ms: number }
  | { op: 'abort' };

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('acquire' as const),
      tokens: fc.integer({ min: 0, max: 300 }),
      abort: fc.boolean(),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 700 }) }),
  },
  { weight: 1, arbitrary: fc.constant({ op: 'abort' as const }) },
);

const REQUESTS_PER_MIN = 600; // one each 100 ms, paced
const TOKENS_PER_MIN = 6_000; // 100 a second, a bucket of 100

describe('a limiter of two budgets (property)', () => {
  it('grants first in first out, never more tokens in a window than its rate and bucket allow, and settles every waiter', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 60 }), async (commands) => {
        const clock = new ManualClock(1_000);
        const limiter = new AdaptiveRateLimiter({
          clock,
          slowStart: false,
          maxWait: 10 * 60_000,
          budgets: {
            requests: { initialUnitsPerMinute: REQUESTS_PER_MIN, minUnitsPerMinute: REQUESTS_PER_MIN },
            tokens: {
              initialUnitsPerMinute: TOKENS_PER_MIN,
              minUnitsPerMinute: TOKENS_PER_MIN,
              burst: 'second',
            },
          },
        });
        const grants: { index: number; at: number; tokens: number }[] = [];
        // The time of each grant as the limiter makes it (inside advance); FIFO pairs the k-th
        // event with the k-th grant resolved.
        const grantedAt: number[] = [];
        limiter.on('acquired', () => grantedAt.push(clock.now()));
        const settled = new Set<number>();
        const aborters: AbortController[] = [];
        let asked = 0;
        for (const c of commands) {
          if (c.op === 'acquire') {
            const index = asked++;
            const abort = new AbortController();
            if (c.abort) aborters.push(abort);
            limiter.acquire(1, { costs: { tokens: c.tokens }, signal: abort.signal }).then(
              () => {
                grants.push({ index, at: grantedAt[grants.length] as number, tokens: c.tokens });
                settled.add(index);
              },
              () => settled.add(index),
            );
          } else if (c.op === 'advance') {
            clock.advance(c.ms);
          } else {
            aborters.shift()?.abort(new Error('aborted'));
          }
          await flush();
        }
        for (const a of aborters) a.abort(new Error('aborted'));
        clock.advance(60 * 60_000);
        await flush();
        // Every waiter ends: granted or aborted.
        expect(settled.size).toBe(asked);
        // First in, first out.
        const order = grants.map((g) => g.index);
        expect(order).toEqual([...order].sort((a, b) => a - b));
        // Tokens: over any window from one grant to another, at most the bucket (100) plus the
        // refill, plus one request larger than the bucket (served when full, leaving a debt).
        for (let i = 0; i < grants.length; i++) {
          let sum = 0;
          for (let j = i; j < grants.length; j++) {
            sum += (grants[j] as { tokens: number }).tokens;
            const window = (grants[j] as { at: number }).at - (grants[i] as { at: number }).at;
            expect(sum).toBeLessThanOrEqual(100 + (window * TOKENS_PER_MIN) / 60_000 + 300 + 1e-6);
          }
        }
        // Requests: paced, one each 100 ms (at most 10 ms of idle credit, one request).
        for (let i = 0; i < grants.length; i++) {
          for (let j = i + 1; j < grants.length; j++) {
            const window = (grants[j] as { at: number }).at - (grants[i] as { at: number }).at;
            expect(j - i).toBeLessThanOrEqual(1 + window / 100 + 1e-6);
          }
        }
        limiter.close();
      }),
      { numRuns: 150 },
    );
  });
});
