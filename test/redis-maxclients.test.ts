import type { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RedisBudgetStore } from '../src/redis/redis-store.js';
import {
  describeRedis,
  heartbeatRequest,
  type RedisServer,
  sharedMembers,
  withRedisServer,
} from './helpers/redis-server.js';

// A real redis-server at its maxclients: it writes `-ERR max number of clients reached` to a new
// connection and closes it, and the client's handshake, written at once, races that close (a
// second write after the server's reset fails `write EPIPE`, and the refusal is never read).
// The attempts are repeated (20) so the race shows.

const ATTEMPTS = 20;
const REFUSAL =
  /not connected to Redis: the server refused the connection: ERR max number of clients reached/;

const { name, member } = sharedMembers(
  'maxclients',
  { heartbeatInterval: 60_000, initialUnitsPerMinute: 600 },
  ['degraded'],
);

describeRedis('shared budget: a real Redis at its maxclients', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started));

  /** Runs `attempt` with the server's maxclients at 1 (the suite's own client holds it). */
  async function atMaxclients<T>(attempt: () => Promise<T>): Promise<T> {
    await redis.config('SET', 'maxclients', '1');
    try {
      return await attempt();
    } finally {
      await redis.config('SET', 'maxclients', '10000');
    }
  }

  it(`names the refusal in each of ${ATTEMPTS} attempts of 3 stores connecting at once, never the socket's EPIPE`, async () => {
    const messages = await atMaxclients(async () => {
      const all: string[] = [];
      for (let i = 0; i < ATTEMPTS; i++) {
        const stores = [0, 1, 2].map(
          () =>
            new RedisBudgetStore({ redis: server.url, name: name(), keyPrefix: 'arl:', redisTimeout: 2_000 }),
        );
        const answers = await Promise.all(
          stores.map((s) =>
            s.heartbeat(heartbeatRequest('a')).then(
              () => 'answered',
              (e: Error) => e.message,
            ),
          ),
        );
        all.push(...answers);
        await Promise.all(stores.map((s) => s.close()));
      }
      return all;
    });
    const told: Record<string, number> = {};
    for (const m of messages) {
      const kind = REFUSAL.test(m) ? 'the refusal' : m;
      told[kind] = (told[kind] ?? 0) + 1;
    }
    // Before: the socket's error won in 50 to 60 of 60 ('not connected to Redis: write EPIPE',
    // a few 'write ECONNRESET'): the refusal was in the socket's buffer, never read.
    expect(told).toEqual({ 'the refusal': 3 * ATTEMPTS });
  });

  it("a fail-closed budget refuses with the server's refusal as its message", async () => {
    const errors = await atMaxclients(async () => {
      const all: (Error & { code?: string })[] = [];
      for (let i = 0; i < 5; i++) {
        const budget = member({ redis: server.url, clock: new ManualClock(), failClosed: true });
        all.push((await budget.acquire().catch((e: unknown) => e)) as Error & { code?: string });
        await budget.close();
      }
      return all;
    });
    for (const error of errors) {
      expect(error.code).toBe('ERR_SHARED_BUDGET_UNAVAILABLE');
      expect(error.message).toMatch(REFUSAL);
    }
  });
});
