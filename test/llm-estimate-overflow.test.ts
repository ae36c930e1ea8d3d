import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { cleanups, serve } from './helpers/interceptor-fixtures.js';

// docs/llm.md: "A call the API refuses without doing it gives back all its tokens: a 4xx answer
// other than 429 (a 400 invalid_request_error ...)"; README: "Every request ends as sent, rejected
// with a typed error, or returned as the server's last answer". A body the API will refuse with a
// 400 (an `n` far out of range) must reach the API and come back as its 400, not fail inside the
// limiter on an estimate the caller never gave.

describe("api 'openai', an estimate from an out-of-range `n`", () => {
  it.each([
    ['n: 1e306 (max_tokens x n overflows to Infinity)', 1e306],
    ['n: 2e9 (max_tokens x n finite but astronomic)', 2e9],
  ])('the API gets the call and the caller its 400: %s', async (_name, n) => {
    const server = await serve({
      respond: (_req, res) => {
        res
          .writeHead(400, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { type: 'invalid_request_error', message: 'n must be <= 128' } }));
        return true;
      },
    });
    const f = rateLimitedFetch({
      limiters: { llm: { origins: [server.origin], api: 'openai' } },
      clock: new ManualClock(),
    });
    cleanups.push(() => f.close());
    const body = JSON.stringify({
      model: 'm',
      max_tokens: 1_000_000_000,
      n,
      messages: [{ role: 'user', content: 'hi' }],
    });
    const outcome = await f(`${server.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
      body,
    }).then(
      (r) => r.status,
      (e: unknown) => (e instanceof Error ? `${e.name}: ${e.message}` : e),
    );
    expect(outcome).toBe(400);
    expect(server.received).toHaveLength(1);
  });
});
