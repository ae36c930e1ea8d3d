import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { agentWith, cleanups, limit, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

const CALL = JSON.stringify({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });

/**
 * `/stall` is answered 429 (Retry-After: 0) with a short JSON body that never ends (a proxy or
 * gateway that stalls mid-body); `/hold` gets a 200 once `answerHeld()` is called; any other path
 * gets a 200 with usage.
 */
async function stallingServer() {
  const seen: string[] = [];
  const open: ServerResponse[] = [];
  const held: ServerResponse[] = [];
  const server = createServer((req, res) => {
    req.resume();
    seen.push(req.url ?? '');
    if (req.url === '/hold') {
      held.push(res);
      return;
    }
    if (req.url === '/stall') {
      res.writeHead(429, { 'retry-after': '0', 'content-type': 'application/json' });
      res.write('{"error":{"type":"requests","message":"Rate limit reached');
      open.push(res);
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"usage":{"prompt_tokens":3}}');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  const answerHeld = () => {
    for (const r of held.splice(0)) r.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  };
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, open, answerHeld };
}

describe('an LLM API 429 whose short body stalls, under maxConcurrent: 1', () => {
  it('interceptor: the slot is freed when the 429 starts, so the next call of the origin is sent', async () => {
    const { origin, seen, open } = await stallingServer();
    const rl = limit({
      limiters: { llm: { origins: [origin], api: 'openai', maxConcurrent: 1, ...NEVER_BINDS } },
    });
    const agent = agentWith(rl);
    cleanups.push(() => {
      for (const r of open) r.destroy();
    });
    const post = (path: string) =>
      request(`${origin}${path}`, {
        dispatcher: agent,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: CALL,
      }).then(
        async (r) => r.statusCode,
        (e: unknown) => e,
      );

    void post('/stall');
    await until(() => seen.length >= 1, 'the first call at the server');
    const second = post('/ok');
    // maxConcurrent: a slot is freed when the response starts (headers received), not when its
    // body ends. The 429's headers came; its body never ends.
    await until(() => seen.includes('/ok'), 'the second call at the server', 2_000);
    expect(await second).toBe(200);
  });

  it('interceptor: a 429 sent after waiting for the slot frees it when it starts, so the next call is sent', async () => {
    const { origin, seen, open, answerHeld } = await stallingServer();
    const rl = limit({
      limiters: { llm: { origins: [origin], api: 'openai', maxConcurrent: 1, ...NEVER_BINDS } },
    });
    const agent = agentWith(rl);
    cleanups.push(() => {
      for (const r of open) r.destroy();
    });
    const post = (path: string) =>
      request(`${origin}${path}`, {
        dispatcher: agent,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: CALL,
      }).then(
        async (r) => {
          await r.body.dump();
          return r.statusCode;
        },
        (e: unknown) => e,
      );

    // `/hold` takes the slot, so `/stall` waits for it (the attempt loop's path, not the fast path).
    const first = post('/hold');
    await until(() => seen.length >= 1, 'the first call at the server');
    void post('/stall');
    answerHeld();
    expect(await first).toBe(200);
    await until(() => seen.includes('/stall'), 'the stalled call at the server');
    const third = post('/ok');
    await until(() => seen.includes('/ok'), 'the third call at the server', 2_000);
    expect(await third).toBe(200);
  });

  it('fetch wrapper: the slot is freed when the 429 starts, so the next call of the origin is sent', async () => {
    const { origin, seen, open } = await stallingServer();
    const f = rateLimitedFetch({
      limiters: { llm: { origins: [origin], api: 'openai', maxConcurrent: 1, ...NEVER_BINDS } },
    });
    cleanups.push(
      () => f.close(),
      () => {
        for (const r of open) r.destroy();
      },
    );
    const post = (path: string) =>
      f(`${origin}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: CALL,
      }).then(
        (r) => r.status,
        (e: unknown) => e,
      );

    void post('/stall');
    await until(() => seen.length >= 1, 'the first call at the server');
    const second = post('/ok');
    await until(() => seen.includes('/ok'), 'the second call at the server', 2_000);
    expect(await second).toBe(200);
  });

  it('(control) without api, the same stalled 429 frees the slot and the next call is sent', async () => {
    const { origin, seen, open } = await stallingServer();
    const rl = limit({ limiters: { plain: { origins: [origin], maxConcurrent: 1, ...NEVER_BINDS } } });
    const agent = agentWith(rl);
    cleanups.push(() => {
      for (const r of open) r.destroy();
    });
    void request(`${origin}/stall`, { dispatcher: agent, method: 'POST', body: CALL }).catch(() => {});
    await until(() => seen.length >= 1, 'the first call at the server');
    const second = request(`${origin}/ok`, { dispatcher: agent, method: 'POST', body: CALL });
    await until(() => seen.includes('/ok'), 'the second call at the server', 2_000);
    expect((await second).statusCode).toBe(200);
  });
});
