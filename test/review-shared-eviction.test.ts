import { once } from 'node:events';
import { createServer } from 'node:net';
import type { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { SharedBudget } from '../src/redis/index.js';
import { describeRedis, type RedisServer, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// A review of the shared budget after Redis loses a key (the :reports hash evicted alone, as
// allkeys-lru or allkeys-random may): real redis-servers on 127.0.0.1 (ports 6480-6490),
// heartbeats sent by the test (refresh) on a ManualClock.

const { name, member } = sharedMembers('review-evict', { controller: 'aimd', initialUnitsPerMinute: 600 }, [
  'degraded',
  'recovered',
  'repaired',
]);

const keys = () => ['state', 'members', 'reports'].map((k) => `arl:{${name()}}:${k}`);

/** The members' local rates added up (units/min): what they send together. */
const sum = (budgets: readonly SharedBudget[]) => budgets.reduce((s, b) => s + b.limiter.rate, 0);

/** The server's clock, ms (what the scripts read with TIME). */
async function serverNow(redis: Redis): Promise<number> {
  const [s, us] = await redis.time();
  return Number(s) * 1_000 + Math.floor(Number(us) / 1_000);
}

describeRedis('review: the shared budget after its :reports key is evicted', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started), 6480);

  it('a member of a slower heartbeat dropped by a faster one for want of its report keeps its part counted until it is heard', async () => {
    const clock = new ManualClock();
    // Members of one budget with different heartbeats, as docs/redis.md allows: `fast` beats
    // every 250 ms (memberTimeout 1.5 s), `slow` every 10 s (memberTimeout 40 s).
    const fast = member({ redis: server.url, clock, heartbeatInterval: 250 });
    const slow = member({ redis: server.url, clock, heartbeatInterval: 10_000 });
    const budgets = [fast, slow];
    for (const b of [...budgets, ...budgets]) await b.refresh();
    expect(budgets.map((b) => b.state.members)).toEqual([2, 2]);
    expect(sum(budgets)).toBeCloseTo(600, 0);
    // `slow` last beat 5 s ago (half its heartbeat): alive by its own memberTimeout, 40 s.
    await redis.zadd(keys()[1] as string, (await serverNow(redis)) - 5_000, slow.id);
    await redis.del(keys()[2] as string); // the :reports key alone, as allkeys-lru or -random may
    // Without its report, `slow` is judged by `fast`'s memberTimeout (1.5 s) and dropped; it
    // still sends its part until its next heartbeat, 5 s from now.
    await fast.refresh();
    expect(fast.state.members).toBe(1);
    // Before: `fast` took the whole 600 while `slow` still sent its 300: 900 units/min.
    expect(sum(budgets)).toBeLessThanOrEqual(600 * 1.01);
    // `slow` heard again: counted again, and the parts add up to the budget.
    await slow.refresh();
    await fast.refresh();
    expect(budgets.map((b) => b.state.members)).toEqual([2, 2]);
    expect(sum(budgets)).toBeCloseTo(600, 0);
  });
});

it('names the refusal a server wrote before its socket failed (ECONNRESET or EPIPE), not the socket error', async () => {
  // A server at its maxclients writes why and closes; the client's first write may then fail
  // (EPIPE) or be answered with a reset: here, a reset once the client writes.
  const server = createServer((socket) => {
    socket.write('-ERR max number of clients reached\r\n');
    socket.once('data', () => socket.resetAndDestroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    const { port } = server.address() as { port: number };
    const budget = member({ redis: `redis://127.0.0.1:${port}`, clock: new ManualClock(), failClosed: true });
    const error = (await budget.acquire().catch((e: unknown) => e)) as Error & { code?: string };
    expect(error.code).toBe('ERR_SHARED_BUDGET_UNAVAILABLE');
    // Before: 'not connected to Redis: read ECONNRESET' (or 'write EPIPE'), the refusal read.
    expect(error.message).toMatch(/the server refused the connection: ERR max number of clients reached/);
    await budget.close();
  } finally {
    server.close();
  }
});
