import diagnosticsChannel from 'node:diagnostics_channel';
import type { ServerResponse } from 'node:http';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import { DIAGNOSTICS_CHANNELS } from '../src/diagnostics.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit, runtimeOf } from '../src/http/interceptor.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import { createSharedBudget, MemoryBudgetStore, type SharedBudget } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { RateLimitedServer, until } from './helpers/rate-limited-server.js';

// A limiter instance the user owns behind origins of the HTTP adapters: a SharedBudget on a
// MemoryBudgetStore stands for one budget in Redis (same rules, no Redis needed), each budget
// on the store for one process.

function sharedBudget(store: MemoryBudgetStore, clock: ManualClock): SharedBudget {
  const budget = createSharedBudget({
    name: 'api',
    store,
    clock,
    initialUnitsPerMinute: 6_000,
    controller: 'aimd', // the cut mechanics, with AIMD's 0.7
    heartbeatInterval: 250,
    burst: 'second', // the test sends without moving the manual clock
  });
  cleanups.push(() => budget.close());
  return budget;
}

/** Answers request number `n` (1-based) with 429 and `Retry-After: 30`; the others pass to the bucket. */
function throttleRequest(n: number) {
  let seen = 0;
  return (_req: unknown, res: ServerResponse) => {
    if (++seen !== n) return false;
    res.writeHead(429, { 'retry-after': '30' }).end('slow down');
    return true;
  };
}

