import { once } from 'node:events';
import { createServer } from 'node:net';
import type { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { kPartitionForOrigin } from '../src/internal.js';
import type { SharedBudget } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import type { LazySharedBudget } from '../src/registry/shared.js';
import { describeRedis, type RedisServer, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// Attacks on the shared budget where Redis loses its keys (maxmemory eviction, a full Redis), a
// member stops and comes back, and per-customer shared partitions meet Redis's limits. Real
// redis-servers on 127.0.0.1 (ports 6450-6470), heartbeats on a ManualClock unless said.

const ORIGIN = 'https://api.test';

const { name, member } = sharedMembers(
  'attack-evict',
  { heartbeatInterval: 60_000, controller: 'aimd', initialUnitsPerMinute: 600 },
  ['degraded', 'recovered', 'repaired'],
);

const keys = () => ['state', 'members', 'reports'].map((k) => `arl:{${name()}}:${k}`);

/** The members' local rates added up (units/min): what they send together. */
const sum = (budgets: readonly SharedBudget[]) => budgets.reduce((s, b) => s + b.limiter.rate, 0);

/** Three members of one budget of 600 units/min on `url`, each heard once: 200 each. */
async function threeMembers(url: string, clock: ManualClock): Promise<SharedBudget[]> {
  const budgets = [0, 1, 2].map(() => member({ redis: url, clock }));
  for (const b of budgets) await b.refresh();
  for (const b of budgets) await b.refresh();
  expect(budgets.map((b) => b.state.members)).toEqual([3, 3, 3]);
  expect(sum(budgets)).toBeCloseTo(600, 0);
  return budgets;
}

describeRedis('attack: the shared budget when Redis evicts its keys', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started), 6452);

  it('a member heard first after an eviction does not take the whole rate while the others send theirs', async () => {
    const clock = new ManualClock();
    const budgets = await threeMembers(server.url, clock);
    // maxmemory with volatile-ttl, and data without a ttl past it: the budget's keys (each with
    // the state's ttl) are the ones Redis evicts, all three.
    const used = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1]);
    await redis.config('SET', 'maxmemory-policy', 'volatile-ttl');
    await redis.config('SET', 'maxmemory', String(used + 64 * 1024));
    try {
      for (let i = 0; i < 1_000 && (await redis.exists(...keys())) > 0; i++) {
        await redis.set(`fill:${name()}:${i}`, 'x'.repeat(1_024)).catch(() => undefined);
      }
      expect(await redis.exists(...keys())).toBe(0);
      expect(Number(/evicted_keys:(\d+)/.exec(await redis.info('stats'))?.[1])).toBeGreaterThanOrEqual(3);
    } finally {
      await redis.config('SET', 'maxmemory', '0');
      await redis.config('SET', 'maxmemory-policy', 'noeviction');
    }
    // The members' heartbeats one by one, as they come after the eviction.
    const sums: number[] = [];
    for (const b of [...budgets, ...budgets]) {
      await b.refresh();
      sums.push(sum(budgets));
    }
    expect(budgets.map((b) => b.state.members)).toEqual([3, 3, 3]);
    // Before: the first member heard was answered alone, the whole 600, the second 300 (members
    // 1, then 2), while the others still sent their 200: 1,000, then 1,100 units/min.
    for (const total of sums) expect(total).toBeLessThanOrEqual(600 * 1.01);
    expect(sum(budgets)).toBeCloseTo(600, 0);
  });

  it('busy members whose reports Redis evicted hold their parts until the others report again', async () => {
    const clock = new ManualClock();
    const budgets = [0, 1, 2].map(() => member({ redis: server.url, clock }));
    // Each member busy: its units taken, a request waiting in its line (its demand).
    for (const b of budgets) {
      for (let i = 0; i < 1_000 && b.tryAcquire() !== undefined; i++);
      void b.acquire(5).catch(() => undefined);
    }
    for (const b of [...budgets, ...budgets]) await b.refresh();
    expect(sum(budgets)).toBeCloseTo(600, 0);
    await redis.del(keys()[2] as string); // the :reports key alone, as allkeys-lru or -random may
    const sums: number[] = [];
    for (const b of [...budgets, ...budgets]) {
      await b.refresh();
      sums.push(sum(budgets));
    }
    // Before: the first member heard was answered 564 of 600 (the others, without a report, count
    // as no demand) and took it while the others still sent 200 each: 964, then 1,059.
    for (const total of sums) expect(total).toBeLessThanOrEqual(600 * 1.01);
    expect(sum(budgets)).toBeCloseTo(600, 0);
  });

  it('a member stopped past its memberTimeout and dropped joins again, and its waiting request is served', async () => {
    const clock = new ManualClock();
    const budgets = await threeMembers(server.url, clock);
    const [a, b, c] = budgets as [SharedBudget, SharedBudget, SharedBudget];
    // A request of `a` waits in its line when it stops.
    for (let i = 0; i < 1_000 && a.tryAcquire() !== undefined; i++);
    const waiting = a.acquire(1).then(
      (permit) => {
        permit.success();
        return 'served';
      },
      (error: unknown) => error,
    );
    expect(a.snapshot().queued).toBe(1);
    // `a` stops (no heartbeat) while the server's clock passes its memberTimeout: its member is
    // dropped as silent at the others' next heartbeats, which share its part.
    await redis.zadd(keys()[1] as string, 0, a.id);
    await b.refresh();
    await c.refresh();
    expect([b.state.members, c.state.members]).toEqual([2, 2]);
    expect(b.limiter.rate + c.limiter.rate).toBeCloseTo(600, 0);
    // `a` resumes: it is counted again, and the parts add up to the budget again (its waiting
    // request is demand: it gets the larger part).
    await a.refresh();
    expect(a.state.members).toBe(3);
    await b.refresh();
    await c.refresh();
    expect(sum(budgets)).toBeCloseTo(600, 0);
    // Its request is served at its part's pace, not lost with its membership.
    clock.advance(1_000);
    expect(await waiting).toBe('served');
  });

  it('Redis full (noeviction): the members degrade, keep their parts, and a fail-closed one refuses with the OOM as cause', async () => {
    const clock = new ManualClock();
    const budgets = await threeMembers(server.url, clock);
    const closed = member({ redis: server.url, clock, failClosed: true });
    await closed.refresh();
    const rates = budgets.map((b) => b.limiter.rate);
    const used = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1]);
    await redis.config('SET', 'maxmemory-policy', 'noeviction');
    await redis.config('SET', 'maxmemory', String(used + 64 * 1024));
    try {
      let full = false;
      for (let i = 0; i < 1_000 && !full; i++) {
        await redis.set(`fill:${name()}:${i}`, 'x'.repeat(1_024)).catch(() => (full = true));
      }
      expect(full).toBe(true);
      for (const b of [...budgets, closed]) await b.refresh();
      expect([...budgets, closed].map((b) => b.state.degraded)).toEqual([true, true, true, true]);
      expect(budgets.map((b) => b.limiter.rate)).toEqual(rates);
      const error = (await closed.acquire().catch((e: unknown) => e)) as Error & { code?: string };
      expect(error.code).toBe('ERR_SHARED_BUDGET_UNAVAILABLE');
      expect(error.message).toMatch(/OOM command not allowed/);
      expect(String((error.cause as Error).name)).toBe('ReplyError');
    } finally {
      await redis.config('SET', 'maxmemory', '0');
    }
    for (const b of [...budgets, closed]) await b.refresh();
    expect([...budgets, closed].map((b) => b.state.degraded)).toEqual([false, false, false, false]);
  });
});

