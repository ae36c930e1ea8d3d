import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { agentWith, cleanups, limit } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

/** A server that counts the requests it receives. */
async function countingServer() {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    res.end('ok');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get requests() {
      return requests;
    },
  };
}

/** One request a second, its one unit spent by the test: the next waits for the clock. */
const SPENT = { initialUnitsPerMinute: 60, slowStart: false } as const;
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("an adapter's close() after a grant, before the send (the adapter owns its registry)", () => {
  it('interceptor: the request is refused as closed, not sent', async () => {
    const server = await countingServer();
    const clock = new ManualClock();
    const rl = limit({ clock, default: SPENT });
    const agent = agentWith(rl);
    const limiter = rl.registry.limiterFor(server.origin) as AdaptiveRateLimiter;
    expect(limiter.tryAcquire()).toBeDefined();
    const call = settled(request(`${server.origin}/a`, { dispatcher: agent }));
    await flush();
    expect(limiter.snapshot().queued).toBe(1);
    clock.advance(1_000); // granted now, sent a microtask later
    rl.close();
    await expect.poll(() => call.done).toBe(true);
    await flush();
    expect(server.requests).toBe(0);
    expect((call.error as { reason?: string } | undefined)?.reason).toBe('closed');
  });

  it('fetch wrapper: the request is refused as closed, not sent', async () => {
    const server = await countingServer();
    const clock = new ManualClock();
    const limitedFetch = rateLimitedFetch({ clock, default: SPENT });
    const limiter = limitedFetch.registry.limiterFor(server.origin) as AdaptiveRateLimiter;
    expect(limiter.tryAcquire()).toBeDefined();
    const call = settled(limitedFetch(`${server.origin}/a`));
    await flush();
    expect(limiter.snapshot().queued).toBe(1);
    clock.advance(1_000);
    limitedFetch.close();
    await expect.poll(() => call.done).toBe(true);
    await flush();
    expect(server.requests).toBe(0);
    expect((call.error as { reason?: string } | undefined)?.reason).toBe('closed');
  });
});
