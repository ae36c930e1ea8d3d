import { Agent, type Dispatcher, request } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { RateLimitedServer } from './helpers/rate-limited-server.js';

// The interceptor remembers each origin's limiter; the registry's changes must still reach the
// next request, and a per-origin limiter in use must not be dropped as idle.

const NEVER_BINDS = { initialUnitsPerMinute: 6_000_000, minUnitsPerMinute: 6_000_000 };

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(registry: RateLimiterRegistry) {
  const server = await RateLimitedServer.start({ capacity: 1_000 });
  const interceptor = adaptiveRateLimit({ registry });
  const agent = new Agent();
  cleanups.push(
    () => server.close(),
    () => registry.close(),
    () => agent.close(),
  );
  const dispatcher: Dispatcher = agent.compose(interceptor);
  const get = async (path = '/') => {
    const response = await request(`${server.origin}${path}`, { dispatcher });
    await response.body.text();
    return response.statusCode;
  };
  return { server, get };
}

/** Counts the units each limiter grants from now on. */
function grants(registry: RateLimiterRegistry, name: string) {
  const acquired = vi.fn();
  registry.get(name)?.on('acquired', acquired);
  return acquired;
}

describe('adaptiveRateLimit: the limiter of an origin', () => {
  it('uses the limiter that replace() puts in place, from the next request', async () => {
    const registry = new RateLimiterRegistry({ limiters: { api: { origins: [], ...NEVER_BINDS } } });
    const { server, get } = await setup(registry);
    registry.replace('api', { origins: [server.origin], ...NEVER_BINDS });
    const before = grants(registry, 'api');
    await get();

    registry.replace('api', { origins: [server.origin], ...NEVER_BINDS });
    const after = grants(registry, 'api');
    await get();

    expect(before).toHaveBeenCalledTimes(1);
    expect(after).toHaveBeenCalledTimes(1);
  });

  it('goes to a limiter of its own once its named limiter is removed, and back when one is added', async () => {
    const registry = new RateLimiterRegistry({ limiters: { api: { origins: [], ...NEVER_BINDS } } });
    const { server, get } = await setup(registry);
    registry.add('named', { origins: [server.origin], ...NEVER_BINDS });
    await get();
    expect(registry.names()).toEqual(['api', 'named']);

    registry.remove('named');
    await get();
    expect(registry.names()).toEqual(['api', server.origin]);

    registry.add('again', { origins: [server.origin], ...NEVER_BINDS });
    const again = grants(registry, 'again');
    await get();
    expect(again).toHaveBeenCalledTimes(1);
  });

  it('keeps a per-origin limiter used within idleTimeout, and starts afresh after one left idle', async () => {
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({ clock, idleTimeout: 1_000, default: NEVER_BINDS });
    const { server, get } = await setup(registry);
    const removed = vi.fn();
    registry.on('removed', removed);

    await get();
    const first = registry.get(server.origin);
    for (let i = 0; i < 3; i++) {
      clock.advance(900);
      await get();
    }
    expect(removed).not.toHaveBeenCalled();
    expect(registry.get(server.origin)).toBe(first);

    clock.advance(1_000);
    await get();
    expect(removed).toHaveBeenCalledWith({ name: server.origin, limiter: first });
    expect(registry.get(server.origin)).not.toBe(first);
    expect(registry.get(server.origin)).toBeDefined();
  });
});