describe('a SharedBudget behind origins of the HTTP adapters', () => {
  it('meters the requests through the budget: a 429 cuts the shared rate', async () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    const budget = sharedBudget(store, clock);
    const server = await serve({ capacity: 1, retryAfter: undefined });
    const rl = limit({
      limiters: { api: { origins: [server.origin], limiter: budget } },
      default: false,
      maxAttempts: 1,
    });
    const agent = agentWith(rl);
    const acquired = vi.fn();
    budget.limiter.on('acquired', acquired);

    expect((await get(agent, `${server.origin}/1`)).status).toBe(200);
    expect((await get(agent, `${server.origin}/2`)).status).toBe(429);
    await budget.flush();

    expect(acquired).toHaveBeenCalledTimes(2);
    expect(store.cuts).toBe(1);
    expect(store.rate).toBeCloseTo(4_200); // AIMD's 0.7 of the whole rate
    expect(budget.state).toMatchObject({ epoch: 1, members: 1 });
    expect(budget.state.rate).toBeCloseTo(4_200);
    expect(budget.limiter.snapshot().cuts).toBe(1);

    // The registry answers the budget's local limiter, and its config the budget itself.
    expect(rl.registry.get('api')).toBe(budget.limiter);
    expect(rl.registry.limiterFor(server.origin)).toBe(budget.limiter);
    expect(rl.registry.configFor('api')?.limiter).toBe(budget);
  });

  it('shares one budget between two interceptors (two processes): a 429 in one cuts and pauses both', async () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    const a = sharedBudget(store, clock);
    const b = sharedBudget(store, clock);
    clock.advance(250); // a heartbeat each: both see two members
    expect(a.state).toMatchObject({ members: 2, share: 3_000 });
    expect(b.state).toMatchObject({ members: 2, share: 3_000 });

    const server = await serve({ capacity: 100, respond: throttleRequest(3) });
    const agentA = agentWith(
      limit({ limiters: { api: { origins: [server.origin], limiter: a } }, maxAttempts: 1 }),
    );
    const agentB = agentWith(
      limit({ limiters: { api: { origins: [server.origin], limiter: b } }, maxAttempts: 1 }),
    );

    expect((await get(agentA, `${server.origin}/a1`)).status).toBe(200);
    expect((await get(agentB, `${server.origin}/b1`)).status).toBe(200);
    expect((await get(agentA, `${server.origin}/a2`)).status).toBe(429);
    await a.flush();
    expect(store.cuts).toBe(1);
    expect(a.state.epoch).toBe(1);
    expect(b.state.epoch).toBe(0); // b learns at its next heartbeat

    clock.advance(250);
    expect(b.state.epoch).toBe(1);
    expect(b.state.rate).toBeCloseTo(4_200);
    expect(a.state.rate).toBeCloseTo(4_200);
    // a's Retry-After pauses b too: b's next request waits for the shared pause.
    const pausedUntil = b.limiter.snapshot().pausedUntil;
    expect(pausedUntil).toBeGreaterThan(clock.now() + 29_000);
    const pending = get(agentB, `${server.origin}/b2`);
    await until(() => b.limiter.snapshot().queued === 1, "b's request to wait for the pause");
    expect(server.requests).toBe(3);

    clock.advance(30_000);
    expect((await pending).status).toBe(200);
    expect(server.requests).toBe(4);
    expect(b.limiter.snapshot().cuts).toBe(0); // b did not cut its own: it took the shared cut
  });

  it('works the same through rateLimitedFetch', async () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    const budget = sharedBudget(store, clock);
    const server = await serve({ capacity: 0, retryAfter: undefined });
    const fetch = rateLimitedFetch({
      limiters: { api: { origins: [server.origin], limiter: budget } },
      maxAttempts: 1,
    });
    cleanups.push(() => fetch.close());

    const response = await fetch(`${server.origin}/x`);
    expect(response.status).toBe(429);
    await response.body?.cancel();
    await budget.flush();
    expect(store.cuts).toBe(1);
    expect(budget.state.epoch).toBe(1);
  });

  it('publishes diagnostics for the budget under its local limiter', async () => {
    const clock = new ManualClock();
    const budget = sharedBudget(new MemoryBudgetStore({ clock }), clock);
    const server = await serve({ capacity: 0, retryAfter: undefined });
    const agent = agentWith(
      limit({ limiters: { api: { origins: [server.origin], limiter: budget } }, maxAttempts: 1 }),
    );
    const messages: unknown[] = [];
    const listener = (message: unknown) => messages.push(message);
    diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNELS.throttle, listener);
    try {
      expect((await get(agent, `${server.origin}/x`)).status).toBe(429);
    } finally {
      diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNELS.throttle, listener);
    }
    expect(messages).toEqual([expect.objectContaining({ limiter: 'api', cut: true })]);
    expect(budget.limiter.snapshot()).toMatchObject({ throttles: 1, cuts: 1 });
  });

  it("keeps maxConcurrent next to the budget: the adapter's gate caps its requests in flight", async () => {
    const clock = new ManualClock();
    const budget = sharedBudget(new MemoryBudgetStore({ clock }), clock);
    const held: ServerResponse[] = [];
    const server = await serve({
      respond: (_req, res) => {
        held.push(res);
        return true;
      },
    });
    const rl = limit({ limiters: { api: { origins: [server.origin], limiter: budget, maxConcurrent: 1 } } });
    const agent = agentWith(rl);
    const first = get(agent, `${server.origin}/1`);
    const second = get(agent, `${server.origin}/2`);
    await server.waitForRequests(1);
    const gate = runtimeOf(rl).gateOf(budget)!;
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    expect(gate.inFlight).toBe(1);
    expect(server.requests).toBe(1);
    held.shift()?.writeHead(200).end('one');
    await server.waitForRequests(2);
    held.shift()?.writeHead(200).end('two');
    expect((await first).body).toBe('one');
    expect((await second).body).toBe('two');
  });

  it('never closes the budget: not when the interceptor closes, not when the registry removes it', async () => {
    const clock = new ManualClock();
    const budget = sharedBudget(new MemoryBudgetStore({ clock }), clock);
    const server = await serve({ capacity: 10 });
    const rl = adaptiveRateLimit({ limiters: { api: { origins: [server.origin], limiter: budget } } });
    const agent = agentWith(rl);

    rl.close();
    expect(budget.limiter.snapshot().closed).toBe(false);
    (await budget.acquire()).success();
    // The budget still serves its other users; the closed interceptor sends nothing more.
    await expect(get(agent, `${server.origin}/after-close`)).rejects.toMatchObject({ reason: 'closed' });
    expect(server.requests).toBe(0);

    const registry = new RateLimiterRegistry({
      clock,
      limiters: { api: { origins: [server.origin], limiter: budget } },
    });
    const removed = vi.fn();
    registry.on('removed', removed);
    expect(registry.remove('api')).toBe(true);
    expect(removed).toHaveBeenCalledWith({ name: 'api', limiter: budget.limiter });
    expect(budget.limiter.snapshot().closed).toBe(false);
    expect(registry.limiterFor(server.origin)?.name).toBe(server.origin); // to the default now
    registry.close();
    expect(budget.limiter.snapshot().closed).toBe(false);
  });
});

