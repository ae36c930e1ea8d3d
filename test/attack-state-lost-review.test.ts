import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { MemoryBudgetStore, type SharedBudget } from '../src/redis/index.js';
import type { BudgetStore } from '../src/redis/store.js';
import { describeRedis, withRedisServer } from './helpers/redis-server.js';
import { heartbeatRequest, sharedMembers } from './helpers/shared-members.js';

// A review of the lost-:state commits (a member offers the rate it last knew to a state made
// again; a cut into a state with no rate is never stale; a lost shared pause is written back),
// on the memory store, which follows the Redis scripts' rules.

const { member, name } = sharedMembers('state-lost-review', { controller: 'aimd', decreaseCooldown: 0 }, [
  'degraded',
  'recovered',
  'repaired',
]);

/** One budget's memory store that can be lost (made again empty), seen by each member through a link that can be cut. */
class Room {
  inner: MemoryBudgetStore;
  constructor(readonly clock: ManualClock) {
    this.inner = new MemoryBudgetStore({ clock });
  }
  lose(): void {
    this.inner = new MemoryBudgetStore({ clock: this.clock });
  }
  /** A member's link to the store: every call throws while `down()`. */
  link(down: () => boolean = () => false): BudgetStore {
    const guard = <T>(call: () => T): T => {
      if (down()) throw new Error('partitioned from the store');
      return call();
    };
    return {
      roundTrips: 0,
      heartbeat: (r) => guard(() => this.inner.heartbeat(r)),
      cut: (r) => guard(() => this.inner.cut(r)),
      pause: (r) => guard(() => this.inner.pause(r)),
      leave: (id) => guard(() => this.inner.leave(id)),
    };
  }
}

/** The next permit of `b`, the clock moved on in steps of 50 ms until one comes. */
async function next(b: SharedBudget, clock: ManualClock) {
  for (let i = 0; i < 400; i++) {
    const permit = b.tryAcquire();
    if (permit !== undefined) return permit;
    clock.advance(50);
  }
  throw new Error('no permit in 20 s');
}

/** Every member takes every permit it can and each succeeds, for `forMs` (steps of 50 ms). */
function load(members: readonly SharedBudget[], clock: ManualClock, forMs: number): void {
  for (let t = 0; t < forMs; t += 50) {
    for (const m of members) for (let p = m.tryAcquire(); p !== undefined; p = m.tryAcquire()) p.success();
    clock.advance(50);
  }
}

