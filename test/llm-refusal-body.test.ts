import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { ThrottledBodyTooLongError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { until } from './helpers/rate-limited-server.js';

// The fetch wrapper with `api` reads a 429's body to tell why it came: up to 64 KiB, as the
// interceptor holds a 429. A 429 whose body goes on (a proxy's page streamed, a body that never
// ends) is cut there and retried; it must not hold the call until the body ends.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A server whose first answer to each path (every answer for `/always`) is a 429 whose body never ends. */
async function endlessRefusals() {
  const attempts = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    req.resume();
    const path = req.url ?? '/';
    const n = (attempts.get(path) ?? 0) + 1;
    attempts.set(path, n);
    if (n > 1 && path !== '/always') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"usage":{"prompt_tokens":3}}');
      return;
    }
    res.writeHead(429, { 'retry-after': '0', 'content-type': 'application/json' });
    // 80 KiB of an error message, and the body stays open.
    res.write(`{"error":{"type":"tokens","message":"${'x'.repeat(80 * 1024)}`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, attempts };
}

describe("the fetch wrapper with api: a 429's body longer than 64 KiB", () => {
  it('is cut at 64 KiB and the call retried, not held until the body ends', async () => {
    const { origin, attempts } = await endlessRefusals();
    const fetch = rateLimitedFetch({
      fetch: globalThis.fetch,
      limiters: { llm: { origins: [origin], api: 'openai' } },
    });
    cleanups.push(() => fetch.close());
    const body = JSON.stringify({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
    const res = await fetch(`${origin}/v1/chat/completions`, { method: 'POST', body });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ usage: { prompt_tokens: 3 } });
    expect(attempts.get('/v1/chat/completions')).toBe(2);
    expect(fetch.registry.get('llm')?.snapshot().throttles).toBe(1);
  });

  it('hands over the last 429 with the 64 KiB kept, its body ending with ThrottledBodyTooLongError', async () => {
    const { origin, attempts } = await endlessRefusals();
    const fetch = rateLimitedFetch({
      fetch: globalThis.fetch,
      limiters: { llm: { origins: [origin], api: 'openai' } },
      maxAttempts: 2,
    });
    cleanups.push(() => fetch.close());
    const res = await fetch(`${origin}/always`, { method: 'POST', body: '{"model":"m","max_tokens":10}' });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('0');
    expect(attempts.get('/always')).toBe(2);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let bytes = 0;
    let error: unknown;
    for (;;) {
      try {
        const { done, value } = await reader.read();
        if (done) break;
        bytes += value.byteLength;
      } catch (thrown) {
        error = thrown;
        break;
      }
    }
    expect(bytes).toBe(64 * 1024);
    expect(error).toBeInstanceOf(ThrottledBodyTooLongError);
  });
});

// Regression: with `api: 'anthropic'`, a 429 without Anthropic's JSON body and without
// retry-after (a proxy's or a gateway's HTML page) was read as a spend cap: QuotaExhaustedError
// (`spend_cap`), sent once, no retry. A spend cap says so in its body; such a 429 is a rate limit.
describe("api: 'anthropic': a 429 that is not Anthropic's JSON", () => {
  it("is a rate limit, retried after the bare 429's wait, not a spend cap", async () => {
    let attempts = 0;
    const server: Server = createServer((req, res) => {
      req.resume();
      attempts++;
      if (attempts === 1)
        res.writeHead(429, { 'content-type': 'text/html' }).end('<html>429 Too Many Requests</html>');
      else
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end('{"usage":{"input_tokens":3,"output_tokens":5}}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const clock = new ManualClock();
    const fetch = rateLimitedFetch({ clock, limiters: { llm: { origins: [origin], api: 'anthropic' } } });
    cleanups.push(() => fetch.close());
    const body = JSON.stringify({ model: 'c', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
    const call = fetch(`${origin}/v1/messages`, { method: 'POST', body });
    await until(() => fetch.registry.get('llm')?.snapshot().throttles === 1, 'the 429');
    // A bare 429 before 30 successes waits a random time of up to a minute, on the clock.
    await until(() => {
      clock.advance(1_000);
      return attempts === 2;
    }, 'the retry');
    const res = await call;
    expect(res.status).toBe(200);
    expect(attempts).toBe(2);
  });
});
