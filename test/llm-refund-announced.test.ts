import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';

// `api: 'anthropic'`: an answer's headers announce what the API has charged, this call's real
// input tokens included (Anthropic counts them at admission); its `usage` at the body's end then
// corrects the estimate. When the announcement lowered the level (other processes on the same key
// drained it), the refund of an estimate above the usage was added on top of the API's own
// `remaining`: the limiter believed 3,000 tokens more than the API said were left. A real
// node:http server on 127.0.0.1 announces 10,000 input tokens/min (the second answer: 6,000 left);
// the limiter's clock stands still.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Answers with a usage of 1 input token; the first announces 10,000 left, the later ones 6,000. */
async function serve() {
  let n = 0;
  const server: Server = createServer(async (req, res) => {
    for await (const _ of req);
    res
      .writeHead(200, {
        'content-type': 'application/json',
        'anthropic-ratelimit-requests-limit': '1000',
        'anthropic-ratelimit-requests-remaining': '999',
        'anthropic-ratelimit-input-tokens-limit': '10000',
        'anthropic-ratelimit-input-tokens-remaining': n++ === 0 ? '10000' : '6000',
        'anthropic-ratelimit-output-tokens-limit': '10000',
        'anthropic-ratelimit-output-tokens-remaining': '10000',
      })
      .end(JSON.stringify({ type: 'message', content: [], usage: { input_tokens: 1, output_tokens: 1 } }));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

type Kind = 'fetch wrapper' | 'interceptor';

function client(kind: Kind, origin: string) {
  const options = {
    limiters: { llm: { origins: [origin], api: 'anthropic' as const } },
    clock: new ManualClock(),
  };
  const headers = { 'content-type': 'application/json', 'x-api-key': 'k' };
  const body = (chars: number) =>
    JSON.stringify({
      model: 'claude-x',
      max_tokens: 1,
      messages: [{ role: 'user', content: 'x'.repeat(chars) }],
    });
  if (kind === 'fetch wrapper') {
    const f = rateLimitedFetch(options);
    cleanups.push(() => f.close());
    return {
      limiter: f.registry.get('llm') as AdaptiveRateLimiter,
      call: async (chars: number) =>
        (await f(`${origin}/v1/messages`, { method: 'POST', headers, body: body(chars) })).text(),
    };
  }
  const interceptor = adaptiveRateLimit({ ...options, default: false });
  const agent = new Agent().compose(interceptor);
  cleanups.push(
    () => agent.close(),
    () => interceptor.close(),
  );
  return {
    limiter: interceptor.registry.get('llm') as AdaptiveRateLimiter,
    call: async (chars: number) => {
      const answer = await agent.request({
        origin,
        path: '/v1/messages',
        method: 'POST',
        headers,
        body: body(chars),
      });
      return answer.body.text();
    },
  };
}

const input = (limiter: AdaptiveRateLimiter) =>
  limiter.snapshot().budgets?.input_tokens?.tokens ?? Number.NaN;

describe("api: 'anthropic': a call's usage below its estimate, after its headers lowered the level", () => {
  it.each<Kind>(['fetch wrapper', 'interceptor'])(
    "the refund does not lift the level above the API's remaining: %s",
    async (kind) => {
      const origin = await serve();
      const { limiter, call } = client(kind, origin);
      await call(4);
      // 12,000 characters: estimated at 3,000 input tokens; it used 1, and 6,000 are left.
      await call(12_000);
      // 6,000 less the reserve (250: 1.5 s of 10,000/min).
      expect(input(limiter)).toBeLessThanOrEqual(5_750);
    },
  );
});