describe('a lost :state made again from the rate a member last knew', () => {
  it('a member back from a partition does not seed the rate it knew before the others cut', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    // The budget has a rate of 6,000 (no member has initialUnitsPerMinute: it was learned).
    room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 6_000 }));
    room.inner.leave('seed');
    let partitioned = false;
    const a = member({ store: room.link(), clock });
    const b = member({ store: room.link(), clock });
    const c = member({ store: room.link(() => partitioned), clock });
    for (const m of [a, b, c]) await m.refresh();
    expect([a, b, c].map((m) => m.state.rate)).toEqual([6_000, 6_000, 6_000]);

    // c is cut off from the store (degraded); meanwhile a's 429s cut the budget hard, 4 times.
    partitioned = true;
    clock.advance(1_000); // c's heartbeat fails
    for (let i = 0; i < 4; i++) {
      (await next(a, clock)).throttled();
      await a.flush();
    }
    await b.refresh();
    const known = Math.round(a.state.rate ?? 0);
    expect({ known, cDegraded: c.state.degraded }).toEqual({ known: 1_441, cDegraded: true });

    // The state is lost (an eviction); c's link is back and c is heard first.
    room.lose();
    partitioned = false;
    await c.refresh();
    for (const m of [a, b, c]) await m.refresh();
    // Before: c offered the 6,000 it knew before its partition; the state was made again at it,
    // and every member took its share of 6,000 (4.2 times what a and b knew).
    expect(Math.round(room.inner.rate ?? 0)).toBe(known);
  });

  for (const [controller, seconds] of [
    ['aimd', 20],
    ['probe', 5],
  ] as const)
    it(`on its own timers, a member back from a partition leaves the state to the rate the others knew (${controller}, ${seconds} s)`, async () => {
      const clock = new ManualClock();
      const room = new Room(clock);
      room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 6_000 }));
      room.inner.leave('seed');
      let partitioned = false;
      const opts = { clock, controller, heartbeatInterval: 3_000 };
      const a = member({ store: room.link(), ...opts });
      const c = member({ store: room.link(() => partitioned), ...opts });
      for (const m of [a, c]) await m.refresh();
      partitioned = true;
      clock.advance(3_000); // c degraded, trying again every 250 ms
      for (let i = 0; i < 4; i++) {
        (await next(a, clock)).throttled();
        await a.flush();
      }
      const known = Math.round(a.state.rate ?? 0);
      room.lose();
      partitioned = false; // c is heard at its next try, before a's next heartbeat
      let highest = 0;
      for (let t = 0; t < seconds * 1_000; t += 50) {
        load([a, c], clock, 50);
        highest = Math.max(highest, Math.round(room.inner.rate ?? 0));
      }
      // Before: c's try back made the state again at the 6,000 it knew (aimd: 6,120 after 20 s;
      // probe: 12,000, its start-up doubling of it). Offering none at that try,
      // c still proposed from the 6,000 it kept at its next heartbeat, and its proposal replaced
      // the rate a had made the state again at (probe: 375 -> 12,000).
      // (Within these seconds: aimd one step above the rate known, probe one start-up doubling.)
      expect(highest).toBeLessThanOrEqual(controller === 'aimd' ? known + 120 : 2 * known);
    });

  // A member not degraded knows the rate of its last heartbeat; one of a slower heartbeat heard
  // first after a loss made the state again at a rate the others had cut since, and kept it: the
  // store, having heard only it, cannot know better until another member is heard, and then keeps
  // the lowest rate offered (a stale high rate only lowers, never raises, what the others knew).
  it('a member of a slower heartbeat heard first after a loss: the state takes the rate the others knew at their next heartbeat (was its own, 6,000)', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 6_000 }));
    room.inner.leave('seed');
    const a = member({ store: room.link(), clock, heartbeatInterval: 1_000 });
    const slow = member({ store: room.link(), clock, heartbeatInterval: 20_000, memberTimeout: 60_000 });
    for (const m of [a, slow]) await m.refresh();
    for (let i = 0; i < 4; i++) {
      (await next(a, clock)).throttled();
      await a.flush();
    }
    const known = Math.round(a.state.rate ?? 0);
    room.lose();
    await slow.refresh();
    await a.refresh();
    expect(Math.round(room.inner.rate ?? 0)).toBeLessThanOrEqual(known);
  });

  // Between its first heartbeat back (the state lost, no rate yet) and the rate coming back, a 429
  // of the member back from its partition cuts the state from the rate it knew before (6,000 ->
  // 4,200); that rate stays seeded, so the next heartbeat of a member that knew lowers it.
  it('a member back from a partition: its 429 before the rate is back leaves the rate the others knew at their next heartbeat (was 4,200, cut from its own 6,000)', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 6_000 }));
    room.inner.leave('seed');
    let partitioned = false;
    const a = member({ store: room.link(), clock });
    const c = member({ store: room.link(() => partitioned), clock });
    for (const m of [a, c]) await m.refresh();
    partitioned = true;
    clock.advance(1_000);
    for (let i = 0; i < 4; i++) {
      (await next(a, clock)).throttled();
      await a.flush();
    }
    const known = Math.round(a.state.rate ?? 0);
    room.lose();
    partitioned = false;
    await c.refresh();
    (await next(c, clock)).throttled();
    await c.flush();
    await a.refresh();
    expect(Math.round(room.inner.rate ?? 0)).toBeLessThanOrEqual(known);
  });

  it('a member back from a partition: its 429 after another member seeded the rate cuts from the lowest known (1,441 -> 1,008, not 6,000 -> 4,200)', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 6_000 }));
    room.inner.leave('seed');
    let partitioned = false;
    const a = member({ store: room.link(), clock });
    const c = member({ store: room.link(() => partitioned), clock });
    for (const m of [a, c]) await m.refresh();
    partitioned = true;
    clock.advance(1_000);
    for (let i = 0; i < 4; i++) {
      (await next(a, clock)).throttled();
      await a.flush();
    }
    room.lose();
    partitioned = false;
    await c.refresh(); // no rate yet: c keeps its share of the 6,000 it knew
    await a.refresh(); // seeds the 1,441 it knew
    (await next(c, clock)).throttled();
    await c.flush();
    expect(Math.round(room.inner.rate ?? 0)).toBe(1_008);
  });
});

