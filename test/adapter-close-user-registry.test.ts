import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { InterceptorOptions } from '../src/http/options.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, get, holdingServer, limit, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

// An adapter given a registry of yours (or a `limiter` instance) does not close it at its close():
// others use it. Its own requests still waiting (for a maxConcurrent slot, or for units) are
// refused at once with RateLimitRejectedError 'closed', and so are the ones sent after; the
// registry's limiters stay open, with their other waiters. Real node:http server; the limiters
// run on a manual clock that never moves, so nothing but the close can end a wait.

type Kind = 'interceptor' | 'fetch wrapper';

async function setup(kind: Kind, config: Record<string, unknown>) {
  const { server, held } = await holdingServer();
  const clock = new ManualClock();
  const registry = new RateLimiterRegistry({ clock, default: config });
  const adapter = (options: InterceptorOptions) => {
    if (kind === 'interceptor') {
      const rl = limit(options);
      const agent = agentWith(rl);
      return { send: (path: string) => get(agent, `${server.origin}${path}`), close: () => rl.close() };
    }
    const limited = rateLimitedFetch(options);
    return {
      send: (path: string) =>
        limited(`${server.origin}${path}`).then(async (r) => ({ status: r.status, body: await r.text() })),
      close: () => limited.close(),
    };
  };
  const finish = async (...pending: { done: boolean }[]) => {
    answer(200);
    await vi.waitFor(() => expect(pending.every((p) => p.done)).toBe(true));
  };
  const answer = (status: number) => {
    for (const res of held.splice(0)) res.writeHead(status, { 'retry-after': '0' }).end(`slow ${status}`);
  };
  return { server, registry, adapter, finish, answer, limiter: () => registry.limiterFor(server.origin) };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("an adapter's close() with a registry you own", () => {
  it.each<Kind>(['interceptor', 'fetch wrapper'])(
    'refuses its request waiting for a slot (closed), and leaves the registry and its limiter open: %s',
    async (kind) => {
      const { server, registry, adapter, finish, limiter } = await setup(kind, {
        ...NEVER_BINDS,
        maxConcurrent: 1,
      });
      const mine = adapter({ registry });
      const slow = settled(mine.send('/slow'));
      await server.waitForRequests(1);
      const a = settled(mine.send('/a'));
      await tick();
      expect(a.done).toBe(false);
      mine.close();
      try {
        await vi.waitFor(() => expect(a.done).toBe(true));
        expect(a.error).toBeInstanceOf(RateLimitRejectedError);
        expect(a.error).toMatchObject({ reason: 'closed', code: 'ERR_RATE_LIMIT_CLOSED' });
        // Open for the others: the registry's limiter, and another adapter on it.
        expect(limiter()?.snapshot().closed).toBe(false);
        const other = adapter({ registry });
        expect(await other.send('/b')).toMatchObject({ status: 200 });
        other.close();
      } finally {
        await finish(slow);
      }
      // /a was never sent; the in-flight /slow got its answer.
      expect(slow.error).toBeUndefined();
      expect(server.requests).toBe(2);
    },
  );

  it.each<Kind>(['interceptor', 'fetch wrapper'])(
    "refuses its request waiting for units (closed); another user's waiter in the same limiter waits on: %s",
    async (kind) => {
      const { server, registry, adapter, finish, limiter } = await setup(kind, {
        initialUnitsPerMinute: 60,
        slowStart: false,
      });
      const mine = adapter({ registry });
      await mine.send('/first');
      const a = settled(mine.send('/a'));
      await tick();
      expect(a.done).toBe(false);
      expect(limiter()?.snapshot().queued).toBe(1);
      const direct = settled(limiter()?.acquire() as Promise<unknown>);
      mine.close();
      await vi.waitFor(() => expect(a.done).toBe(true));
      expect(a.error).toBeInstanceOf(RateLimitRejectedError);
      expect(a.error).toMatchObject({ reason: 'closed' });
      await tick();
      expect(direct.done).toBe(false);
      expect(limiter()?.snapshot()).toMatchObject({ closed: false, queued: 1 });
      registry.close();
      await vi.waitFor(() => expect(direct.done).toBe(true));
      await finish();
      expect(server.requests).toBe(1);
    },
  );

  it.each<Kind>(['interceptor', 'fetch wrapper'])(
    'refuses at once a request sent after its close, units and slot free, without sending it: %s',
    async (kind) => {
      const { server, registry, adapter, limiter } = await setup(kind, { ...NEVER_BINDS, maxConcurrent: 1 });
      const mine = adapter({ registry });
      await mine.send('/first');
      mine.close();
      const b = settled(mine.send('/b'));
      await vi.waitFor(() => expect(b.done).toBe(true));
      expect(b.error).toBeInstanceOf(RateLimitRejectedError);
      expect(b.error).toMatchObject({ reason: 'closed' });
      expect(limiter()?.snapshot().closed).toBe(false);
      expect(server.requests).toBe(1);
    },
  );

  it.each<Kind>(['interceptor', 'fetch wrapper'])(
    'gives the caller the 429 of a request in flight at its close: its retry is refused, not sent: %s',
    async (kind) => {
      const { server, registry, adapter, answer } = await setup(kind, NEVER_BINDS);
      const mine = adapter({ registry });
      const slow = settled(mine.send('/slow'));
      await server.waitForRequests(1);
      mine.close();
      answer(429);
      await vi.waitFor(() => expect(slow.done).toBe(true));
      expect(slow.value).toMatchObject({ status: 429, body: 'slow 429' });
      expect(server.requests).toBe(1);
    },
  );

  it.each<Kind>(['interceptor', 'fetch wrapper'])(
    'refuses its request waiting for the slot of a `limiter` of your own (one that tells nothing): %s',
    async (kind) => {
      const { server, adapter, finish } = await setup(kind, NEVER_BINDS);
      const permit = { units: 1, success() {}, throttled() {}, failed() {} };
      const yours = {
        name: 'yours',
        tryAcquire: () => permit,
        acquire: () => Promise.resolve(permit),
      };
      const mine = adapter({
        limiters: { api: { origins: [server.origin], limiter: yours, maxConcurrent: 1 } },
      });
      const slow = settled(mine.send('/slow'));
      await server.waitForRequests(1);
      const a = settled(mine.send('/a'));
      await tick();
      expect(a.done).toBe(false);
      mine.close();
      try {
        await vi.waitFor(() => expect(a.done).toBe(true));
        expect(a.error).toMatchObject({ reason: 'closed', limiter: 'api' });
      } finally {
        await finish(slow);
      }
      expect(server.requests).toBe(1);
    },
  );
});
