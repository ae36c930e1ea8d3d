import type { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { kPartitionForOrigin } from '../src/internal.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import type { LazySharedBudget } from '../src/registry/shared.js';
import { describeRedis, type RedisServer, withRedisServer } from './helpers/redis-server.js';

// Attacks on the shared budget where Redis loses its keys (maxmemory eviction, a full Redis), a
// member stops and comes back, and per-customer shared partitions meet Redis's limits. Real
// redis-servers on 127.0.0.1 (ports 6450-6470), heartbeats on a ManualClock unless said.

const ORIGIN = 'https://api.test';

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
});
