import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { createSharedBudget, MemoryBudgetStore, type SharedBudget } from '../src/redis/index.js';
import { RedisBudgetStore } from '../src/redis/redis-store.js';
import {
  type BudgetStore,
  type CutReply,
  type CutRequest,
  demandWeightedShare,
  type HeartbeatReply,
  type HeartbeatRequest,
} from '../src/redis/store.js';
import { describeRedis, RedisServer } from './helpers/redis-server.js';

const HOUR = 3_600_000;

function beat(id: string, demand: number, more: Partial<HeartbeatRequest> = {}): HeartbeatRequest {
  return {
    id,
    demand,
    delta: 0,
    memberTimeout: HOUR,
    floorFraction: 0.05,
    initialRate: 600,
    minRate: 1,
    maxRate: undefined,
    ttl: HOUR,
    ...more,
  };
}

function cut(sentEpoch: number, more: Partial<CutRequest> = {}): CutRequest {
  return {
    sentEpoch,
    ratio: 0.7,
    absoluteRate: 900,
    cooldown: 0,
    minRate: 1,
    maxRate: undefined,
    ttl: HOUR,
    ...more,
  };
}

describe('demandWeightedShare', () => {
  it.each([
    // rate, own, demands, floorFraction, expected share
    [600, 0, [0, 0, 0], 0.05, 200],
    [600, 0, [0, 0], 0, 300],
    [600, 5_000, [5_000, 0], 0.05, (600 * (600 + 15)) / (600 + 15 + 15)],
    [1_000, 100, [100, 900], 0, 100],
  ])('shares a rate of %d with demand %d among %j (floor %d)', (rate, own, demands, floor, expected) => {
    expect(demandWeightedShare(rate, own, demands, floor, demands.length)).toBeCloseTo(expected, 9);
  });
});

describe('MemoryBudgetStore', () => {
  it('drops a member silent for longer than the timeout, on the next heartbeat', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    store.heartbeat(beat('a', 0, { memberTimeout: 1_000 }));
    clock.advance(600);
    expect(store.heartbeat(beat('b', 0, { memberTimeout: 1_000 })).members).toBe(2);
    clock.advance(400);
    expect(store.heartbeat(beat('b', 0, { memberTimeout: 1_000 })).members).toBe(1);
  });

  it('cuts once per epoch, and not within the cooldown', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    store.heartbeat(beat('a', 0));
    expect(store.cut(cut(0, { cooldown: 1_000 }))).toEqual({ cut: true, rate: 420, epoch: 1 });
    expect(store.cut(cut(0, { cooldown: 1_000 })).cut).toBe(false);
    clock.advance(999);
    expect(store.cut(cut(1, { cooldown: 1_000 })).cut).toBe(false);
    clock.advance(1);
    expect(store.cut(cut(1, { cooldown: 1_000 }))).toEqual({ cut: true, rate: 294, epoch: 2 });
    expect(store.cuts).toBe(2);
  });

  it('keeps the later end of two pauses, and forgets everything after its ttl', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    store.heartbeat(beat('a', 0, { ttl: 10_000 }));
    store.cut(cut(0));
    expect(store.pause({ ms: 5_000, ttl: 10_000 })).toBe(5_000);
    expect(store.pause({ ms: 1_000, ttl: 10_000 })).toBe(5_000);
    clock.advance(2_000);
    expect(store.heartbeat(beat('a', 0, { ttl: 10_000 })).pauseRemaining).toBe(3_000);
    clock.advance(10_000);
    expect(store.rate).toBeUndefined();
    expect(store.heartbeat(beat('a', 0, { ttl: 10_000 }))).toMatchObject({ rate: 600, epoch: 0, members: 1 });
  });
});

