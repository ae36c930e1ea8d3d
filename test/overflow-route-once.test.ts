import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { kHoldOrigin, kPartitionForOrigin } from '../src/internal.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { OVERFLOW, RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, get, holdingServer, limit, serve } from './helpers/interceptor-fixtures.js';

// Regression: an origin, or a partition, that found no room under `maxOriginLimiters` and went to
// the `(overflow)` limiter had its route built anew at every request (the registry's entry read,
// its quota reader, partitioner and meter made again), and a partition's `partitionName` was asked
// at every request there, where it is documented as asked once, when the partition's limiter is
// made. The registry is still asked at every request (the origin leaves the overflow limiter once
// there is room), but the route is built once.

const TOKEN_A = 'Bearer sk-customer-a-0123456789abcdef';
const TOKEN_B = 'Bearer sk-customer-b-fedcba9876543210';

/** A registry with room for one limiter, taken by `a`'s origin with a request held in flight. */
async function fullRegistry() {
  const registry = new RateLimiterRegistry({ clock: new ManualClock(), maxOriginLimiters: 1 });
  cleanups.push(() => registry.close());
  const a = await holdingServer({ capacity: 1_000 });
  return { registry, a };
}

/** Ends the requests `a` holds, before the agents close (pushed after them). */
function releaseAfter(a: Awaited<ReturnType<typeof holdingServer>>): void {
  cleanups.push(() => {
    for (const res of a.held.splice(0)) res.end('late');
  });
}

describe('an origin on the (overflow) limiter: its route is built once', () => {
  it('interceptor: 10 requests to an overflowed origin read its limiter entry once, not 10 times', async () => {
    const { registry, a } = await fullRegistry();
    const agent = agentWith(limit({ registry, maxAttempts: 1 }));
    releaseAfter(a);
    const slow = get(agent, `${a.server.origin}/slow`);
    await a.server.waitForRequests(1);
    const b = await serve({ capacity: 1_000 });
    // The first request makes (overflow) (a registry change, which clears the routes): not counted.
    expect((await get(agent, `${b.origin}/0`)).status).toBe(200);
    expect(registry.get(OVERFLOW)).toBeDefined();
    const configFor = vi.spyOn(registry, 'configFor');

    for (let i = 1; i <= 10; i++) expect((await get(agent, `${b.origin}/${i}`)).status).toBe(200);

    expect(configFor).toHaveBeenCalledTimes(1);
    expect(registry.get(b.origin)).toBeUndefined(); // still on (overflow): A's limiter is busy
    a.held.shift()?.end('done');
    expect((await slow).status).toBe(200);
  });

  it('fetch wrapper: the same', async () => {
    const { registry, a } = await fullRegistry();
    const f = rateLimitedFetch({ registry, maxAttempts: 1 });
    cleanups.push(() => f.close());
    releaseAfter(a);
    const slow = f(`${a.server.origin}/slow`);
    await a.server.waitForRequests(1);
    const b = await serve({ capacity: 1_000 });
    expect((await f(`${b.origin}/0`)).status).toBe(200);
    const configFor = vi.spyOn(registry, 'configFor');

    for (let i = 1; i <= 10; i++) {
      const response = await f(`${b.origin}/${i}`);
      await response.text();
      expect(response.status).toBe(200);
    }

    expect(configFor).toHaveBeenCalledTimes(1);
    a.held.shift()?.end('done');
    await (await slow).text();
  });
});

describe('a partition on the (overflow) limiter: partitionName is asked only when a limiter is made', () => {
  it('registry: a partition that finds no room is not named at every look-up', () => {
    const registry = new RateLimiterRegistry({
      clock: new ManualClock(),
      maxOriginLimiters: 1,
      maxPausedOrigins: 0,
    });
    cleanups.push(() => registry.close());
    const origin = 'https://api.test';
    registry.limiterFor(origin);
    registry[kPartitionForOrigin](origin, { id: 'first' }); // meters through the origin's limiter
    // The origin's limiter busy (an adapter's request in flight through it): no room for another.
    const release = registry[kHoldOrigin](origin, registry.limiterFor(origin) as AdaptiveRateLimiter);
    const name = vi.fn(() => 'customer-b');

    for (let i = 0; i < 10; i++) {
      expect(registry[kPartitionForOrigin](origin, { id: 'idB', name })?.limiter).toBe(
        registry.get(OVERFLOW),
      );
    }

    expect(name).not.toHaveBeenCalled();
    release();
    // Room again: the partition's own limiter is made, and named then.
    expect(registry[kPartitionForOrigin](origin, { id: 'idB', name })?.limiter?.snapshot().name).toBe(
      `${origin}#customer-b`,
    );
    expect(name).toHaveBeenCalledTimes(1);
  });

  it("interceptor: B's 10 requests on (overflow) do not ask partitionName", async () => {
    const { registry, a } = await fullRegistry();
    const partitionName = vi.fn((r: { headers: Record<string, unknown> }) =>
      r.headers.authorization === TOKEN_B ? 'customer-b' : undefined,
    );
    const agent = agentWith(limit({ registry, maxAttempts: 1, partitionName }));
    releaseAfter(a);
    // A's token meters through the origin's own limiter, held busy by its request in flight.
    const slow = get(agent, `${a.server.origin}/slow`, { headers: { authorization: TOKEN_A } });
    await a.server.waitForRequests(1);

    for (let i = 0; i < 10; i++) {
      const answer = await get(agent, `${a.server.origin}/${i}`, { headers: { authorization: TOKEN_B } });
      expect(answer.status).toBe(200);
    }

    expect(registry.get(OVERFLOW)).toBeDefined();
    expect(partitionName).not.toHaveBeenCalled();
    a.held.shift()?.end('done');
    expect((await slow).status).toBe(200);
  });
});
