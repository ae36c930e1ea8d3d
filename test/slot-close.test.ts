import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import type { RateLimiter } from '../src/limiter/types.js';
import { agentWith, get, holdingServer, limit, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

// Closing an adapter closes its limiters, and a closed limiter rejects every request waiting for
// it (reason 'closed'): those waiting for a maxConcurrent slot too, at once, not when a slot
// frees or at maxWait. A real node:http server holds the one slot (a response not started); the
// limiters run on a manual clock that never moves, so nothing but the close can end the wait.

type Kind = 'interceptor' | 'fetch wrapper';

async function setup(kind: Kind) {
  const { server, held } = await holdingServer();
  const clock = new ManualClock();
  const options = { clock, default: { ...NEVER_BINDS, maxConcurrent: 1 } };
  const rejected: unknown[] = [];
  if (kind === 'interceptor') {
    const rl = limit(options);
    const agent = agentWith(rl);
    return {
      server,
      held,
      rejected,
      send: (path: string): Promise<unknown> => get(agent, `${server.origin}${path}`),
      close: () => rl.close(),
      watch: () => rl.registry.get(server.origin)?.on('rejected', (e) => rejected.push(e)),
    };
  }
  const limitedFetch = rateLimitedFetch(options);
  return {
    server,
    held,
    rejected,
    send: (path: string) => limitedFetch(`${server.origin}${path}`),
    close: () => limitedFetch.close(),
    watch: () => limitedFetch.registry.get(server.origin)?.on('rejected', (e) => rejected.push(e)),
  };
}

describe('close() and the requests waiting for a maxConcurrent slot', () => {
  it.each<Kind>(['interceptor', 'fetch wrapper'])(
    'rejects a request waiting for a slot at close (closed), not when the slot frees: %s',
    async (kind) => {
      const { server, held, rejected, send, close, watch } = await setup(kind);
      const slow = settled(send('/slow'));
      await server.waitForRequests(1);
      watch();
      const a = settled(send('/a'));
      await new Promise((resolve) => setImmediate(resolve));
      expect(a.done).toBe(false);
      close();
      try {
        await vi.waitFor(() => expect(a.done).toBe(true));
        expect(a.error).toBeInstanceOf(RateLimitRejectedError);
        expect(a.error).toMatchObject({ reason: 'closed', code: 'ERR_RATE_LIMIT_CLOSED' });
        expect(rejected).toMatchObject([{ reason: 'closed' }]);
      } finally {
        held.shift()?.writeHead(200).end('slow');
        await vi.waitFor(() => expect(slow.done).toBe(true));
      }
      // Never sent: the server saw /slow only.
      expect(server.requests).toBe(1);
    },
  );

  it.each<Kind>(['interceptor', 'fetch wrapper'])(
    'refuses at once a request sent after close, the slot still held: %s',
    async (kind) => {
      const { server, held, send, close } = await setup(kind);
      const slow = settled(send('/slow'));
      await server.waitForRequests(1);
      close();
      const b = settled(send('/b'));
      try {
        await vi.waitFor(() => expect(b.done).toBe(true));
        expect(b.error).toMatchObject({ reason: 'closed' });
      } finally {
        held.shift()?.writeHead(200).end('slow');
        await vi.waitFor(() => expect(slow.done).toBe(true));
      }
      expect(server.requests).toBe(1);
    },
  );
});

describe('a limiter of your own closed (a `limiter` instance) and the requests waiting for its slot', () => {
  const made: [string, (clock: ManualClock) => RateLimiter & { close(): void }][] = [
    [
      'a fixed-window limiter',
      (clock) =>
        new FixedWindowRateLimiter({
          name: 'mine',
          limitForPeriod: 1_000,
          limitRefreshPeriod: 1_000,
          timeoutDuration: 60_000,
          clock,
        }),
    ],
    ['an adaptive limiter', (clock) => new AdaptiveRateLimiter({ name: 'mine', clock, ...NEVER_BINDS })],
  ];
  it.each(made)('refuses them at its close (closed, its rejected event), never sent: %s', async (_, make) => {
    const { server, held } = await holdingServer();
    const clock = new ManualClock();
    const mine = make(clock);
    const rejected: unknown[] = [];
    (mine as FixedWindowRateLimiter).on('rejected', (e) => rejected.push(e));
    const agent = agentWith(
      limit({ limiters: { api: { origins: [server.origin], limiter: mine, maxConcurrent: 1 } } }),
    );
    const slow = settled(get(agent, `${server.origin}/slow`));
    await server.waitForRequests(1);
    const a = settled(get(agent, `${server.origin}/a`));
    await new Promise((resolve) => setImmediate(resolve));
    expect(a.done).toBe(false);
    mine.close();
    try {
      await vi.waitFor(() => expect(a.done).toBe(true));
      expect(a.error).toBeInstanceOf(RateLimitRejectedError);
      expect(a.error).toMatchObject({ reason: 'closed', limiter: 'mine' });
      expect(rejected).toMatchObject([{ reason: 'closed', limiter: 'mine' }]);
    } finally {
      held.shift()?.writeHead(200).end('slow');
      await vi.waitFor(() => expect(slow.done).toBe(true));
    }
    expect(server.requests).toBe(1);
  });
});
