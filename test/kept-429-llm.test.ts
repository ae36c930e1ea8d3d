import { Agent, type Dispatcher, fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { advanceUntil, limit, throttleThenHold } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// api: 'openai': a retry that REACHED the API (the server has its body and is working on it) when
// the app destroys its Agent fails with UND_ERR_DESTROYED. The loop takes it for "never sent"
// (`notSent(permit)`), gives back the retry's token draw, and answers with the stale 429. errorOutcome
// keeps the draws of an error that may come after the request was sent ("the API may have done the work").

const QUOTA = {
  'content-type': 'application/json',
  'x-ratelimit-limit-requests': '100',
  'x-ratelimit-remaining-requests': '99',
  'x-ratelimit-reset-requests': '1s',
  'x-ratelimit-limit-tokens': '100000',
  'x-ratelimit-remaining-tokens': '0',
  'x-ratelimit-reset-tokens': '30s',
};

/** Answers the first call with a 429 of the token quota (Retry-After: 30), holds the rest (`held`). */
const llmServer = () =>
  throttleThenHold(1, () => ({
    headers: QUOTA,
    body: JSON.stringify({ error: { type: 'tokens', message: 'Rate limit reached (TPM)' } }),
  }));

const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5_000 });
const headers = { 'content-type': 'application/json', authorization: 'Bearer k' };
const tokens = (l: AdaptiveRateLimiter) => l.snapshot().budgets?.tokens?.tokens ?? Number.NaN;

describe("kept 429: api 'openai', the retry destroyed in flight", () => {
  it('interceptor: the token draw of a retry the API received is kept', async () => {
    const { server, held } = await llmServer();
    const clock = new ManualClock();
    const rl = limit({
      clock,
      default: false,
      limiters: { llm: { origins: [server.origin], api: 'openai' } },
    });
    const agent = new Agent().compose(rl) as Dispatcher;
    const limiter = rl.registry.get('llm') as AdaptiveRateLimiter;

    let outcome: { status?: number; error?: unknown } | undefined;
    agent
      .request({ origin: server.origin, path: '/v1/chat/completions', method: 'POST', headers, body })
      .then(
        async (r) => {
          outcome = { status: r.statusCode };
          await r.body.text();
        },
        (error: unknown) => (outcome = { error }),
      );
    await advanceUntil(clock, () => held.length === 1, 'the retry to reach the API');
    const before = tokens(limiter);
    await agent.destroy();
    await until(() => outcome !== undefined, 'the outcome');
    // The clock stood still: no refill. The API has the call: its tokens stay drawn.
    expect({ tokens: tokens(limiter), status: outcome?.status }).toEqual({
      tokens: before,
      status: undefined,
    });
  });

  it('fetch wrapper: the token draw of a retry the API received is kept', async () => {
    const { server, held } = await llmServer();
    const clock = new ManualClock();
    const agent = new Agent();
    const f = rateLimitedFetch({
      clock,
      limiters: { llm: { origins: [server.origin], api: 'openai' } },
      fetch: (input, init) =>
        undiciFetch(input as string, { ...(init as object), dispatcher: agent }) as never,
    });
    const limiter = f.registry.get('llm') as AdaptiveRateLimiter;
    let outcome: { status?: number; error?: unknown } | undefined;
    f(`${server.origin}/v1/chat/completions`, { method: 'POST', headers, body }).then(
      (r) => (outcome = { status: r.status }),
      (error: unknown) => (outcome = { error }),
    );
    await advanceUntil(clock, () => held.length === 1, 'the retry to reach the API');
    const before = tokens(limiter);
    await agent.destroy();
    await until(() => outcome !== undefined, 'the outcome');
    f.close();
    expect({ tokens: tokens(limiter), status: outcome?.status }).toEqual({
      tokens: before,
      status: undefined,
    });
  });
});
