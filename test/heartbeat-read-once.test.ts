import type { Redis } from 'ioredis';
import { afterAll, afterEach, expect, it } from 'vitest';
import { RedisBudgetStore } from '../src/redis/redis-store.js';
import { demandWeightedShare, type HeartbeatRequest } from '../src/redis/store.js';
import { describeRedis, type RedisServer, withRedisServer } from './helpers/redis-server.js';

// The heartbeat reads the members' reports once: the timeouts, the checks and the sums of one
// parsed read.

const RATE = 600;
const HOUR = 3_600_000;

let names = 0;

afterEach(() => {
  names++;
});

function beat(id: string, more: Partial<HeartbeatRequest> = {}): HeartbeatRequest {
  return {
    id,
    demand: 0,
    accepted: 0,
    measured: 0,
    acceptedUnits: 0,
    waited: false,
    memberTimeout: 1_200,
    floorFraction: 0.05,
    initialRate: RATE,
    minRate: 1,
    maxRate: undefined,
    ttl: HOUR,
    ...more,
  };
}

describeRedis('one heartbeat, every use of the reports (a real Redis)', () => {
  let redis: Redis;
  let server: RedisServer;
  const stores: RedisBudgetStore[] = [];

  withRedisServer((started) => ({ server, redis } = started));
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
  });

  it('drops a dead member, keeps a report of three fields, deletes a broken one and a stray one, and sums the rest', async () => {
    const name = `read-once-${process.pid}-${names}`;
    const store = new RedisBudgetStore({ redis: server.url, keyPrefix: 'arl:', name, redisTimeout: 2_000 });
    stores.push(store);
    const members = `arl:{${name}}:members`;
    const reports = `arl:{${name}}:reports`;
    expect((await store.heartbeat(beat('new'))).members).toBe(1);
    const [seconds, micros] = await redis.time();
    const now = Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000);
    // Silent 5 s, past its own timeout of 1 s: dropped, its report with it (no repair).
    await redis.zadd(members, now - 5_000, 'dead');
    await redis.hset(reports, 'dead', '100 10 20 1000');
    // Silent 5 s, within its own timeout of 10 s (the caller's is 1.2 s): kept.
    await redis.zadd(members, now - 5_000, 'slow');
    await redis.hset(reports, 'slow', '50 5 7 10000');
    // A member of the build before: three fields, kept, judged by the caller's timeout.
    await redis.zadd(members, now, 'old');
    await redis.hset(reports, 'old', '600 300 310');
    // A broken report: deleted; its member stays, counted as one with no demand.
    await redis.zadd(members, now, 'broken');
    await redis.hset(reports, 'broken', 'x 1 2 500');
    // A report with no member: deleted.
    await redis.hset(reports, 'stray', '7 7 7 1200');

    const reply = await store.heartbeat(beat('new', { accepted: 150, measured: 200 }));
    expect(reply.members).toBe(4); // new, slow, old, broken
    expect([...(reply.repaired ?? [])].sort()).toEqual([`${reports} broken`, `${reports} stray`]);
    expect(await redis.zscore(members, 'dead')).toBeNull();
    expect(await redis.hgetall(reports)).toEqual({
      new: '0 150 200 1200',
      slow: '50 5 7 10000',
      old: '600 300 310',
    });
    expect(reply.accepted).toBe(150 + 5 + 300);
    expect(reply.measured).toBe(200 + 7 + 310);
    const share = demandWeightedShare(RATE, 0, [0, 50, 600], 0.05, 4);
    expect(reply.share! / share).toBeCloseTo(1, 12);
  });
  it('reads the reports hash once per heartbeat', async () => {
    const name = `read-count-${process.pid}-${names}`;
    const store = new RedisBudgetStore({ redis: server.url, keyPrefix: 'arl:', name, redisTimeout: 2_000 });
    stores.push(store);
    const reports = `arl:{${name}}:reports`;
    for (const id of ['a', 'b', 'c']) await store.heartbeat(beat(id));
    // What the script sends Redis, as MONITOR shows it: each command with its arguments.
    const monitor = await redis.monitor();
    const reads: string[] = [];
    const marker = `done-${name}`;
    // Redis writes MONITOR's lines in the order the commands ran: the marker's comes last.
    const done = new Promise<void>((resolve) => {
      monitor.on('monitor', (_time: string, args: string[]) => {
        const [command = '', key] = args.map(String);
        if (command.toLowerCase() === 'echo' && key === marker) resolve();
        const read = ['hgetall', 'hvals', 'hkeys', 'hget', 'hmget', 'hscan'];
        if (key === reports && read.includes(command.toLowerCase())) reads.push(command.toUpperCase());
      });
    });
    try {
      await store.heartbeat(beat('a'));
      await redis.echo(marker);
      await done;
    } finally {
      monitor.disconnect();
    }
    // Before: HGETALL for the timeouts, HGETALL to check them, HVALS for the sums.
    expect(reads).toEqual(['HGETALL']);
  });
});
