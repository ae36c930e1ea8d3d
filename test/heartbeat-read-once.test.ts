import type { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import {
  createSharedBudget,
  MemoryBudgetStore,
  type SharedBudget,
  type SharedBudgetOptions,
} from '../src/redis/index.js';
import { RedisBudgetStore } from '../src/redis/redis-store.js';
import { type BudgetStore, demandWeightedShare, type HeartbeatRequest } from '../src/redis/store.js';
import { describeRedis, type RedisServer, withRedisServer } from './helpers/redis-server.js';

// The heartbeat reads the members' reports once (the timeouts, the checks and the sums of one
// parsed read), and a member back from an outage holds its part for as long as the slowest
// member the store dropped as dead may take to be heard again (a member present all along is not
// waited for).

const RATE = 600;
const HOUR = 3_600_000;

let names = 0;
const open: SharedBudget[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((b) => b.close()));
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
    // The dead member's own timeout, recorded with the drop (the slow live one's is not waited for).
    expect(reply.droppedTimeout).toBe(1_000);
  });

  it("judges a member whose report is broken by the caller's timeout, not the broken report's", async () => {
    const name = `broken-timeout-${process.pid}-${names}`;
    const store = new RedisBudgetStore({ redis: server.url, keyPrefix: 'arl:', name, redisTimeout: 2_000 });
    stores.push(store);
    const members = `arl:{${name}}:members`;
    const reports = `arl:{${name}}:reports`;
    await store.heartbeat(beat('new'));
    const [seconds, micros] = await redis.time();
    const now = Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000);
    // Silent 5 s: past the caller's 1.2 s; the broken report's 10 s is no timeout to trust.
    await redis.zadd(members, now - 5_000, 'broken');
    await redis.hset(reports, 'broken', 'x 1 2 10000');
    const reply = await store.heartbeat(beat('new'));
    expect(await redis.zscore(members, 'broken')).toBeNull();
    expect(reply.members).toBe(1);
    expect(reply.droppedTimeout).toBe(1_200);
  });

  it('answers the longest timeout of the members dropped as dead while its window lasts, as the memory store does', async () => {
    const name = `dropped-${process.pid}-${names}`;
    const redisStore = new RedisBudgetStore({
      redis: server.url,
      keyPrefix: 'arl:',
      name,
      redisTimeout: 2_000,
    });
    stores.push(redisStore);
    const members = `arl:{${name}}:members`;
    const state = `arl:{${name}}:state`;
    const clock = new ManualClock(0);
    const memory = new MemoryBudgetStore({ clock });
    // Every last heartbeat and the drop's time moved back by `ms` (Redis's clock is real time),
    // the memory's clock on.
    const elapse = async (ms: number) => {
      for (const id of await redis.zrange(members, '0', '-1')) await redis.zincrby(members, -ms, id);
      if ((await redis.hget(state, 'droppedAt')) !== null) await redis.hincrby(state, 'droppedAt', -ms);
      clock.advance(ms);
    };
    const dropped = async (id: string, memberTimeout: number, ttl = HOUR) => {
      const both = [
        await redisStore.heartbeat(beat(id, { memberTimeout, ttl })),
        memory.heartbeat(beat(id, { memberTimeout, ttl })),
      ];
      expect(both[0]!.droppedTimeout).toBe(both[1]!.droppedTimeout);
      return both[1]!.droppedTimeout;
    };
    // None dropped: none answered, however long a live member's timeout.
    expect(await dropped('fast', 1_200)).toBeUndefined();
    expect(await dropped('long', 600_000)).toBeUndefined();
    expect(await dropped('slow', 8_000)).toBeUndefined();
    await elapse(1_000);
    expect(await dropped('fast', 1_200)).toBeUndefined();
    await elapse(8_100); // the slow member silent past its own timeout: dropped
    expect(await dropped('fast', 1_200)).toBe(8_000);
    // Answered to a member heard after the drop too, while its window lasts.
    expect(await dropped('short', 500)).toBe(8_000);
    await elapse(600); // a short one dropped within the slow one's window: the longer is kept
    expect(await dropped('fast', 1_200)).toBe(8_000);
    await elapse(8_000); // the window (from the last drop) over: none answered
    expect(await dropped('fast', 1_200)).toBeUndefined();
    // A timeout past the ttl (a hand-edited report's 1e300) is taken as the ttl, to judge a
    // member and to answer it dropped.
    await redisStore.leave('long');
    memory.leave('long');
    expect(await dropped('huge', 1e300, 5_000)).toBeUndefined();
    await elapse(3_000);
    expect(await dropped('fast', 1_200, 5_000)).toBeUndefined();
    await elapse(2_100);
    expect(await dropped('fast', 1_200, 5_000)).toBe(5_000);
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

describe('a member back from an outage, among members of other heartbeats (memory store, manual clock)', () => {
  function fleet(memory: MemoryBudgetStore, clock: ManualClock) {
    const health = { down: false };
    const guard = <T>(call: () => T): T => {
      if (health.down) throw new Error('the store is down');
      return call();
    };
    const store: BudgetStore = {
      roundTrips: 0,
      heartbeat: (r) => guard(() => memory.heartbeat(r)),
      cut: (r) => guard(() => memory.cut(r)),
      pause: (r) => guard(() => memory.pause(r)),
      leave: (id) => guard(() => memory.leave(id)),
    };
    const member = (options: Partial<SharedBudgetOptions>) => {
      const b = createSharedBudget({
        name: `rejoin-${process.pid}-${names}`,
        store,
        clock,
        initialUnitsPerMinute: RATE,
        ...options,
      });
      b.on('degraded', () => {});
      b.on('recovered', () => {});
      open.push(b);
      return b;
    };
    return { health, member };
  }

  function budgets(memory: MemoryBudgetStore, clock: ManualClock) {
    const { health, member } = fleet(memory, clock);
    // The fast member's rejoining window was its own: 300 + 200 + 50 ms.
    const fast = member({ heartbeatInterval: 50, memberTimeout: 300, redisTimeout: 200 });
    // The slow one's memberTimeout is 8 s by default (4 heartbeats).
    const slow = member({ heartbeatInterval: 2_000 });
    return { health, fast, slow };
  }

  it('holds its part until the slowest member dropped as dead during the outage is heard again', () => {
    const clock = new ManualClock(0);
    const { health, fast, slow } = budgets(new MemoryBudgetStore({ clock }), clock);
    clock.advance(4_000);
    expect([fast.limiter.rate, slow.limiter.rate]).toEqual([RATE / 2, RATE / 2]);
    health.down = true;
    // 10 s, past the slow member's timeout: both degraded; the slow one's last try at 14 s.
    clock.advance(10_010);
    expect([fast.state.degraded, slow.state.degraded]).toEqual([true, true]);
    health.down = false;
    let highest = 0;
    let slowBackAt: number | undefined;
    for (let step = 0; step < 400; step++) {
      clock.advance(10);
      if (slowBackAt === undefined && !slow.state.degraded) slowBackAt = clock.now();
      highest = Math.max(highest, fast.limiter.rate + slow.limiter.rate);
    }
    // The slow member is heard again at its next heartbeat, 2 s on; the fast one took the
    // whole rate 550 ms after its own return, before (900 units/min, 1.5x, for 1.4 s).
    expect(slowBackAt).toBe(16_000);
    expect(fast.state.members).toBe(2);
    expect(highest).toBeLessThanOrEqual(RATE * 1.01);
    expect(fast.limiter.rate + slow.limiter.rate).toBeCloseTo(RATE, 6);
  });

  it('takes the part of a slow member that never comes back once its timeout has passed', () => {
    const clock = new ManualClock(0);
    const { health, fast, slow } = budgets(new MemoryBudgetStore({ clock }), clock);
    clock.advance(4_000);
    health.down = true;
    clock.advance(10_010);
    void slow.close(); // gone during the outage (it could not leave)
    health.down = false;
    clock.advance(100);
    expect(fast.state).toMatchObject({ degraded: false, members: 1 });
    expect(fast.limiter.rate).toBe(RATE / 2);
    // Held for the slow member's timeout (8 s), a call's timeout and a heartbeat of its own.
    clock.advance(8_000);
    expect(fast.limiter.rate).toBe(RATE / 2);
    clock.advance(400);
    expect(fast.limiter.rate).toBeCloseTo(RATE, 6);
  });

  it('does not wait for a present member with a long memberTimeout to take the part of a short one that died (review s62)', () => {
    const clock = new ManualClock(0);
    const { health, member } = fleet(new MemoryBudgetStore({ clock }), clock);
    const fast = { heartbeatInterval: 50, memberTimeout: 300, redisTimeout: 200 };
    const a = member(fast);
    const b = member(fast);
    // Beats as fast as the others; only its memberTimeout is long (10 min).
    const c = member({ heartbeatInterval: 50, memberTimeout: 600_000, redisTimeout: 200 });
    clock.advance(1_000);
    expect(a.limiter.rate).toBeCloseTo(RATE / 3, 6);
    health.down = true;
    clock.advance(1_000);
    void b.close(); // gone during the outage (it could not leave)
    health.down = false;
    clock.advance(100);
    expect(a.state).toMatchObject({ degraded: false, members: 2 });
    expect(c.state).toMatchObject({ degraded: false, members: 2 });
    // b (dropped, 300 ms) is waited for, not c (present): its part is taken 300 + 200 + 50 ms on.
    // Before, both held a third for c's 10 minutes, b's third unused.
    clock.advance(600);
    expect(a.limiter.rate).toBeCloseTo(RATE / 2, 6);
    expect(c.limiter.rate).toBeCloseTo(RATE / 2, 6);
  });

  it('waits for a slow member dropped as dead when it comes back later than the member that dropped it', () => {
    const clock = new ManualClock(0);
    const { health, member } = fleet(new MemoryBudgetStore({ clock }), clock);
    const fast = member({ heartbeatInterval: 50, memberTimeout: 300, redisTimeout: 200 });
    // Its own hold, 800 + 200 + 200 ms, ends before the slow member's next heartbeat.
    const mid = member({ heartbeatInterval: 200, memberTimeout: 800, redisTimeout: 200 });
    const slow = member({ heartbeatInterval: 2_000 });
    clock.advance(4_000);
    health.down = true;
    clock.advance(10_010);
    health.down = false;
    let highest = 0;
    let slowBackAt: number | undefined;
    for (let step = 0; step < 400; step++) {
      clock.advance(10);
      if (slowBackAt === undefined && !slow.state.degraded) slowBackAt = clock.now();
      highest = Math.max(highest, fast.limiter.rate + mid.limiter.rate + slow.limiter.rate);
    }
    // The first one back drops both others; the drop (with the slow one's 8 s) is kept in the
    // store, so the one back after it holds too until the slow one is heard, at 16 s.
    expect(slowBackAt).toBe(16_000);
    expect(highest).toBeLessThanOrEqual(RATE * 1.01);
    expect(fast.limiter.rate + mid.limiter.rate + slow.limiter.rate).toBeCloseTo(RATE, 6);
  });
});
