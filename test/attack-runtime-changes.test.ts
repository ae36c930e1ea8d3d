import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, get, holdingServer, limit, serve } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('the (overflow) limiter: an origin leaves it once there is room', () => {
  // maxOriginLimiters: 1, A's limiter busy with a request in flight: B and C share (overflow),
  // "until there is room". Once A's request ends there is room (A's limiter is idle), yet the
  // adapters keep routing B and C to (overflow) from their route cache, and C's 429 pauses B.
  for (const via of ['interceptor', 'fetch wrapper'] as const) {
    it(`${via}: once the busy limiter is idle, an overflowed origin is not paused by another's 429`, async () => {
      const clock = new ManualClock();
      const registry = new RateLimiterRegistry({ clock, maxOriginLimiters: 1 });
      cleanups.push(() => registry.close());
      let send: (url: string) => Promise<number>;
      if (via === 'interceptor') {
        const agent = agentWith(limit({ registry, maxAttempts: 1 }));
        send = async (url) => (await get(agent, url)).status;
      } else {
        const f = rateLimitedFetch({ registry, maxAttempts: 1 });
        cleanups.push(() => f.close());
        send = async (url) => {
          const r = await f(url);
          await r.text();
          return r.status;
        };
      }
      const a = await holdingServer({ capacity: 1_000 });
      const b = await serve({ capacity: 1_000 });
      const c = await serve({
        capacity: 1_000,
        respond: (req, res) => {
          if (req.url !== '/429') return false;
          res.writeHead(429, { 'retry-after': '30' }).end('slow down');
          return true;
        },
      });

      const slow = send(`${a.server.origin}/slow`);
      await a.server.waitForRequests(1);
      // Twice each: the first makes (overflow) (a registry change), the second is routed from the cache.
      for (const path of ['/1', '/2']) {
        expect(await send(`${b.origin}${path}`)).toBe(200);
        expect(await send(`${c.origin}${path}`)).toBe(200);
      }
      expect(registry.get(b.origin)).toBeUndefined();

      a.held.shift()?.end('done');
      expect(await slow).toBe(200);
      // Room now. C's 429 (Retry-After: 30) pauses whatever limiter C's request went through.
      expect(await send(`${c.origin}/429`)).toBe(429);
      const next = settled(send(`${b.origin}/3`));
      for (let i = 0; i < 20 && !next.done; i++) await flush();
      expect(next.done).toBe(true); // B's request must not wait out C's Retry-After
      expect(next.value).toBe(200);
      expect(b.requests).toBe(3);
    });
  }
});

describe('replace keeps the maxConcurrent cap of requests still in flight', () => {
  it('interceptor: a replace with the same maxConcurrent: 1 does not let a second request go while the first is in flight', async () => {
    const a = await holdingServer({ capacity: 1_000 });
    const config = { origins: [a.server.origin], maxConcurrent: 1, maxWait: 60_000 };
    const rl = limit({ clock: new ManualClock(), limiters: { api: config } });
    const agent = agentWith(rl);
    cleanups.push(() => {
      for (const res of a.held.splice(0)) res.end('late');
    });
    const first = get(agent, `${a.server.origin}/slow`);
    await a.server.waitForRequests(1);
    // An operator changes the rate; the API still takes one request at a time.
    rl.registry.replace('api', { ...config, initialUnitsPerMinute: 600 });
    const second = settled(get(agent, `${a.server.origin}/fast`));
    for (let i = 0; i < 20; i++) await flush();
    expect(a.server.requests).toBe(1); // the first still holds the only slot
    a.held.shift()?.end('done');
    expect((await first).status).toBe(200);
    await expect.poll(() => second.done).toBe(true);
    expect(second.value?.status).toBe(200);
  });
});

describe('remove while a 429 is held for its retry', () => {
  it('interceptor: the caller gets the held 429 at once, and the retry is never sent', async () => {
    let answered = 0;
    const server = await serve({
      respond: (_req, res) => {
        answered++;
        res.writeHead(429, { 'retry-after': '30' }).end(`429 #${answered}`);
        return true;
      },
    });
    const clock = new ManualClock();
    const rl = limit({
      clock,
      limiters: { api: { origins: [server.origin], initialUnitsPerMinute: 6_000 } },
    });
    const agent = agentWith(rl);
    const old = rl.registry.get('api') as AdaptiveRateLimiter;
    const call = settled(
      request(`${server.origin}/a`, { dispatcher: agent }).then(async (r) => ({
        status: r.statusCode,
        body: await r.body.text(),
      })),
    );
    await expect.poll(() => old.snapshot().queued).toBe(1); // the retry waits out Retry-After: 30
    expect(rl.registry.remove('api')).toBe(true);
    await expect.poll(() => call.done).toBe(true);
    expect(call.value).toEqual({ status: 429, body: '429 #1' });
    clock.advance(60_000);
    for (let i = 0; i < 5; i++) await flush();
    expect(answered).toBe(1);
    expect(old.snapshot()).toMatchObject({ queued: 0, closed: true });
  });
});
