import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { MemoryBudgetStore, type SharedBudgetOptions } from '../src/redis/index.js';
import type { BudgetStore, HeartbeatRequest } from '../src/redis/store.js';
import {
  describeRedis,
  heartbeatRequest,
  type RedisServer,
  sharedMembers,
  withRedisServer,
} from './helpers/redis-server.js';

// Members of one budget with different heartbeats: each is judged alive by its own memberTimeout
// (the default follows its own heartbeat), published with its report. And a state hash whose
// generation field is gone (HDEL by hand): a broken state, deleted, as after a loss.

const RATE = 600;
/** The default memberTimeouts: max(4 heartbeats, redisTimeout (1 s) + 2 heartbeats). */
const FAST = { heartbeatInterval: 100, timeout: 1_200 };
const SLOW = { heartbeatInterval: 2_000, timeout: 8_000 };

const { name: nameOf, member: budget } = sharedMembers('member-timeouts', { initialUnitsPerMinute: RATE }, [
  'degraded',
]);
const member = (options: Partial<SharedBudgetOptions> & Pick<SharedBudgetOptions, 'clock'>) =>
  budget(options);

describe('members of one budget with different heartbeats (memory store, manual clock)', () => {
  it('a fast member keeps a slow one between its heartbeats: rates within the budget', () => {
    const clock = new ManualClock(0);
    const store = new MemoryBudgetStore({ clock });
    const fast = member({ clock, store, heartbeatInterval: FAST.heartbeatInterval });
    const slow = member({ clock, store, heartbeatInterval: SLOW.heartbeatInterval });
    let highest = 0;
    let fewest = 2;
    // 10 s: five of the slow member's heartbeats, each 2 s apart, past the fast one's 1.2 s.
    for (let step = 0; step < 1_000; step++) {
      clock.advance(10);
      // From the fast member's second heartbeat on, which hears the slow one (joined at 0).
      if (clock.now() < FAST.heartbeatInterval) continue;
      highest = Math.max(highest, fast.limiter.rate + slow.limiter.rate);
      fewest = Math.min(fewest, fast.state.members, slow.state.members);
    }
    // Before: 900 units/min (1.5x) while the fast member counted itself alone.
    expect(highest).toBeLessThanOrEqual(RATE * 1.01);
    expect(fewest).toBe(2);
  });

  it("a member silent past its given memberTimeout is dropped at the others' heartbeats", () => {
    const clock = new ManualClock(0);
    const store = new MemoryBudgetStore({ clock });
    const fast = member({ clock, store, heartbeatInterval: FAST.heartbeatInterval });
    // The slow member's process hangs at some point: from then on the store hears nothing of it.
    let hung = false;
    const slowStore: BudgetStore = {
      roundTrips: 0,
      heartbeat: (r) => {
        if (hung) throw new Error('hung');
        return store.heartbeat(r);
      },
      cut: (r) => store.cut(r),
      pause: (r) => store.pause(r),
      leave: (id) => store.leave(id),
    };
    // Given a memberTimeout of its own, closer to its heartbeat than the default (8 s).
    const slow = member({
      clock,
      store: slowStore,
      heartbeatInterval: SLOW.heartbeatInterval,
      memberTimeout: 2_500,
    });
    clock.advance(SLOW.heartbeatInterval * 3); // its last heartbeat: now
    expect(fast.state.members).toBe(2);
    expect(slow.state.members).toBe(2);
    hung = true;
    clock.advance(2_400);
    expect(fast.state.members).toBe(2);
    clock.advance(200);
    expect(fast.state.members).toBe(1);
    expect(fast.limiter.rate).toBeCloseTo(RATE, 6);
  });
});

/** A heartbeat of `id` (no demand) that says how long the others may wait for its next one. */
function beat(id: string, memberTimeout: number): HeartbeatRequest {
  return heartbeatRequest(id, { memberTimeout, initialRate: RATE });
}

/**
 * The members' silences, as the heartbeats of two members with their own timeouts see them: the
 * slow one's (8 s) is judged by its own timeout at the fast one's heartbeats (1.2 s), and the
 * fast one's by its own at the slow one's. `elapse` makes every member silent `ms` longer.
 */
async function expectOwnTimeouts(
  store: BudgetStore,
  elapse: (ms: number) => Promise<void> | void,
): Promise<void> {
  const members = async (id: string, timeout: number) => {
    const reply = await store.heartbeat(beat(id, timeout));
    return reply.members;
  };
  expect(await members('slow', SLOW.timeout)).toBe(1);
  expect(await members('fast', FAST.timeout)).toBe(2);
  await elapse(SLOW.heartbeatInterval - 100);
  // Silent 1.9 s, past the fast member's timeout and within its own: live (before: dropped).
  expect(await members('fast', FAST.timeout)).toBe(2);
  await elapse(SLOW.timeout - SLOW.heartbeatInterval);
  // Silent 7.9 s: still live.
  expect(await members('fast', FAST.timeout)).toBe(2);
  await elapse(300);
  // Silent 8.2 s: dropped at the fast member's heartbeat.
  expect(await members('fast', FAST.timeout)).toBe(1);
  expect(await members('slow', SLOW.timeout)).toBe(2);
  await elapse(FAST.timeout + 300);
  // The fast member silent 1.5 s: dropped at the slow member's heartbeat (before: kept 8 s).
  expect(await members('slow', SLOW.timeout)).toBe(1);
}

