import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { MemoryBudgetStore, type SharedBudget } from '../src/redis/index.js';
import type { BudgetStore, HeartbeatRequest } from '../src/redis/store.js';
import { describeRedis, heartbeatRequest, withRedisServer } from './helpers/redis-server.js';
import { sharedMembers } from './helpers/shared-members.js';

// A review of the end of a seeded :state (scripts.ts, SEEDED): it ends at the first proposal or
// at the heartbeat of a member heard since it began.

const HOUR = 3_600_000;

function beat(id: string, more: Partial<HeartbeatRequest> = {}): HeartbeatRequest {
  return heartbeatRequest(id, { demand: 100, memberTimeout: HOUR, ...more });
}

describeRedis('a seeded state on a server whose clock is behind the one that seeded it (a failover)', () => {
  let redis: Redis;
  const suite = withRedisServer((started) => {
    redis = started.redis;
  });

  it('a member heard since the seeding and heard again ends it: one joining later at 60 leaves the 6,000 shared', async () => {
    const name = `seeded-behind-${process.pid}`;
    const store = suite.store(name, 'arl-test:');
    const state = `arl-test:{${name}}:state`;
    const members = `arl-test:{${name}}:members`;
    await store.heartbeat(beat('a', { initialRate: 6_000 }));
    // The server now reads a minute behind the one that seeded the state and heard a: the seeding
    // began, and a was heard, a minute ahead of its clock.
    const [seconds] = await redis.time();
    const ahead = String(Number(seconds) * 1_000 + 60_000);
    await redis.hset(state, 'seededAt', ahead, 'createdAt', ahead, 'lastChangeAt', ahead);
    await redis.zadd(members, ahead, 'a');
    await store.heartbeat(beat('a', { initialRate: 6_000 })); // heard again: the seeding ends
    await store.heartbeat(beat('late', { initialRate: 60 }));
    expect((await store.heartbeat(beat('a', { initialRate: 6_000 }))).rate).toBe(6_000);
  });
});
