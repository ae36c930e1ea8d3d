import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { drive } from './helpers/drive.js';

// `api: 'anthropic'`: a 429 that is not Anthropic's own (a proxy's HTML page, no retry-after) is a
// plain rate 429: cut and retried per the contract. Regression: any 429 without Anthropic's JSON
// body and without retry-after was read as a spend cap: no retry, QuotaExhaustedError. Anthropic's
// spend cap has its own body (`enforced_spend_limit_reached`), and its rate 429s carry
// retry-after. A real node:http server on 127.0.0.1 answers the first call so, then 200; the
// limiter's clock is a manual one, moved while a call waits (a 429 with nothing said waits a
// random crowd wait).

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const PAGE = '<html><head><title>429 Too Many Requests</title></head><body>Too Many Requests</body></html>';

async function proxyServer() {
  let calls = 0;
  const server: Server = createServer((req, res) => {
    req.resume();
    calls++;
    if (calls === 1) {
      res.writeHead(429, { 'content-type': 'text/html' }).end(PAGE);
      return;
    }
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end('{"type":"message","usage":{"input_tokens":3,"output_tokens":5}}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, calls: () => calls };
}

const body = JSON.stringify({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
const headers = { 'content-type': 'application/json', 'x-api-key': 'k' };

describe("api: 'anthropic': a proxy's 429 (an HTML page, no retry-after)", () => {
  it("is a rate 429 through the fetch wrapper, rejection: 'error': cut, retried, the 200 handed over", async () => {
    const { origin, calls } = await proxyServer();
    const clock = new ManualClock();
    const fetch = rateLimitedFetch({
      limiters: { llm: { origins: [origin], api: 'anthropic' } },
      rejection: 'error',
      clock,
    });
    cleanups.push(() => fetch.close());
    const answer = await drive(clock, fetch(`${origin}/v1/messages`, { method: 'POST', headers, body }));
    expect(answer.status).toBe(200);
    await answer.text();
    expect(calls()).toBe(2);
    expect(fetch.registry.get('llm')?.snapshot().throttles).toBe(1);
  });

  it("is a rate 429 through the interceptor, rejection: 'error': cut, retried, the 200 handed over", async () => {
    const { origin, calls } = await proxyServer();
    const clock = new ManualClock();
    const interceptor = adaptiveRateLimit({
      limiters: { llm: { origins: [origin], api: 'anthropic' } },
      default: false,
      rejection: 'error',
      clock,
    });
    const agent = new Agent().compose(interceptor);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
    );
    const answer = await drive(
      clock,
      agent.request({ origin, path: '/v1/messages', method: 'POST', headers, body }),
    );
    expect(answer.statusCode).toBe(200);
    await answer.body.text();
    expect(calls()).toBe(2);
    expect(interceptor.registry.get('llm')?.snapshot().throttles).toBe(1);
  });
});
