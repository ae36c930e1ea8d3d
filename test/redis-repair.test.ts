import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { MemoryBudgetStore, type SharedBudget, type SharedBudgetOptions } from '../src/redis/index.js';
import type { BudgetStore, HeartbeatReply } from '../src/redis/store.js';
import { describeRedis, type RedisServer, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// What an operator's mistake or an eviction writes into a budget's keys, written with a client
// into a real redis-server: the budget is back to sharing within two heartbeats, never above the
// budget, nobody stopped, and the repair said once (a process warning naming the key and field).

const RATE = 600;
const MEMBERS = 3;
const REPAIRED = 'ARL_SHARED_BUDGET_STATE_REPAIRED';

const { name, member } = sharedMembers(
  'repair',
  { initialUnitsPerMinute: RATE, heartbeatInterval: 60_000 }, // heartbeats only when the test asks (refresh)
  ['degraded'],
);

const warnings: Error[] = [];
const onWarning = (w: Error): void => {
  if ((w as Error & { code?: string }).code === REPAIRED) warnings.push(w);
};

beforeEach(() => {
  process.on('warning', onWarning);
});

// Before the members are closed (the hooks after a test run last registered, first).
afterEach(() => {
  process.off('warning', onWarning);
  warnings.length = 0;
});

/** Warnings are emitted on the next tick. */
const warned = async (): Promise<string[]> => {
  await new Promise((resolve) => setImmediate(resolve));
  return warnings.map((w) => w.message);
};

function members(redis: string, clock: ManualClock, more: Partial<SharedBudgetOptions> = {}) {
  return Array.from({ length: MEMBERS }, () => member({ redis, clock, controller: 'aimd', ...more }));
}

/**
 * Sharing: every member answered, at the whole rate, with MEMBERS members; the local rates add up
 * to the rate (within 1 %); nobody paused; each can send now.
 */
function expectSharing(all: SharedBudget[], clock: ManualClock): void {
  let sum = 0;
  for (const b of all) {
    expect(b.state).toMatchObject({ degraded: false, members: MEMBERS, rate: RATE });
    sum += b.limiter.rate;
    const paused = b.snapshot().pausedUntil;
    expect(paused === undefined || paused <= clock.now()).toBe(true);
  }
  expect(sum).toBeGreaterThan(RATE * 0.99);
  expect(sum).toBeLessThanOrEqual(RATE * 1.01);
  clock.advance(1_000);
  // A permit each (left unanswered: an answer would make a demand, and the shares follow demand).
  for (const b of all) expect(b.tryAcquire()).toBeDefined();
}

/** Two heartbeats of every member, one member at a time; the local rates never add up above the budget. */
async function twoHeartbeats(all: SharedBudget[]): Promise<void> {
  for (let round = 0; round < 2; round++) {
    for (const b of all) {
      await b.refresh();
      const sum = all.reduce((s, m) => s + m.limiter.rate, 0);
      expect(sum).toBeLessThanOrEqual(RATE * 1.01);
    }
  }
}

describeRedis('shared budget: what Redis holds is checked before it is used', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started));

  const keys = () => {
    const tag = `arl:{${name()}}`;
    return { state: `${tag}:state`, members: `${tag}:members`, reports: `${tag}:reports` };
  };

  /** Members sharing the budget (each heard twice), before anything is written. */
  async function sharing(clock: ManualClock): Promise<SharedBudget[]> {
    const all = members(server.url, clock);
    for (let round = 0; round < 2; round++) for (const b of all) await b.refresh();
    expectSharing(all, clock);
    return all;
  }

  it('a rate that is not a number (HSET state rate nan before members join): a fresh generation at the initial rate', async () => {
    const clock = new ManualClock();
    await redis.hset(keys().state, 'rate', 'nan');
    const all = members(server.url, clock);
    for (let round = 0; round < 2; round++) for (const b of all) await b.refresh();
    expectSharing(all, clock);
    expect(Number(await redis.hget(keys().state, 'rate'))).toBe(RATE);
    const said = await warned();
    expect(said).toHaveLength(1);
    expect(said[0]).toContain(`${keys().state} rate`);
    expect(said[0]).not.toContain('nan');
  });

  it('a pause far past maxPause (HSET state pausedUntil 9e15): nobody stops', async () => {
    const clock = new ManualClock();
    const all = await sharing(clock);
    const generation = all[0]!.state.generation;
    await redis.hset(keys().state, 'pausedUntil', '9e15');
    await twoHeartbeats(all);
    expectSharing(all, clock);
    expect(all[0]!.state.generation).not.toBe(generation);
    expect(Number((await redis.hget(keys().state, 'pausedUntil')) ?? 0)).toBeLessThan(9e15);
    const said = await warned();
    expect(said).toHaveLength(1);
    expect(said[0]).toContain(`${keys().state} pausedUntil`);
  });

  it("a report of a member that is not live while the members key is there (written by hand): dropped, the live members' shares add up to the budget", async () => {
    const clock = new ManualClock();
    const all = await sharing(clock);
    await redis.hset(keys().reports, 'ghost', '100000 0 0');
    await twoHeartbeats(all);
    expectSharing(all, clock);
    for (const b of all) expect(b.state.share).toBeCloseTo(RATE / MEMBERS, 0);
    expect(await redis.hexists(keys().reports, 'ghost')).toBe(0);
    const said = await warned();
    expect(said).toHaveLength(1);
    expect(said[0]).toContain(`${keys().reports} ghost`);
  });

  it("a report that is not three numbers (a live member's, and a stranger's): dropped, no script error, nobody degraded", async () => {
    const clock = new ManualClock();
    const all = await sharing(clock);
    await redis.hset(keys().reports, all[1]!.id, 'x y', 'stranger', '1 2 nan');
    await twoHeartbeats(all);
    expectSharing(all, clock);
    const said = await warned();
    expect(said).toHaveLength(1);
    expect(said[0]).toContain(`${keys().reports} ${all[1]!.id}`);
    expect(said[0]).toContain(`${keys().reports} stranger`);
    // The member's own report is back with its next heartbeat (its timeout the fourth number).
    expect(await redis.hget(keys().reports, all[1]!.id)).toMatch(/^\S+ \S+ \S+ \S+$/);
  });

  it('the state key replaced by a string (no TTL): deleted, a fresh generation', async () => {
    const clock = new ManualClock();
    const all = await sharing(clock);
    await redis.del(keys().state);
    await redis.set(keys().state, 'oops');
    await twoHeartbeats(all);
    expectSharing(all, clock);
    expect(await redis.type(keys().state)).toBe('hash');
    expect(await redis.pttl(keys().state)).toBeGreaterThan(0);
    const said = await warned();
    expect(said).toHaveLength(1);
    expect(said[0]).toContain(`${keys().state} (a string, not a hash)`);
  });

  it('each key of the wrong type, a member heard in the future, and a broken cut record: repaired, once each', async () => {
    const clock = new ManualClock();
    const all = await sharing(clock);
    await redis.del(keys().members, keys().reports);
    await redis.lpush(keys().members, 'x');
    await redis.set(keys().reports, 'y');
    // The members lost: they join again one by one, as at a start (the joining bound: each
    // member's share counts the members heard so far, for one heartbeat).
    for (let round = 0; round < 2; round++) for (const b of all) await b.refresh();
    expectSharing(all, clock);
    await redis.zadd(keys().members, '+inf', 'forever');
    await redis.hset(keys().state, 'decreases', '600 420 -;garbage');
    await twoHeartbeats(all);
    expectSharing(all, clock);
    const said = (await warned()).join('\n');
    expect(said).toContain(`${keys().members} (a list, not a zset)`);
    expect(said).toContain(`${keys().reports} (a string, not a hash)`);
    expect(said).toContain(`${keys().members} forever`);
    expect(said).toContain(`${keys().state} decreases`);
  });

  it('a repair made by a pause is said with the next heartbeat', async () => {
    const clock = new ManualClock();
    const all = await sharing(clock);
    await redis.hset(keys().state, 'epoch', '-1');
    const permit = all[0]!.tryAcquire();
    permit?.failed(1_000); // a 503 with Retry-After: the pause script finds the broken state
    await all[0]!.flush();
    expect(await warned()).toHaveLength(0);
    await all[0]!.refresh();
    const said = await warned();
    expect(said).toHaveLength(1);
    expect(said[0]).toContain(`${keys().state} epoch`);
  });
});