describe('RateLimiterRegistry: a limiter instance you own', () => {
  it('routes its origins to it, keeps it through sweeps and the cap, and answers its AdaptiveRateLimiter', () => {
    const clock = new ManualClock();
    const mine = new AdaptiveRateLimiter({ name: 'mine', clock, initialUnitsPerMinute: 60 });
    const registry = new RateLimiterRegistry({
      clock,
      idleTimeout: 1_000,
      maxOriginLimiters: 1,
      limiters: { api: { origins: ['*.api.test'], limiter: mine, maxConcurrent: 2 } },
    });
    expect(registry.limiterFor('https://eu.api.test')).toBe(mine);
    expect(registry.get('api')).toBe(mine);
    expect(registry.configFor('api')).toMatchObject({ limiter: mine, maxConcurrent: 2 });
    for (let i = 0; i < 5; i++) {
      registry.limiterFor(`https://other-${i}.test`);
      clock.advance(2_000);
    }
    expect(registry.limiterFor('https://eu.api.test')).toBe(mine);
    registry.close();
    expect(mine.snapshot().closed).toBe(false);
  });

  it('takes any RateLimiter: one without an AdaptiveRateLimiter is routed to, but get() answers undefined', async () => {
    const server = await serve({ capacity: 10 });
    const window = new FixedWindowRateLimiter({
      name: 'window',
      limitForPeriod: 1,
      limitRefreshPeriod: 60_000,
      timeoutDuration: 0,
    });
    const added = vi.fn();
    const registry = new RateLimiterRegistry({ default: false });
    registry.on('added', added);
    expect(registry.add('api', { origins: [server.origin], limiter: window })).toBeUndefined();
    expect(added).not.toHaveBeenCalled(); // no AdaptiveRateLimiter to name
    expect(registry.get('api')).toBeUndefined();
    expect(registry.configFor('api')?.limiter).toBe(window);

    const rl = limit({ registry });
    const agent = agentWith(rl);
    expect((await get(agent, `${server.origin}/1`)).status).toBe(200);
    const refused = await get(agent, `${server.origin}/2`).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RateLimitRejectedError);
    expect(server.requests).toBe(1);

    // A replace to a limiter made from options routes the origin anew.
    registry.replace('api', { origins: [server.origin], initialUnitsPerMinute: 6_000 });
    expect(added).toHaveBeenCalledWith({ name: 'api', limiter: registry.get('api') });
    expect((await get(agent, `${server.origin}/3`)).status).toBe(200);
  });
});

describe('a SharedBudget: a request that never reached the server', () => {
  it('a refused connection tells no failed answer on the local limiter (as a limiter of its own)', async () => {
    const clock = new ManualClock();
    const budget = sharedBudget(new MemoryBudgetStore({ clock }), clock);
    const gone = await RateLimitedServer.start();
    const origin = gone.origin;
    await gone.close(); // nothing listens there now: ECONNREFUSED
    const rl = limit({
      limiters: { api: { origins: [origin], limiter: budget } },
      default: false,
      maxAttempts: 1,
    });
    const failed = vi.fn();
    budget.limiter.on('failed', failed);
    const error = await get(agentWith(rl), `${origin}/a`).catch((e: unknown) => e);
    expect({ code: (error as { code?: string }).code, failed: failed.mock.calls.length }).toEqual({
      code: 'ECONNREFUSED',
      failed: 0,
    });
  });
});

describe('limiter instance: config checks', () => {
  const budgetLike = { acquire: async () => ({}), tryAcquire: () => undefined, name: 'x' } as never;

  it('refuses rate options next to a limiter instance, naming each field; maxConcurrent is allowed', () => {
    const error = configError(() =>
      adaptiveRateLimit({
        limiters: {
          api: {
            origins: ['https://api.test'],
            limiter: budgetLike,
            initialUnitsPerMinute: 60,
            controller: 'cubic',
            maxConcurrent: 2,
          },
        },
      }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['limiters.api.initialUnitsPerMinute', 60],
      ['limiters.api.controller', 'cubic'],
    ]);
    expect(error.issues[0]?.message).toMatch(/not allowed with `limiter`/);
  });

  it('refuses a limiter that is not a RateLimiter, and one in default', () => {
    const error = configError(
      () =>
        new RateLimiterRegistry({
          limiters: { api: { origins: ['https://api.test'], limiter: {} as never } },
          default: { limiter: budgetLike },
        }),
    );
    expect(error.issues.map((i) => i.path)).toEqual(['default.limiter', 'limiters.api.limiter']);
  });

  it('parseConfig rejects limiter: JSON cannot hold an instance', () => {
    const error = configError(() =>
      parseConfig({ limiters: { api: { origins: ['https://api.test'], limiter: 'budget' } } }),
    );
    expect(error.issues).toEqual([
      expect.objectContaining({ path: 'limiters.api.limiter', message: expect.stringMatching(/JSON/) }),
    ]);
    const appsettings = configError(() =>
      parseConfig({ AdaptiveRateLimiting: { Limiters: { api: { Limiter: {} } }, Default: { limiter: 1 } } }),
    );
    expect(appsettings.issues.map((i) => i.path)).toEqual([
      'AdaptiveRateLimiting.Limiters.api.Limiter',
      'AdaptiveRateLimiting.Default.limiter',
    ]);
  });
});
