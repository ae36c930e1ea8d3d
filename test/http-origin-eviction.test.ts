import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';

// A per-origin limiter dropped while its request was in flight: the request's 429 paused a
// limiter nobody used any more, and the next request to the origin went out at once through a
// new, unpaused one.

/** A server that holds its first request until `answer429`; it answers later ones at once. */
async function heldServer() {
  const held: ServerResponse[] = [];
  const server = await serve({
    capacity: 100,
    respond: (_req, res) => {
      if (server.requests > 1) return false;
      held.push(res);
      return true;
    },
  });
  return {
    server,
    async answer429(retryAfter: string) {
      await server.waitForRequests(1);
      held.shift()?.writeHead(429, { 'retry-after': retryAfter }).end('slow down');
    },
  };
}

function crowdedRegistry(clock: ManualClock) {
  const registry = new RateLimiterRegistry({ clock, maxOriginLimiters: 3, default: { maxWait: 30_000 } });
  cleanups.push(() => registry.close());
  return registry;
}

describe('a per-origin limiter with a request in flight is kept however many origins crowd in', () => {
  it('through the interceptor: the 429 pauses the limiter the next request uses', async () => {
    const clock = new ManualClock();
    const registry = crowdedRegistry(clock);
    const agent = agentWith(limit({ registry, maxAttempts: 1 }));
    const v = await heldServer();
    const others = await Promise.all([serve(), serve(), serve()]);

    const first = get(agent, `${v.server.origin}/`);
    await v.server.waitForRequests(1);
    for (const other of others) expect((await get(agent, `${other.origin}/`)).status).toBe(200);
    await v.answer429('60');
    expect((await first).status).toBe(429);

    await expect(get(agent, `${v.server.origin}/`)).rejects.toMatchObject({
      name: 'RateLimitRejectedError',
      reason: 'max-wait',
    });
    expect(v.server.requests).toBe(1);
  });

  it('through the fetch wrapper: the same', async () => {
    const clock = new ManualClock();
    const registry = crowdedRegistry(clock);
    const f = rateLimitedFetch({ registry, maxAttempts: 1 });
    const v = await heldServer();
    const others = await Promise.all([serve(), serve(), serve()]);

    const first = f(`${v.server.origin}/`);
    await v.server.waitForRequests(1);
    for (const other of others) expect((await f(`${other.origin}/`)).status).toBe(200);
    await v.answer429('60');
    expect((await first).status).toBe(429);

    await expect(f(`${v.server.origin}/`)).rejects.toBeInstanceOf(RateLimitRejectedError);
    expect(v.server.requests).toBe(1);
  });
});