describe('SharedBudget on a MemoryBudgetStore and a manual clock', () => {
  const open: SharedBudget[] = [];
  afterAll(async () => {
    await Promise.all(open.map((b) => b.close()));
  });

  function members(n: number, clock: ManualClock, options: { initialUnitsPerMinute?: number } = {}) {
    const store = new MemoryBudgetStore({ clock });
    const budgets = Array.from({ length: n }, () =>
      createSharedBudget({
        name: 'memory',
        store,
        clock,
        initialUnitsPerMinute: 600,
        decreaseCooldown: 0,
        heartbeatInterval: 250,
        ...options,
      }),
    );
    open.push(...budgets);
    return { store, budgets };
  }

  it('takes a store or a Redis, not both', () => {
    const store = new MemoryBudgetStore();
    expect(() => createSharedBudget({ name: 'x', store, redis: 'redis://127.0.0.1:1' })).toThrow(
      /store: give either redis or store, not both/,
    );
    expect(() => createSharedBudget({ name: 'x', store: {} as MemoryBudgetStore })).toThrow(
      /store: expected a BudgetStore/,
    );
  });

  it('heartbeats on the clock and applies each answer at once', () => {
    const clock = new ManualClock();
    const { store, budgets } = members(3, clock);
    expect(budgets[0]!.state.members).toBe(1); // its first heartbeat, alone
    clock.advance(250);
    for (const b of budgets) {
      expect(b.state.members).toBe(3);
      expect(b.limiter.rate).toBeCloseTo(200);
    }
    expect(store.members).toBe(3);
    expect(budgets[0]!.state.roundTrips).toBe(0);
  });

  it('cuts the whole rate once for a burst of 429s seen by several members', async () => {
    const clock = new ManualClock();
    const { store, budgets } = members(3, clock);
    clock.advance(250);
    const burst = await Promise.all(budgets.map((b) => b.acquire()));
    for (const permit of burst) permit.throttled();
    expect(store.cuts).toBe(1);
    expect(store.rate).toBeCloseTo(420);
    // The refused local cuts are undone at once: each has its share of the cut budget.
    for (const b of budgets) expect(b.limiter.rate).toBeCloseTo(140);
    const later = await budgets[1]!.acquire();
    later.throttled();
    expect(store.cuts).toBe(2);
    expect(store.rate).toBeCloseTo(294);
  });

  it('pauses the others at their next heartbeat', async () => {
    const clock = new ManualClock();
    const { budgets } = members(2, clock);
    clock.advance(250);
    const [a, b] = budgets as [SharedBudget, SharedBudget];
    (await a.acquire()).throttled(30_000);
    expect(a.snapshot().pausedUntil).toBe(30_250);
    expect(b.snapshot().pausedUntil).toBeUndefined();
    clock.advance(250);
    expect(b.snapshot().pausedUntil).toBe(30_250);
  });

  it('gives a busy member most of the rate and an idle one a floor', () => {
    const clock = new ManualClock();
    const { budgets } = members(2, clock);
    const [busy, idle] = budgets as [SharedBudget, SharedBudget];
    const waiting = Array.from({ length: 30 }, () => busy.acquire().catch(() => undefined));
    clock.advance(250);
    clock.advance(250);
    expect(busy.state.share! + idle.state.share!).toBeCloseTo(600);
    expect(busy.state.share!).toBeGreaterThan(15 * idle.state.share!);
    busy.limiter.close();
    return Promise.all(waiting);
  });
});

