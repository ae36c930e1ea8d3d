import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { MemoryBudgetStore, type SharedBudgetOptions } from '../src/redis/index.js';
import {
  type BudgetStore,
  demandWeightedShare,
  type HeartbeatReply,
  type HeartbeatRequest,
} from '../src/redis/store.js';
import { describeRedis, withRedisServer } from './helpers/redis-server.js';
import { heartbeatRequest, sharedMembers, storeDownWhile } from './helpers/shared-members.js';

// The heartbeat reads the members' reports once (the timeouts, the checks and the sums of one
// parsed read), and a member back from an outage holds its part for as long as the slowest
// member heard before the outage may take to be heard again.

const RATE = 600;

const beat = (id: string, more: Partial<HeartbeatRequest> = {}) =>
  heartbeatRequest(id, { initialRate: RATE, ...more });

const { name: nameOf, member: budget } = sharedMembers('rejoin', { initialUnitsPerMinute: RATE }, [
  'degraded',
  'recovered',
]);

describeRedis('one heartbeat, every use of the reports (a real Redis)', () => {
  let redis: Redis;
  const suite = withRedisServer((started) => ({ redis } = started));

  it('drops a dead member, keeps a report of three fields, deletes a broken one and a stray one, and sums the rest', async () => {
    const name = nameOf('read-once');
    const store = suite.store(name);
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
    // The slow member's, the longest of the live members' (the dead one's is gone with it).
    expect(reply.longestMemberTimeout).toBe(10_000);
  });

  it("judges a member whose report is broken by the caller's timeout, not the broken report's", async () => {
    const name = nameOf('broken-timeout');
    const store = suite.store(name);
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
    expect(reply.longestMemberTimeout).toBe(1_200);
  });

  it('answers the longest memberTimeout of the live members, as the memory store does', async () => {
    const name = nameOf('longest');
    const redisStore = suite.store(name);
    const members = `arl:{${name}}:members`;
    const clock = new ManualClock(0);
    const memory = new MemoryBudgetStore({ clock });
    // Every last heartbeat moved back by `ms` (Redis's clock is real time), the memory's clock on.
    const elapse = async (ms: number) => {
      for (const id of await redis.zrange(members, '0', '-1')) await redis.zincrby(members, -ms, id);
      clock.advance(ms);
    };
    const longest = async (id: string, memberTimeout: number) => {
      const both = [
        await redisStore.heartbeat(beat(id, { memberTimeout })),
        memory.heartbeat(beat(id, { memberTimeout })),
      ];
      expect(both[0]!.longestMemberTimeout).toBe(both[1]!.longestMemberTimeout);
      return both[1]!.longestMemberTimeout;
    };
    expect(await longest('fast', 1_200)).toBe(1_200);
    expect(await longest('slow', 8_000)).toBe(8_000);
    expect(await longest('fast', 1_200)).toBe(8_000);
    await elapse(8_100); // the slow member silent past its own timeout: dropped
    expect(await longest('fast', 1_200)).toBe(1_200);
  });
  it('reads the reports hash and the members set once per heartbeat', async () => {
    const name = nameOf('read-count');
    const store = suite.store(name);
    const reports = `arl:{${name}}:reports`;
    const members = `arl:{${name}}:members`;
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
        if (key === members && command.toLowerCase() === 'zrange') reads.push(command.toUpperCase());
      });
    });
    try {
      await store.heartbeat(beat('a'));
      await redis.echo(marker);
      await done;
    } finally {
      monitor.disconnect();
    }
    // Before: HGETALL for the timeouts, HGETALL to check them, HVALS for the sums; ZRANGE for
    // the dead members, ZRANGE again for this member's index.
    expect(reads).toEqual(['HGETALL', 'ZRANGE']);
  });
});

