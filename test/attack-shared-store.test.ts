import { Redis } from 'ioredis';
import { afterEach, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { MemoryBudgetStore } from '../src/redis/index.js';
import {
  describeRedis,
  freePort,
  type RedisServer,
  sharedMembers,
  withRedisServer,
} from './helpers/redis-server.js';

// Attacks on the shared budget's store: members that leave, a Redis that refuses connections. On
// real redis-servers and a ManualClock (heartbeats only when the test asks: `refresh`).

const clients: Redis[] = [];

afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

const { name, member } = sharedMembers(
  'attack-store',
  { heartbeatInterval: 60_000, controller: 'aimd', initialUnitsPerMinute: 600 },
  ['degraded', 'recovered', 'repaired'],
);

const membersKey = () => `arl:{${name()}}:members`;

it('refresh() after close() does not join the budget again (memory store)', async () => {
  const clock = new ManualClock();
  const store = new MemoryBudgetStore({ clock });
  const a = member({ store, clock });
  const b = member({ store, clock });
  await a.refresh();
  await b.refresh();
  expect(b.state.members).toBe(2);
  await a.close();
  await a.refresh(); // a late metrics tick, a health check
  await b.refresh();
  expect(b.state.members).toBe(1);
});

describeRedis('attack: the shared budget against its Redis', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started));

  it('refresh() after close() does not join the budget again (an ioredis client you own)', async () => {
    const clock = new ManualClock();
    const own = new Redis(server.url, { maxRetriesPerRequest: 0 });
    clients.push(own);
    const a = member({ redis: own, clock });
    await a.refresh();
    await a.close();
    expect(await redis.zcard(membersKey())).toBe(0);
    await a.refresh();
    // Before: the closed member's heartbeat registered it again, with a report; the others counted
    // it (and gave it its floor) until its memberTimeout.
    expect(await redis.zcard(membersKey())).toBe(0);
  });

  it('Redis at its maxclients: the error names the failed connection, not "max retries per request"', async () => {
    const clock = new ManualClock();
    const taken: Redis[] = [];
    await redis.config('SET', 'maxclients', '2');
    try {
      // This suite's client and one more: the server is full.
      const one = new Redis(server.url);
      clients.push(one);
      taken.push(one);
      await one.ping();
      const a = member({ redis: server.url, clock, failClosed: true });
      const error = (await a.acquire().catch((e: unknown) => e)) as Error & { code?: string };
      expect(error.code).toBe('ERR_SHARED_BUDGET_UNAVAILABLE');
      // Before: "Redis unreachable (Reached the max retries per request limit (which is 0). Refer
      // to "maxRetriesPerRequest" option for details.)", an ioredis option the budget sets itself.
      // The server's "ERR max number of clients reached" comes as it closes the connection, which
      // ioredis reports as the write it failed (EPIPE, ECONNRESET) or, when it read it, that reply.
      expect(error.message).toMatch(/not connected to Redis: \S/);
      expect(error.message).not.toMatch(/maxRetriesPerRequest/);
    } finally {
      await redis.config('SET', 'maxclients', '10000');
    }
  });
});

it('Redis not listening: the error names the refused connection, not "max retries per request"', async () => {
  const port = await freePort(); // nothing listens there
  const clock = new ManualClock();
  const a = member({ redis: `redis://127.0.0.1:${port}`, clock, failClosed: true });
  const errors: unknown[] = [];
  a.on('degraded', (event) => errors.push(event.error));
  const error = (await a.acquire().catch((e: unknown) => e)) as Error & { code?: string };
  expect(error.code).toBe('ERR_SHARED_BUDGET_UNAVAILABLE');
  expect(error.message).toMatch(/ECONNREFUSED/);
  expect(String((errors[0] as Error).message)).toMatch(/ECONNREFUSED/);
});