describe('shared budget: what a store answers is checked again by the member', () => {
  /** A memory store whose heartbeats answer `broken` over the real answer. */
  function brokenStore(clock: ManualClock, broken: Partial<HeartbeatReply>): BudgetStore {
    const inner = new MemoryBudgetStore({ clock });
    return {
      roundTrips: 0,
      heartbeat: (r) => ({ ...inner.heartbeat(r), ...broken }),
      cut: (r) => inner.cut(r),
      pause: (r) => inner.pause(r),
      leave: (id) => inner.leave(id),
    };
  }

  it.each<[string, Partial<HeartbeatReply>]>([
    ['a rate and a share that are not numbers', { rate: Number.NaN, share: Number.NaN }],
    ['an infinite rate', { rate: Number.POSITIVE_INFINITY, share: Number.POSITIVE_INFINITY }],
    ['a share above the rate', { share: 10 * RATE }],
    ['a pause that is not a number', { pauseRemaining: Number.NaN }],
    ['a pause of years', { pauseRemaining: 9e15 }],
    ['members and a place that are not counts', { members: Number.NaN, index: -3, epoch: 1.5 }],
    ['sums and a clock that are not numbers', { accepted: Number.NaN, measured: -1, now: Number.NaN }],
  ])('%s: the member keeps serving within the budget, not degraded', async (_what, broken) => {
    const clock = new ManualClock();
    const b = member({ name: 'checked', clock, store: brokenStore(clock, broken) });
    await b.refresh();
    await b.refresh();
    expect(b.state.degraded).toBe(false);
    expect(b.state.rate).toBe(RATE);
    expect(Number.isFinite(b.limiter.rate)).toBe(true);
    expect(b.limiter.rate).toBeGreaterThan(0);
    expect(b.limiter.rate).toBeLessThanOrEqual(RATE);
    expect(b.snapshot().pausedUntil ?? 0).toBeLessThanOrEqual(clock.now() + 600_000);
    expect(Number.isFinite(b.state.serverOffset)).toBe(true);
  });
});
