import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { drive } from './helpers/drive.js';
import { startLlmMock } from './helpers/llm-mock.js';

// Two processes starting together on one OpenAI key. Each one's announced `tokens` bucket reads
// the key's `remaining`, which the other drains too; a later announcement lowered the level to that
// `remaining` less the reserve and forgot the units this process had granted after the answered
// call and still had in flight (the API had not counted them yet). Both processes granted the
// whole `remaining` again, and every call they had in flight beyond it drew a 429.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const minute = 60_000;

describe("api: 'openai', two processes bursting on one key", () => {
  it('a later announcement counts the units granted after its call and still in flight', () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ name: 'tokens', burst: 'announced', clock, reserve: 0 });
    const quota = (remaining: number) => [{ limit: 20_000, remaining, windowMs: minute }];
    // The first answer: 20,000 announced, nothing else in flight.
    const first = limiter.tryAcquire(500);
    if (first === undefined) throw new Error('not granted');
    first.success(undefined, quota(19_500));
    // Four calls go out; the first of them is answered while the three after it are in flight.
    const sent = [500, 500, 500, 500].map((units) => limiter.tryAcquire(units));
    if (sent.some((p) => p === undefined)) throw new Error('not granted');
    // Another process drained the key: 2,000 remain at the answer to the first of the four.
    sent[0]?.success(undefined, quota(2_000));
    // The three still in flight reach the API after it: 2,000 - 1,500 are left for this process.
    expect(limiter.snapshot().tokens).toBeCloseTo(500, 0);
    // A call answered after them counted them: nothing is taken twice.
    sent[1]?.success(undefined, quota(1_000));
    sent[2]?.success(undefined, quota(500));
    sent[3]?.success(undefined, quota(0));
    expect(limiter.snapshot().tokens).toBeCloseTo(0, 0);
  });

  it('answered out of order: only the calls granted after the answered one count, not those before', () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ name: 'tokens', burst: 'announced', clock, reserve: 0 });
    const quota = (remaining: number) => [{ limit: 20_000, remaining, windowMs: minute }];
    const first = limiter.tryAcquire(100);
    if (first === undefined) throw new Error('not granted');
    first.success(undefined, quota(19_900));
    // Four calls of different sizes; the third is answered first, while the other three are out.
    const sent = [100, 200, 400, 800].map((units) => limiter.tryAcquire(units));
    if (sent.some((p) => p === undefined)) throw new Error('not granted');
    sent[2]?.success(undefined, quota(3_000));
    // Of the calls still out, only the one granted after the third (800) is unseen by its answer.
    expect(limiter.snapshot().tokens).toBeCloseTo(2_200, 0);
    // The first answered later: the two granted after it and still out (200, 800) count.
    sent[0]?.success(undefined, quota(1_500));
    expect(limiter.snapshot().tokens).toBeCloseTo(500, 0);
  });

  it('40 calls each, at once: at most 33 429s at the server, no other error', async () => {
    const clock = new ManualClock();
    const mock = await startLlmMock({
      api: 'openai',
      limits: { tokensPerMinute: 20_000, requestsPerMinute: 200 },
      clock,
    });
    cleanups.push(() => mock.close());
    const client = () => {
      const f = rateLimitedFetch({
        limiters: { llm: { origins: [mock.origin], api: 'openai' } },
        rejection: 'error',
        clock,
      });
      cleanups.push(() => f.close());
      return f;
    };
    const clients = [client(), client()];
    const call = (f: typeof fetch) =>
      f(`${mock.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'api-key': 'k' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'x'.repeat(2000) }],
          max_tokens: 500,
        }),
      }).then(
        (r) => r.status,
        (e: { code?: string }) => e.code ?? String(e),
      );
    const all: Promise<number | string>[] = [];
    for (let i = 0; i < 40; i++) for (const f of clients) all.push(call(f));
    const results = await drive(clock, Promise.all(all), 200);
    // Before the fix: 40-44 429s (each process granted the whole `remaining` again at every
    // answer). After it: about 26, for the calls the other process had in flight, which no
    // answer shows. (The mock gets about one call a drive step: calls granted together reach it
    // over seconds of the clock, as over a slow link.)
    expect(mock.throttled).toBeLessThanOrEqual(33);
    expect(results.filter((r) => r !== 200 && r !== 429)).toEqual([]);
  }, 60_000);
});