describe('a lost :state while every member was cut off (a Redis restart)', () => {
  it('no member is unlimited on the way back, and the rate they knew comes back within a heartbeat', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 600 }));
    room.inner.leave('seed');
    let down = false;
    const all = [0, 1, 2].map(() => member({ store: room.link(() => down), clock }));
    for (const m of all) await m.refresh();
    down = true;
    clock.advance(1_000);
    expect(all.map((m) => m.state.degraded)).toEqual([true, true, true]);
    room.lose();
    down = false;
    const seen: number[] = [];
    for (let round = 0; round < 2; round++)
      for (const m of all) {
        await m.refresh();
        seen.push(...all.map((x) => x.limiter.rate));
      }
    expect({
      finite: seen.every(Number.isFinite),
      stored: room.inner.rate,
      rates: all.map((m) => m.limiter.rate),
    }).toEqual({
      finite: true,
      stored: 600,
      rates: [200, 200, 200],
    });
  });

  it('a 429 before the rate is back cuts from the rate the members knew: 600 -> 420, not from the one heard', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 600 }));
    room.inner.leave('seed');
    let down = false;
    const all = [0, 1, 2].map(() => member({ store: room.link(() => down), clock }));
    const [a] = all as [SharedBudget];
    load(all, clock, 5_000); // every member busy at its share
    down = true;
    load(all, clock, 1_000);
    room.lose();
    down = false;
    await a.refresh(); // one member heard after the restart: the state has no rate yet
    (await next(a, clock)).throttled();
    await a.flush();
    // Read as unlimited in its budget's controller (the rate kept in the member only), the cut
    // left "unlimited" from the accepted sum of the one member heard: 600 -> 101.
    expect(room.inner.rate).toBe(420);
  });
});

describe('a shared pause lost with the :state, written back', () => {
  /** ms left of `b`'s local pause, in whole seconds. */
  const pausedFor = (b: SharedBudget, clock: ManualClock) => {
    const until = b.snapshot().pausedUntil;
    return until === undefined ? 0 : Math.max(0, Math.round((until - clock.now()) / 1_000));
  };

  it('is written back only for what is left of it: lost 20 s into a 30 s pause, 10 s, not 30', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    const [a, b] = [0, 1].map(() => member({ store: room.link(), clock, initialUnitsPerMinute: 600 })) as [
      SharedBudget,
      SharedBudget,
    ];
    for (const m of [a, b]) await m.refresh();
    (await a.acquire()).throttled(30_000);
    await a.flush();
    clock.advance(20_000);
    room.lose();
    const c = member({ store: room.link(), clock, initialUnitsPerMinute: 600 }); // joins after the loss
    for (const m of [a, b, c]) await m.refresh();
    expect({ a: pausedFor(a, clock), b: pausedFor(b, clock), c: pausedFor(c, clock) }).toEqual({
      a: 10,
      b: 10,
      c: 10,
    });
  });

  it("a member's own 429 of a second (not shared) is not written back after a loss", async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    const [a, b] = [0, 1].map(() => member({ store: room.link(), clock, initialUnitsPerMinute: 600 })) as [
      SharedBudget,
      SharedBudget,
    ];
    for (const m of [a, b]) await m.refresh();
    (await a.acquire()).throttled(1_000); // its own pause: not shared
    await a.flush();
    room.lose();
    for (const m of [a, b]) await m.refresh();
    await a.flush();
    expect({ b: pausedFor(b, clock), stored: room.inner.generation !== undefined }).toEqual({
      b: 0,
      stored: true,
    });
  });

  it('a pause that ended is not written back, however often the state is lost', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    const [a, b] = [0, 1].map(() => member({ store: room.link(), clock, initialUnitsPerMinute: 600 })) as [
      SharedBudget,
      SharedBudget,
    ];
    for (const m of [a, b]) await m.refresh();
    (await a.acquire()).throttled(5_000);
    await a.flush();
    for (let i = 0; i < 4; i++) {
      clock.advance(2_000);
      room.lose();
      for (const m of [a, b]) await m.refresh();
      await a.flush();
      await b.flush();
    }
    expect({ a: pausedFor(a, clock), b: pausedFor(b, clock) }).toEqual({ a: 0, b: 0 });
  });

  it('two members writing back different pauses at once: the longer, as the store held it, no longer', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    const [a, b, c] = [0, 1, 2].map(() =>
      member({ store: room.link(), clock, initialUnitsPerMinute: 600 }),
    ) as [SharedBudget, SharedBudget, SharedBudget];
    for (const m of [a, b, c]) await m.refresh();
    (await a.acquire()).throttled(30_000);
    (await b.acquire()).throttled(10_000);
    for (const m of [a, b]) await m.flush();
    clock.advance(2_000);
    room.lose(); // before c heard of either
    for (const m of [a, b, c]) await m.refresh();
    for (const m of [a, b]) await m.flush();
    await c.refresh();
    const stored = Math.round((room.inner.pause({ ms: 0, ttl: 3_600_000 }) as number) / 1_000);
    expect({ stored, a: pausedFor(a, clock), b: pausedFor(b, clock), c: pausedFor(c, clock) }).toEqual({
      stored: 28,
      a: 28,
      b: 28,
      c: 28,
    });
  });
});

