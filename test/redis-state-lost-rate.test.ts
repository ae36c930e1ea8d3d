import type { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { SharedBudget, SharedBudgetOptions } from '../src/redis/index.js';
import type { BudgetStore } from '../src/redis/store.js';
import { describeRedis, type RedisServer, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// The budget's :state key lost (an eviction, a FLUSHDB, a DEL) while its members keep running: no
// member is unlimited because of it, and no 429 loses its cut. Real redis-server on 127.0.0.1,
// heartbeats sent by the test (refresh) on a ManualClock.

const RATE = 600;

const { name, member } = sharedMembers(
  'state-lost-rate',
  { heartbeatInterval: 5_000, controller: 'aimd', decreaseCooldown: 0 },
  ['degraded', 'repaired'],
);

const stateKey = () => `arl:{${name()}}:state`;

/** A store of the suite's server whose `:state` is deleted before each cut (as an eviction would). */
function losingBeforeCuts(inner: BudgetStore, redis: Redis): BudgetStore {
  return {
    roundTrips: 0,
    heartbeat: (r) => inner.heartbeat(r),
    cut: async (r) => {
      await redis.del(stateKey());
      return inner.cut(r);
    },
    pause: (r) => inner.pause(r),
    leave: (id) => inner.leave(id),
  };
}

/** The next permit of \`b\`, the clock moved on in steps of 100 ms (within a heartbeat) until one comes. */
async function next(b: SharedBudget, clock: ManualClock) {
  for (let i = 0; i < 40; i++) {
    const permit = b.tryAcquire();
    if (permit !== undefined) return permit;
    clock.advance(100);
  }
  throw new Error('no permit in 4 s');
}

describeRedis('shared budget: its :state lost', () => {
  let server: RedisServer;
  let redis: Redis;

  const suite = withRedisServer((started) => ({ server, redis } = started));

  const of = (clock: ManualClock, more: Partial<SharedBudgetOptions>): SharedBudget =>
    member(more.store === undefined ? { redis: server.url, clock, ...more } : { clock, ...more });

  it('a member without initialUnitsPerMinute heard first after the loss keeps its share, not unlimited', async () => {
    const clock = new ManualClock();
    const b = of(clock, { initialUnitsPerMinute: RATE });
    const c = of(clock, { initialUnitsPerMinute: RATE });
    const a = of(clock, {}); // no initial rate of its own
    for (let round = 0; round < 2; round++) for (const m of [b, c, a]) await m.refresh();
    expect([a, b, c].map((m) => m.limiter.rate)).toEqual([200, 200, 200]);

    await redis.del(stateKey());
    await a.refresh(); // heard first after the loss
    const first = a.limiter.rate;
    for (const m of [b, c]) await m.refresh();
    // Before: the state made again with no rate, `a` unlimited, and still so once `b` had made
    // the rate again at 600 (until a's own next heartbeat): 200 / unlimited / 200.
    expect({
      first,
      rates: [a, b, c].map((m) => m.limiter.rate),
      stored: await redis.hget(stateKey(), 'rate'),
    }).toEqual({
      first: 200,
      rates: [200, 200, 200],
      stored: String(RATE),
    });
    expect(a.state.rate).toBe(RATE);
  });

  it('a 429 whose cut runs first after the loss cuts from the rate known: 600 -> 420, not unlimited', async () => {
    const clock = new ManualClock();
    const a = of(clock, { initialUnitsPerMinute: RATE, store: losingBeforeCuts(suite.store(name()), redis) });
    await a.refresh();
    expect(a.state.rate).toBe(RATE);

    // Every cut finds the state gone (evicted again before each try): before, each try was
    // \`stale\` (computed from the lost generation's books), the member's rate became undefined
    // (unlimited as far as the budget knew) and nothing was cut in the store.
    (await a.acquire()).throttled();
    await a.flush();
    const afterFirst = { rate: a.state.rate, stored: await redis.hget(stateKey(), 'rate') };
    // A second 429, with a Retry-After long enough for the delayed "first cut" of a budget with
    // no rate: before, the next heartbeat's initial rate dropped that cut.
    (await next(a, clock)).throttled(30_000);
    await a.flush();
    await a.refresh();
    expect({ afterFirst, afterSecond: a.state.rate }).toEqual({
      afterFirst: { rate: 420, stored: '420' },
      afterSecond: 294,
    });
  });

  it('a 429 whose cut runs first after one loss cuts once: 600 -> 420, not 294', async () => {
    const clock = new ManualClock();
    const members = [0, 1, 2].map(() => of(clock, { initialUnitsPerMinute: RATE }));
    const a = members[0]!;
    for (let round = 0; round < 2; round++) for (const m of members) await m.refresh();
    await redis.del(stateKey());
    (await a.acquire()).throttled(30_000); // the cut re-creates the state
    await a.flush();
    for (const m of members) await m.refresh();
    // Before: the cut, computed from the lost books, was `stale`; computed again as a budget
    // leaving "unlimited", from the local rate it had already cut (140 of a part of 1/3): 294,
    // and 98 each.
    expect({
      stored: await redis.hget(stateKey(), 'rate'),
      rates: members.map((m) => m.limiter.rate),
    }).toEqual({
      stored: '420',
      rates: [140, 140, 140],
    });
  });

  it('a shared pause lost with the state is written back by a member it paused: one that had not heard of it waits too', async () => {
    const clock = new ManualClock();
    const [a, b] = [0, 1].map(() => of(clock, { initialUnitsPerMinute: RATE })) as [
      SharedBudget,
      SharedBudget,
    ];
    for (let round = 0; round < 2; round++) for (const m of [a, b]) await m.refresh();
    (await a.acquire()).throttled(30_000); // a Retry-After of 30 s: every member pauses
    await a.flush();
    await redis.del(stateKey()); // lost before b heard of the pause

    clock.advance(1_000);
    await a.refresh(); // paused itself, it finds the state made again without the pause
    await a.flush();
    await b.refresh();
    const paused = b.snapshot().pausedUntil;
    const stored = Number(await redis.hget(stateKey(), 'pausedUntil'));
    const [seconds, micros] = await redis.time();
    const serverNow = Number(seconds) * 1_000 + Number(micros) / 1_000;
    // Before: the pause was gone with the state; b never heard of it and sent at once, 29 s
    // before the server's Retry-After had passed.
    expect({
      bPausedFor: paused === undefined ? 0 : Math.round((paused - clock.now()) / 1_000),
      bSends: b.tryAcquire() !== undefined,
      storedFor: Math.round((stored - serverNow) / 1_000),
    }).toEqual({ bPausedFor: 29, bSends: false, storedFor: 29 });
  });
});