describe('the memory store judges each member by the timeout it sent', () => {
  it("drops a member silent for longer than its own memberTimeout, not the caller's", async () => {
    const clock = new ManualClock(0);
    await expectOwnTimeouts(new MemoryBudgetStore({ clock }), (ms) => clock.advance(ms));
  });
});

describeRedis('on a real Redis', () => {
  let redis: Redis;
  let server: RedisServer;
  const suite = withRedisServer((started) => ({ server, redis } = started));

  it('the Lua heartbeat judges each member by its own memberTimeout, as memory does', async () => {
    const name = nameOf('own-timeouts');
    const store = suite.store(name);
    const key = `arl:{${name}}:members`;
    // Time passes for the members: every last heartbeat moved back by `ms` (the server's clock
    // is real time; the calls themselves take a few ms, far within the margins of 100 ms).
    const elapse = async (ms: number) => {
      for (const id of await redis.zrange(key, '0', '-1')) await redis.zincrby(key, -ms, id);
    };
    await expectOwnTimeouts(store, elapse);
  });

  // A rolling deploy: a member of a build from before the timeouts were sent reports three fields.
  it("keeps an older build's report of three fields, its member judged by the caller's timeout", async () => {
    const name = nameOf('old-report');
    const store = suite.store(name);
    const members = `arl:{${name}}:members`;
    const reports = `arl:{${name}}:reports`;
    expect((await store.heartbeat(beat('new', FAST.timeout))).members).toBe(1);
    // The older member's heartbeat, as its script writes it: its score now, three fields.
    const [now] = await redis.time();
    await redis.zadd(members, Number(now) * 1_000, 'old');
    await redis.hset(reports, 'old', '600 300 300');
    const reply = await store.heartbeat(beat('new', FAST.timeout));
    expect(reply.members).toBe(2);
    expect(reply.repaired ?? []).toEqual([]);
    expect(await redis.hget(reports, 'old')).toBe('600 300 300');
    // Its demand counts: the share of the member reporting none is the floor's part.
    expect(reply.share).toBeLessThan(RATE / 2);
    // Silent past the caller's timeout (it sent none of its own): dropped.
    await redis.zincrby(members, -(FAST.timeout + 300), 'old');
    expect((await store.heartbeat(beat('new', FAST.timeout))).members).toBe(1);
  });

  const REPAIRED = 'ARL_SHARED_BUDGET_STATE_REPAIRED';
  const warnings: string[] = [];
  const onWarning = (w: Error): void => {
    if ((w as Error & { code?: string }).code === REPAIRED) warnings.push(w.message);
  };
  beforeAll(() => {
    process.on('warning', onWarning);
  });
  afterAll(() => {
    process.off('warning', onWarning);
  });

  // A state hash whose generation field is gone: deleted, a fresh generation (as after a loss).
  it('HDEL of the generation: a 429 of a request sent before cuts the fresh state', async () => {
    const clock = new ManualClock();
    const options = {
      redis: server.url,
      clock,
      decreaseCooldown: 0,
      heartbeatInterval: 60_000, // heartbeats only when the test asks (refresh)
      controller: 'aimd' as const,
    };
    const all = [member(options), member(options)];
    for (const b of all) await b.refresh();
    const state = `arl:{${all[0]!.name}}:state`;
    // Two cuts: the whole rate 600 -> 420 -> 294, epoch 2.
    for (let i = 0; i < 2; i++) {
      clock.advance(1_000);
      all[0]!.tryAcquire()!.throttled();
      await all[0]!.flush();
    }
    for (const b of all) await b.refresh();
    expect(all[1]!.state).toMatchObject({ epoch: 2, rate: 294 });
    const lost = all[1]!.state.generation;

    clock.advance(1_000);
    const inFlight = all.map((b) => b.tryAcquire()!);
    await redis.hdel(state, 'generation');
    // The first 429 of the requests sent before cuts the state made again (before: the store
    // kept epoch 2 under a new generation and counted the request as sent at its epoch 0, so
    // no 429 of them cut, and the local cuts were undone).
    inFlight[1]!.throttled();
    await all[1]!.flush();
    expect(await redis.hmget(state, 'epoch', 'cuts')).toEqual(['1', '1']);
    const rate = Number(await redis.hget(state, 'rate'));
    expect(rate).toBeLessThan(294);
    // The burst cuts once.
    inFlight[0]!.throttled();
    await all[0]!.flush();
    expect(await redis.hmget(state, 'epoch', 'cuts')).toEqual(['1', '1']);
    for (const b of all) await b.refresh();
    for (const b of all) {
      expect(b.state).toMatchObject({ epoch: 1, members: 2, degraded: false });
      // Through Redis the rate comes back as a decimal string: equal to the last few digits.
      expect(b.state.rate).toBeCloseTo(rate, 6);
      expect(b.state.generation).not.toBe(lost);
    }
    expect(all[0]!.limiter.rate + all[1]!.limiter.rate).toBeLessThanOrEqual(rate * 1.01);
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings.join('\n')).toContain(`${state} generation`);
  });
});
