import { once } from 'node:events';
import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ManualClock } from '../../src/clock.js';
import type { LlmApi } from '../../src/config/api.js';
import { rateLimitedFetch } from '../../src/http/fetch.js';
import type { AdaptiveRateLimiter } from '../../src/limiter/adaptive.js';
import { llmAgent } from './llm-agent.js';
import { type LlmMockOptions, startLlmMock } from './llm-mock.js';

/** A node:http server on 127.0.0.1 answering with `handler`, closed by the test's `cleanups`: its origin. */
export async function serveLocal(handler: RequestListener, cleanups: (() => unknown)[]): Promise<string> {
  const server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** The two HTTP adapters an LLM call goes through. */
export type LlmClientKind = 'fetch wrapper' | 'interceptor';

/**
 * A client metering `origin` as the LLM API `api` on a clock that stands still (so the tokens a
 * call leaves drawn are what it was charged): the fetch wrapper, or an undici Agent composed with
 * the interceptor ({@link llmAgent}). `post` sends a JSON body with the API's key header and
 * returns the answer's text; everything is closed by the test's `cleanups`.
 */
export function llmClient(kind: LlmClientKind, origin: string, api: LlmApi, cleanups: (() => unknown)[]) {
  const clock = new ManualClock();
  const headers = {
    'content-type': 'application/json',
    ...(api === 'anthropic' ? { 'x-api-key': 'k' } : { authorization: 'Bearer k' }),
  };
  if (kind === 'fetch wrapper') {
    const f = rateLimitedFetch({ limiters: { llm: { origins: [origin], api } }, clock });
    cleanups.push(() => f.close());
    return {
      limiter: f.registry.get('llm') as AdaptiveRateLimiter,
      post: async (path: string, body: string) =>
        (await f(`${origin}${path}`, { method: 'POST', headers, body })).text(),
    };
  }
  const { interceptor, agent } = llmAgent({ origin, api, rejection: 'error', clock }, cleanups);
  return {
    limiter: interceptor.registry.get('llm') as AdaptiveRateLimiter,
    post: async (path: string, body: string) =>
      (await agent.request({ origin, path, method: 'POST', headers, body })).body.text(),
  };
}

/**
 * The LLM mock (`startLlmMock`) on a manual clock, and `client()`: a fetch wrapper metering it as
 * its API (`rejection: 'error'`) on the same clock, as one more process on the same key would.
 * Everything is closed by the test's `cleanups`.
 */
export async function llmMockAndClients(options: Omit<LlmMockOptions, 'clock'>, cleanups: (() => unknown)[]) {
  const clock = new ManualClock();
  const mock = await startLlmMock({ ...options, clock });
  cleanups.push(() => mock.close());
  const client = () => {
    const f = rateLimitedFetch({
      limiters: { llm: { origins: [mock.origin], api: options.api } },
      rejection: 'error',
      clock,
    });
    cleanups.push(() => f.close());
    return f;
  };
  return { clock, mock, client };
}