describeRedis('the Redis store and the memory store follow the same rules', () => {
  let server: RedisServer;
  let names = 0;
  const stores: RedisBudgetStore[] = [];

  beforeAll(async () => {
    server = await RedisServer.start();
  });

  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    await server?.stop();
  });

  function redisStore(): RedisBudgetStore {
    const store = new RedisBudgetStore({
      redis: server.url,
      name: `parity-${process.pid}-${names++}`,
      keyPrefix: 'arl-test:',
      redisTimeout: 2_000,
    });
    stores.push(store);
    return store;
  }

  it.each([
    { rate: 600, demands: [0, 0, 0], floorFraction: 0.05 },
    { rate: 600, demands: [0, 0], floorFraction: 0 },
    { rate: 3_000, demands: [3_800, 200], floorFraction: 0.05 },
    { rate: 1_234.5, demands: [17.25, 5_000, 640, 0.5], floorFraction: 0.2 },
    { rate: 90, demands: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], floorFraction: 1 },
  ])('the Lua heartbeat shares $rate units/min by demand $demands as demandWeightedShare does', async (c) => {
    const store = redisStore();
    const request = (i: number) =>
      beat(`m${i}`, c.demands[i]!, { initialRate: c.rate, floorFraction: c.floorFraction });
    for (let i = 0; i < c.demands.length; i++) await store.heartbeat(request(i));
    for (let i = 0; i < c.demands.length; i++) {
      const reply = await store.heartbeat(request(i));
      const expected = demandWeightedShare(
        c.rate,
        c.demands[i]!,
        c.demands,
        c.floorFraction,
        c.demands.length,
      );
      expect(reply.members).toBe(c.demands.length);
      expect(reply.rate).toBe(c.rate);
      expect(reply.share! / expected).toBeCloseTo(1, 12);
    }
  });

  it('answers a sequence of heartbeats, cuts, pauses and leaves as the memory store does', async () => {
    type Step = (store: BudgetStore) => Promise<HeartbeatReply | CutReply | number>;
    const steps: [string, Step][] = [
      ['a joins', async (s) => s.heartbeat(beat('a', 100))],
      ['b joins', async (s) => s.heartbeat(beat('b', 500))],
      ['c joins', async (s) => s.heartbeat(beat('c', 0))],
      ['a cut', async (s) => s.cut(cut(0))],
      ['a cut for the same burst', async (s) => s.cut(cut(0))],
      ['a cut within the cooldown', async (s) => s.cut(cut(1, { cooldown: HOUR }))],
      ['a raise', async (s) => s.heartbeat(beat('a', 100, { delta: 30 }))],
      [
        'a raise past the maximum',
        async (s) => s.heartbeat(beat('b', 500, { delta: 5_000, maxRate: 1_000 })),
      ],
      ['a cut below the minimum', async (s) => s.cut(cut(1, { ratio: 1e-6, minRate: 12 }))],
      ['a pause', async (s) => s.pause({ ms: 30_000, ttl: HOUR })],
      ['a shorter pause', async (s) => s.pause({ ms: 1_000, ttl: HOUR })],
      ['b hears of the pause', async (s) => s.heartbeat(beat('b', 500))],
      ['c leaves', async (s) => s.leave('c')],
      ['a after c left', async (s) => s.heartbeat(beat('a', 100))],
    ];
    const memory = new MemoryBudgetStore();
    const redis = redisStore();
    for (const [what, step] of steps) {
      const [fromRedis, fromMemory] = [await step(redis), await step(memory)];
      expectSameAnswer(what, fromRedis, fromMemory);
    }

    const unlimited: [string, Step][] = [
      ['joins without a rate', async (s) => s.heartbeat(beat('a', 100, { initialRate: undefined }))],
      ['the first cut sets the rate', async (s) => s.cut(cut(0, { ratio: undefined, absoluteRate: 900 }))],
      ['then shares it', async (s) => s.heartbeat(beat('a', 100, { initialRate: undefined }))],
    ];
    const memory2 = new MemoryBudgetStore();
    const redis2 = redisStore();
    for (const [what, step] of unlimited) {
      expectSameAnswer(what, await step(redis2), await step(memory2));
    }
  });
});

/** Same answer, up to Lua's 14 significant digits and a few ms of real time between the two. */
function expectSameAnswer(
  what: string,
  a: HeartbeatReply | CutReply | number,
  b: HeartbeatReply | CutReply | number,
): void {
  if (typeof a === 'number' || typeof b === 'number') {
    expect(Math.abs(Number(a) - Number(b)), what).toBeLessThan(50);
    return;
  }
  const { rate: rateA, ...restA } = a as HeartbeatReply;
  const { rate: rateB, ...restB } = b as HeartbeatReply;
  expect(rateA === undefined, what).toBe(rateB === undefined);
  if (rateA !== undefined) expect(rateA / rateB!, what).toBeCloseTo(1, 12);
  if ('share' in restA && 'share' in restB) {
    const { share: shareA, pauseRemaining: pauseA, ...heartA } = restA;
    const { share: shareB, pauseRemaining: pauseB, ...heartB } = restB;
    expect(shareA === undefined, what).toBe(shareB === undefined);
    if (shareA !== undefined) expect(shareA / shareB!, what).toBeCloseTo(1, 12);
    expect(Math.abs(pauseA - pauseB), what).toBeLessThan(50);
    expect(heartA, what).toEqual(heartB);
  } else {
    expect(restA, what).toEqual(restB);
  }
}