it('a server that refuses the connection at once (at its maxclients) is named as the cause, not "max retries per request"', async () => {
  // What Redis does at its maxclients: it writes why, and closes the connection at once.
  const server = createServer((socket) => socket.end('-ERR max number of clients reached\r\n'));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    const { port } = server.address() as { port: number };
    const budget = member({ redis: `redis://127.0.0.1:${port}`, clock: new ManualClock(), failClosed: true });
    const error = (await budget.acquire().catch((e: unknown) => e)) as Error & { code?: string };
    expect(error.code).toBe('ERR_SHARED_BUDGET_UNAVAILABLE');
    // Before: "Redis unreachable (Reached the max retries per request limit (which is 0). Refer to
    // "maxRetriesPerRequest" option for details.)": ioredis told no error for that connection.
    expect(error.message).toMatch(
      /not connected to Redis: the server refused the connection: ERR max number of clients reached/,
    );
    await budget.close();
  } finally {
    server.close();
  }
});

describeRedis('attack: shared partitions on a real Redis', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started), 6451);

  it("keeps a partition's shared budget that owes units (a call used more than its bucket held)", async () => {
    const clock = new ManualClock();
    const name = `owes-${process.pid}`;
    const registry = new RateLimiterRegistry({
      clock,
      maxOriginLimiters: 1,
      limiters: {
        api: {
          origins: [ORIGIN],
          initialUnitsPerMinute: 60,
          burst: 'second',
          shared: { redis: server.url, name, heartbeatInterval: 60_000 },
        },
      },
    });
    try {
      const a = registry[kPartitionForOrigin](ORIGIN, { id: 'A' });
      const budget = a?.instance as LazySharedBudget;
      // An LLM call estimated at 1 unit that used 30: the budget's bucket owes 29 units.
      (await budget.acquire(1)).success(30);
      clock.advance(100);
      expect(budget.limiter?.snapshot().tokens).toBeLessThan(-20);
      // Before: taken for idle, closed to make room for B's, whose fresh budget would send at once
      // what A's debt still owes the API.
      const b = registry[kPartitionForOrigin](ORIGIN, { id: 'B' });
      expect(b).toBeUndefined();
      expect(budget.limiter?.snapshot().closed).toBe(false);
    } finally {
      registry.close();
    }
  });

  it("at Redis's maxclients, a partition that cannot connect refuses with a typed error; the others are served", async () => {
    const name = `maxclients-${process.pid}`;
    const registry = new RateLimiterRegistry({
      limiters: {
        api: {
          origins: [ORIGIN],
          initialUnitsPerMinute: 6_000,
          shared: { redis: server.url, name, heartbeatInterval: 60_000, failClosed: true },
        },
      },
    });
    const connected = Number(/connected_clients:(\d+)/.exec(await redis.info('clients'))?.[1]);
    // Room for two more connections: each partition's budget opens its own.
    await redis.config('SET', 'maxclients', String(connected + 2));
    try {
      const answers: unknown[] = [];
      for (const id of ['P0', 'P1', 'P2', 'P3', 'P4']) {
        const budget = registry[kPartitionForOrigin](ORIGIN, { id })?.instance as LazySharedBudget;
        answers.push(
          await budget.acquire(1).then(
            (permit) => {
              permit.success();
              return 'served';
            },
            (e: unknown) => e,
          ),
        );
      }
      const refused = answers.filter((a) => a !== 'served') as (Error & { code?: string })[];
      expect(answers.filter((a) => a === 'served').length).toBeGreaterThanOrEqual(1);
      expect(refused.length).toBeGreaterThanOrEqual(1);
      for (const error of refused) {
        expect(error.code).toBe('ERR_SHARED_BUDGET_UNAVAILABLE');
        // The server's own refusal, not the write that met its reset (`write EPIPE`).
        expect(error.message).toMatch(
          /not connected to Redis: the server refused the connection: ERR max number of clients reached/,
        );
        expect(error.message).not.toMatch(/maxRetriesPerRequest/);
      }
    } finally {
      await redis.config('SET', 'maxclients', '10000');
      registry.close();
    }
  });
});
