import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { llmAgent } from './helpers/llm-agent.js';

// An Anthropic answer whose `usage` adds up past the largest number (input_tokens and
// cache_creation_input_tokens of 1e308 each: each one a finite count, their sum Infinity).
// Regression: the correction charged Infinity, which charge() refuses (InvalidArgumentError):
// through the fetch wrapper the caller's read of a whole 200 ended with that error, through the
// interceptor the call never ended. A usage that cannot be charged keeps the estimate.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function overflowingServer(): Promise<string> {
  const answer = JSON.stringify({
    id: 'msg',
    type: 'message',
    content: [],
    usage: { input_tokens: 1e308, cache_creation_input_tokens: 1e308, output_tokens: 5 },
  });
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(answer));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const request = {
  method: 'POST',
  headers: { 'content-type': 'application/json', 'x-api-key': 'k' },
  body: JSON.stringify({ model: 'c', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 }),
};

describe("api: 'anthropic': a usage that adds up past the largest number", () => {
  it('the fetch wrapper: the caller reads the whole answer; the estimate is kept', async () => {
    const origin = await overflowingServer();
    const f = rateLimitedFetch({
      limiters: { llm: { origins: [origin], api: 'anthropic' } },
      clock: new ManualClock(),
    });
    cleanups.push(() => f.close());
    const answer = await f(`${origin}/v1/messages`, request);
    expect(answer.status).toBe(200);
    expect(JSON.parse(await answer.text()).usage.output_tokens).toBe(5);
  });

  it('the interceptor: the call ends with the answer', async () => {
    const origin = await overflowingServer();
    const { agent } = llmAgent(
      { origin, api: 'anthropic', rejection: 'error', clock: new ManualClock() },
      cleanups,
    );
    const answer = await fetch(`${origin}/v1/messages`, { ...request, dispatcher: agent } as RequestInit);
    expect(answer.status).toBe(200);
    expect(JSON.parse(await answer.text()).usage.output_tokens).toBe(5);
  });
});
