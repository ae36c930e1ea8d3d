import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { anthropicCall, anthropicServer } from './helpers/anthropic-server.js';

// An Anthropic answer whose `usage` adds up past the largest number (input_tokens and
// cache_creation_input_tokens of 1e308 each: each one a finite count, their sum Infinity).
// Regression: the correction charged Infinity, which charge() refuses (InvalidArgumentError):
// through the fetch wrapper the caller's read of a whole 200 ended with that error, through the
// interceptor the call never ended. A usage that cannot be charged keeps the estimate.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Each count finite, their sum Infinity. */
const OVERFLOWING = { input_tokens: 1e308, cache_creation_input_tokens: 1e308, output_tokens: 5 };

describe("api: 'anthropic': a usage that adds up past the largest number", () => {
  it('the fetch wrapper: the caller reads the whole answer; the estimate is kept', async () => {
    const origin = await anthropicServer(OVERFLOWING, cleanups);
    const answer = await anthropicCall(origin, 'fetch wrapper', cleanups);
    expect(answer.status).toBe(200);
    expect(JSON.parse(await answer.text()).usage.output_tokens).toBe(5);
  });

  it('the interceptor: the call ends with the answer', async () => {
    const origin = await anthropicServer(OVERFLOWING, cleanups);
    const answer = await anthropicCall(origin, 'interceptor', cleanups);
    expect(answer.status).toBe(200);
    expect(JSON.parse(await answer.text()).usage.output_tokens).toBe(5);
  });
});

/** Anthropic's headers for budgets of 100,000 input and 20,000 output tokens a minute, most left. */
function limits(): Record<string, string> {
  const reset = new Date(Date.now() + 60_000).toISOString();
  const budget = (name: string, limit: number, left: number) => ({
    [`anthropic-ratelimit-${name}-limit`]: String(limit),
    [`anthropic-ratelimit-${name}-remaining`]: String(left),
    [`anthropic-ratelimit-${name}-reset`]: reset,
  });
  return {
    ...budget('requests', 1_000, 999),
    ...budget('input-tokens', 100_000, 90_000),
    ...budget('output-tokens', 20_000, 19_000),
    date: new Date().toUTCString(),
  };
}

describe("api: 'anthropic': a usage no model could spend is not learned", () => {
  // A body the limiter cannot see (a stream, as Node's fetch hands the global dispatcher) is
  // charged the running average of what the answers said.
  for (const [what, usage] of [
    ['one that adds up past the largest number', OVERFLOWING],
    ['one of 1e12 input tokens (a proxy overflow)', { input_tokens: 1e12, output_tokens: 5 }],
  ] as const) {
    it(`after ${what}, the next call with a body not seen is sent, on the clock`, async () => {
      const origin = await anthropicServer(usage, cleanups, limits());
      const f = rateLimitedFetch({
        limiters: { llm: { origins: [origin], api: 'anthropic', partitionBy: false, maxWait: 2_000 } },
        clock: new ManualClock(),
      });
      cleanups.push(() => f.close());
      const streamed = () =>
        f(`${origin}/v1/messages`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-api-key': 'k' },
          body: new Blob([JSON.stringify({ model: 'c', messages: [], max_tokens: 10 })]).stream(),
          duplex: 'half',
        } as RequestInit);
      await (await streamed()).text();
      const next = await streamed();
      expect(next.status).toBe(200);
      await next.text();
    });
  }
});
