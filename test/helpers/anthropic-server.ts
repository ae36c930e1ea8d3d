import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ManualClock } from '../../src/clock.js';
import { rateLimitedFetch } from '../../src/http/fetch.js';
import { llmAgent } from './llm-agent.js';

/**
 * A node:http server on 127.0.0.1 that answers every request, once its body is read, with a
 * 200 Anthropic message whose `usage` is `usage` (and `headers`); closed by the test's `cleanups`.
 * Resolves with its origin.
 */
export async function anthropicServer(
  usage: Readonly<Record<string, number>>,
  cleanups: (() => unknown)[],
  headers: Readonly<Record<string, string>> = {},
): Promise<string> {
  const answer = JSON.stringify({ id: 'msg', type: 'message', content: [], usage });
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json', ...headers }).end(answer));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A messages call of 10 output tokens at most, for {@link anthropicServer}. */
const anthropicRequest = {
  method: 'POST',
  headers: { 'content-type': 'application/json', 'x-api-key': 'k' },
  body: JSON.stringify({ model: 'c', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 }),
};

/**
 * One {@link anthropicRequest} to `origin`, metered as `api: 'anthropic'` (a manual clock) through
 * the interceptor (Node's fetch over an Agent composed with it) or through the fetch wrapper; both
 * closed by the test's `cleanups`. Resolves with the answer.
 */
export async function anthropicCall(
  origin: string,
  via: 'interceptor' | 'fetch wrapper',
  cleanups: (() => unknown)[],
): Promise<Response> {
  if (via === 'interceptor') {
    const { agent } = llmAgent(
      { origin, api: 'anthropic', rejection: 'error', clock: new ManualClock() },
      cleanups,
    );
    return fetch(`${origin}/v1/messages`, { ...anthropicRequest, dispatcher: agent } as RequestInit);
  }
  const f = rateLimitedFetch({
    limiters: { llm: { origins: [origin], api: 'anthropic' } },
    clock: new ManualClock(),
  });
  cleanups.push(() => f.close());
  return f(`${origin}/v1/messages`, anthropicRequest);
}