describeRedis('a lost :state made again, on a real redis-server', () => {
  let redis: Redis;
  const suite = withRedisServer((started) => ({ redis } = started));

  /** `inner` as seen by a member whose link to Redis fails while `down()`. */
  const linked = (inner: BudgetStore, down: () => boolean): BudgetStore => {
    const guard = <T>(call: () => T): T => {
      if (down()) throw new Error('partitioned from redis');
      return call();
    };
    return {
      roundTrips: 0,
      heartbeat: (r) => guard(() => inner.heartbeat(r)),
      cut: (r) => guard(() => inner.cut(r)),
      pause: (r) => guard(() => inner.pause(r)),
      leave: (id) => guard(() => inner.leave(id)),
    };
  };

  it('a member back from a partition, heard first after a FLUSHDB, does not seed the rate it knew before the others cut', async () => {
    const clock = new ManualClock();
    const seed = suite.store(name());
    await seed.heartbeat(heartbeatRequest('seed', { initialRate: 6_000 }));
    await seed.leave('seed');
    let partitioned = false;
    const a = member({ store: linked(suite.store(name()), () => false), clock });
    const c = member({ store: linked(suite.store(name()), () => partitioned), clock });
    for (const m of [a, c]) await m.refresh();
    partitioned = true;
    clock.advance(1_000);
    await c.refresh(); // fails: degraded
    for (let i = 0; i < 4; i++) {
      (await next(a, clock)).throttled();
      await a.flush();
    }
    const known = Math.round(a.state.rate ?? 0);
    await redis.flushdb();
    partitioned = false;
    await c.refresh();
    await a.refresh();
    await c.refresh();
    // Before: 6,000, c's rate from before its partition; each member's share of it.
    expect({ known, stored: Math.round(Number(await redis.hget(`arl:{${name()}}:state`, 'rate'))) }).toEqual({
      known: 1_441,
      stored: 1_441,
    });
  });
});

describe('a :state lost every second under load', () => {
  it('the rate does not drift upward: it stays at the rate known (probe controller, 60 s, a quota of 1,200)', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 600 }));
    room.inner.leave('seed');
    const all = [0, 1, 2].map(() => member({ store: room.link(), clock, controller: 'probe' }));
    const QUOTA = 1_200;
    let tokens = QUOTA / 30; // a bucket of 2 s
    let highest = 0;
    for (let t = 0; t < 60_000; t += 20) {
      tokens = Math.min(QUOTA / 30, tokens + (QUOTA / 60_000) * 20);
      for (const m of all)
        for (let p = m.tryAcquire(); p !== undefined; p = m.tryAcquire()) {
          if (tokens >= 1) {
            tokens -= 1;
            p.success();
          } else p.throttled(1_000);
        }
      if (t % 1_000 === 0) room.lose();
      highest = Math.max(highest, room.inner.rate ?? 0);
      clock.advance(20);
    }
    expect(highest).toBeLessThanOrEqual(600);
  });
});