describe('a member back from an outage, among members of other heartbeats (memory store, manual clock)', () => {
  /**
   * Members of one budget on a memory store that is down while `health.down`; `answer` edits
   * each heartbeat's reply (a store of the user's own, a report edited by hand).
   */
  function fleet(
    memory: MemoryBudgetStore,
    clock: ManualClock,
    answer: (reply: HeartbeatReply) => HeartbeatReply = (reply) => reply,
  ) {
    const health = { down: false };
    /** A member; `link.down`: its own link to the store is down too. */
    const member = (options: Partial<SharedBudgetOptions>, link = { down: false }) =>
      budget({ store: storeDownWhile(memory, () => health.down || link.down, answer), clock, ...options });
    return { health, member };
  }

  function budgets(memory: MemoryBudgetStore, clock: ManualClock) {
    const { health, member } = fleet(memory, clock);
    // The fast member's rejoining window was its own: 300 + 200 + 50 ms.
    const fast = member({ heartbeatInterval: 50, memberTimeout: 300, redisTimeout: 200 });
    // The slow one's memberTimeout is 8 s by default (4 heartbeats).
    const slowLink = { down: false };
    const slow = member({ heartbeatInterval: 2_000 }, slowLink);
    return { health, fast, slow, slowLink };
  }

  it('holds its part until the slowest member heard before the outage is heard again', () => {
    const clock = new ManualClock(0);
    const { health, fast, slow, slowLink } = budgets(new MemoryBudgetStore({ clock }), clock);
    clock.advance(4_000);
    expect([fast.limiter.rate, slow.limiter.rate]).toEqual([RATE / 2, RATE / 2]);
    health.down = true;
    // 10 s, past the slow member's timeout: both degraded.
    clock.advance(10_010);
    expect([fast.state.degraded, slow.state.degraded]).toEqual([true, true]);
    // The slow member's own link stays down 2 s longer; its silence has passed its memberTimeout
    // (8 s), so it tries at its heartbeat again, not every 250 ms.
    slowLink.down = true;
    health.down = false;
    let highest = 0;
    let slowBackAt: number | undefined;
    for (let step = 0; step < 400; step++) {
      clock.advance(10);
      if (clock.now() === 16_010) slowLink.down = false;
      if (slowBackAt === undefined && !slow.state.degraded) slowBackAt = clock.now();
      highest = Math.max(highest, fast.limiter.rate + slow.limiter.rate);
    }
    // The slow member is heard again at its next heartbeat once its link is back; the fast one
    // took the whole rate 550 ms after its own return, before (900 units/min, 1.5x, for 1.4 s).
    expect(slowBackAt).toBe(18_000);
    expect(fast.state.members).toBe(2);
    expect(highest).toBeLessThanOrEqual(RATE * 1.01);
    expect(fast.limiter.rate + slow.limiter.rate).toBeCloseTo(RATE, 6);
  });

  // No member died: the fast one, back first, still counts the slow one, whose silence (its last
  // heartbeat before the outage) runs out 400 ms later. Trying again only at its heartbeat, the
  // slow one was heard 1 s after that: the fast one had dropped it and taken the whole rate
  // while the slow one still sent its half (1.5x the budget).
  it('a degraded member of a slow heartbeat tries again soon: heard before its silence runs out', () => {
    const clock = new ManualClock(0);
    const { health, member } = fleet(new MemoryBudgetStore({ clock }), clock);
    const fast = member({ heartbeatInterval: 50, memberTimeout: 300, redisTimeout: 200 });
    const slow = member({ heartbeatInterval: 2_000, memberTimeout: 7_000 });
    clock.advance(4_000);
    expect([fast.limiter.rate, slow.limiter.rate]).toEqual([RATE / 2, RATE / 2]);
    health.down = true;
    clock.advance(6_600); // to 10.6 s; the slow member's silence runs out at 11 s
    health.down = false;
    let highest = 0;
    let fewest = 2;
    for (let step = 0; step < 300; step++) {
      clock.advance(10);
      highest = Math.max(highest, fast.limiter.rate + slow.limiter.rate);
      if (!fast.state.degraded) fewest = Math.min(fewest, fast.state.members);
    }
    expect({ fewest, degraded: slow.state.degraded }).toEqual({ fewest: 2, degraded: false });
    expect(highest).toBeLessThanOrEqual(RATE * 1.01);
  });

  // A store that keeps failing at once (a script error, a Redis out of memory): the quick tries
  // last while the member's silence is within its memberTimeout (20 s for a 5 s heartbeat), then
  // come at its heartbeat. Before, four a second for as long as the store failed.
  it('a degraded member tries quickly only while its silence is within its memberTimeout', () => {
    const clock = new ManualClock(0);
    const memory = new MemoryBudgetStore({ clock });
    let calls = 0;
    const failing = { now: false };
    const store: BudgetStore = {
      roundTrips: 0,
      heartbeat: (r) => {
        calls++;
        if (failing.now) throw new Error('ERR the script failed');
        return memory.heartbeat(r);
      },
      cut: (r) => memory.cut(r),
      pause: (r) => memory.pause(r),
      leave: (id) => memory.leave(id),
    };
    const slow = budget({ store, clock, heartbeatInterval: 5_000 });
    clock.advance(5_000);
    failing.now = true;
    calls = 0;
    clock.advance(25_000); // the silence passes its memberTimeout (20 s) here
    expect(calls).toBeGreaterThan(50); // quick tries within 20 s of its last answer
    calls = 0;
    clock.advance(60_000);
    expect(calls).toBeLessThanOrEqual(13); // then one a heartbeat
    expect(slow.state.degraded).toBe(true);
  });

  // A lazy budget (the registry makes a config's shared budgets lazy) starts at its first use:
  // its silence counts from there, not from when it was made a minute before.
  it('a lazy member degraded at its first heartbeat tries again quickly, as an eager one does', async () => {
    const clock = new ManualClock(0);
    const memory = new MemoryBudgetStore({ clock });
    let downUntil = Number.POSITIVE_INFINITY;
    const store = storeDownWhile(memory, () => clock.now() < downUntil);
    const lazy = budget({ store, clock, lazy: true, heartbeatInterval: 5_000 });
    clock.advance(60_000);
    const usedAt = clock.now();
    downUntil = usedAt + 300;
    await lazy.ready();
    expect(lazy.state.degraded).toBe(true);
    clock.advance(500);
    expect(lazy.state.degraded).toBe(false);
  });

  it('takes a timeout answered above its stateTtl as its stateTtl (a report edited by hand: 1e300)', () => {
    const clock = new ManualClock(0);
    const { health, member } = fleet(new MemoryBudgetStore({ clock }), clock, (reply) => ({
      ...reply,
      longestMemberTimeout: 1e300,
    }));
    const fast = member({ heartbeatInterval: 50, memberTimeout: 300, redisTimeout: 200, stateTtl: 20_000 });
    const gone = member({ heartbeatInterval: 50, memberTimeout: 300, redisTimeout: 200 });
    clock.advance(1_000);
    health.down = true;
    clock.advance(1_000);
    void gone.close(); // gone during the outage (it could not leave)
    health.down = false;
    clock.advance(100);
    expect(fast.state).toMatchObject({ degraded: false, members: 1 });
    // Held for its stateTtl (20 s), a call's timeout and a heartbeat, not for 1e300 ms.
    clock.advance(20_000);
    expect(fast.limiter.rate).toBe(RATE / 2);
    clock.advance(400);
    expect(fast.limiter.rate).toBeCloseTo(RATE, 6);
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
});
