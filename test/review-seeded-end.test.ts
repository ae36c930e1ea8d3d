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

  it('the :state evicted alone: a member back from a partition heard twice since does not end the seeding before a live member not heard since offers the 1,441 it knew (was 6,000)', async () => {
    const name = `seeded-evicted-${process.pid}`;
    const store = suite.store(name, 'arl-test:');
    const state = `arl-test:{${name}}:state`;
    const members = `arl-test:{${name}}:members`;
    await store.heartbeat(beat('a', { initialRate: 6_000 }));
    await store.heartbeat(beat('c', { initialRate: 6_000 }));
    // a beats every 10 s and knows 1,441 (its 429s, c partitioned meanwhile); a was heard a
    // second before the :state was evicted (allkeys-lru takes it alone; the members stay).
    const [seconds] = await redis.time();
    await redis.zadd(members, String(Number(seconds) * 1_000 - 1_000), 'a');
    await redis.del(state);
    await store.heartbeat(beat('c', { initialRate: undefined })); // back: offers none
    await store.heartbeat(beat('c', { initialRate: 6_000 })); // the 6,000 it knew: seeded
    await store.heartbeat(beat('c', { initialRate: 6_000 })); // heard again since
    expect((await store.heartbeat(beat('a', { initialRate: 1_441 }))).rate).toBe(1_441);
  });

  it('the :state evicted alone: the proposal of a member back from a partition, from the 6,000 it seeded, does not end the seeding before a live member not heard since offers the 1,441 it knew', async () => {
    const name = `seeded-proposal-${process.pid}`;
    const store = suite.store(name, 'arl-test:');
    const state = `arl-test:{${name}}:state`;
    const members = `arl-test:{${name}}:members`;
    await store.heartbeat(beat('a', { initialRate: 6_000 }));
    await store.heartbeat(beat('c', { initialRate: 6_000 }));
    const [seconds] = await redis.time();
    await redis.zadd(members, String(Number(seconds) * 1_000 - 1_000), 'a');
    await redis.del(state);
    await store.heartbeat(beat('c', { initialRate: undefined })); // back: offers none
    const seeded = await store.heartbeat(beat('c', { initialRate: 6_000 })); // seeded at 6,000
    const proposal = { generation: seeded.generation, version: seeded.books?.version ?? 0, rate: 6_120 };
    expect((await store.heartbeat(beat('c', { initialRate: 6_000, proposal }))).proposed).toBe(true);
    expect((await store.heartbeat(beat('a', { initialRate: 1_441 }))).rate).toBe(1_441);
  });
});

const { member } = sharedMembers('seeded-end-review', { controller: 'aimd', decreaseCooldown: 0 }, [
  'degraded',
  'recovered',
  'repaired',
]);

/** One budget's memory store that can be lost (made again empty), seen through links that can be cut. */
class Room {
  inner: MemoryBudgetStore;
  constructor(readonly clock: ManualClock) {
    this.inner = new MemoryBudgetStore({ clock });
  }
  lose(): void {
    this.inner = new MemoryBudgetStore({ clock: this.clock });
  }
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

/** A member's 429 cut from the 6,000 it knew to 4,200, from the books at `from`. */
function cutFrom6000(store: BudgetStore, from: { generation: string; version: number }) {
  return store.cut({
    sentEpoch: 0,
    from,
    rate: 4_200,
    rateBefore: 6_000,
    measured: undefined,
    record: { rateBefore: 6_000, acceptedRate: 6_000, acceptedRateSincePrevious: undefined },
    random: 0.25,
    cooldown: 0,
    minRate: 1,
    maxRate: undefined,
    ttl: HOUR,
  });
}

async function next(b: SharedBudget, clock: ManualClock) {
  for (let i = 0; i < 400; i++) {
    const permit = b.tryAcquire();
    if (permit !== undefined) return permit;
    clock.advance(50);
  }
  throw new Error('no permit in 20 s');
}

describeRedis(
  'a seeded state, a live member not heard since it began (Redis store, as the memory store)',
  () => {
    let redis: Redis;
    const suite = withRedisServer((started) => {
      redis = started.redis;
    });

    it('a cut seeds a state with no rate; a proposal and a member heard twice since do not end it before the member heard only before offers 1,441', async () => {
      const name = `seeded-cut-${process.pid}`;
      const store = suite.store(name, 'arl-test:');
      await store.heartbeat(beat('a', { initialRate: undefined }));
      const c0 = await store.heartbeat(beat('c', { initialRate: undefined }));
      // a and c were heard a second before c's cut (the server's time does not move here).
      const [seconds] = await redis.time();
      for (const id of ['a', 'c'])
        await redis.zadd(`arl-test:{${name}}:members`, String(Number(seconds) * 1_000 - 1_000), id);
      const cut = await cutFrom6000(store, { generation: c0.generation, version: c0.books?.version ?? 0 });
      const proposal = { generation: cut.generation, version: cut.books?.version ?? 0, rate: 4_300 };
      expect((await store.heartbeat(beat('c', { initialRate: 6_000, proposal }))).proposed).toBe(true);
      await store.heartbeat(beat('c', { initialRate: 6_000 })); // heard since, again
      expect((await store.heartbeat(beat('a', { initialRate: 1_441 }))).rate).toBe(1_441);
    });
  },
);

describe('a seeded state, a live member not heard since it began (memory store)', () => {
  it('a member heard twice since the seeding does not end it before the member heard only before offers its lower rate', async () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    await store.heartbeat(beat('a', { initialRate: undefined }));
    const c0 = await store.heartbeat(beat('c', { initialRate: undefined }));
    clock.advance(1_000);
    // A state with no rate: c's cut seeds it (from c's 6,000 to 4,200).
    const cut = await cutFrom6000(store, { generation: c0.generation, version: c0.books?.version ?? 0 });
    expect(cut.cut).toBe(true);
    for (let i = 0; i < 2; i++) {
      clock.advance(1_000);
      await store.heartbeat(beat('c', { initialRate: 6_000 })); // the second: heard since it began
    }
    clock.advance(1_000);
    expect((await store.heartbeat(beat('a', { initialRate: 1_441 }))).rate).toBe(1_441);
  });

  it('a proposal from the rate seeded does not end it before the member heard only before offers its lower rate', async () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    await store.heartbeat(beat('a', { initialRate: undefined }));
    const c0 = await store.heartbeat(beat('c', { initialRate: undefined }));
    clock.advance(1_000);
    const cut = await cutFrom6000(store, { generation: c0.generation, version: c0.books?.version ?? 0 });
    clock.advance(1_000);
    const proposal = { generation: cut.generation, version: cut.books?.version ?? 0, rate: 4_300 };
    expect((await store.heartbeat(beat('c', { initialRate: 6_000, proposal }))).proposed).toBe(true);
    clock.advance(1_000);
    expect((await store.heartbeat(beat('a', { initialRate: 1_441 }))).rate).toBe(1_441);
  });
});

/** The rate after c's 429 (6,000 -> 4,200, from the stale rate it knew) and a's offer of 1,441, in `order`. */
async function cutAndOffer(order: 'cut first' | 'offer first'): Promise<number | undefined> {
  const store = new MemoryBudgetStore({ clock: new ManualClock() });
  const seeded = await store.heartbeat(beat('c', { initialRate: 6_000, minRate: 1 }));
  const offer = () => store.heartbeat(beat('a', { initialRate: 1_441, minRate: 1 }));
  const cut = async () => {
    const at = await store.heartbeat(beat('b', { initialRate: undefined, minRate: 1 }));
    return cutFrom6000(store, { generation: seeded.generation, version: at.books?.version ?? 0 });
  };
  if (order === 'cut first') {
    await cut();
    await offer();
  } else {
    await offer();
    await cut();
  }
  return Math.round((await store.heartbeat(beat('b', { initialRate: undefined, minRate: 1 }))).rate ?? 0);
}

describe('a seeded state: a 429 from a stale rate and a lower rate offered, in either order (memory store)', () => {
  // Not fixed: the same two events leave 1,441 when the 429 reaches the store first (the lower
  // offer replaces the cut rate: the 429's factor is lost) and 1,009 when the offer does (the cut
  // is taken from it by the member's factor). Making them agree needs the seeded base the cuts
  // were taken from kept beside the rate (a new :state field on both stores).
  it.fails('cut then offer leaves what offer then cut leaves (known: 1,441 against 1,009)', async () => {
    expect(await cutAndOffer('offer first')).toBe(1_009);
    expect(await cutAndOffer('cut first')).toBe(1_009);
  });
});

describe('a seeded state whose stale member beats faster than the others (memory store)', () => {
  // Not fixed: the state is lost with the members (the memory store, a Redis restart), so the store
  // knows no member not heard since the seeding began; c, beating 10 times as often as a, is heard
  // again (and may propose) before a offers the 1,441 it knew. A fix needs the member back from
  // its outage to hold back the rate it knew before it (it still offers it at its second heartbeat
  // back, which a Redis restart where every member was cut off needs).
  it.fails('a member back from a partition, beating every second, leaves the state to the 1,441 a member beating every 10 s knew (known: its own 6,000 stays)', async () => {
    const clock = new ManualClock();
    const room = new Room(clock);
    room.inner.heartbeat(heartbeatRequest('seed', { initialRate: 6_000 }));
    room.inner.leave('seed');
    let partitioned = false;
    const a = member({ store: room.link(), clock, heartbeatInterval: 10_000, memberTimeout: 30_000 });
    const c = member({
      store: room.link(() => partitioned),
      clock,
      heartbeatInterval: 1_000,
      memberTimeout: 30_000,
    });
    for (const m of [a, c]) await m.refresh();
    partitioned = true;
    clock.advance(1_000); // c's heartbeat fails: degraded
    for (let i = 0; i < 4; i++) {
      (await next(a, clock)).throttled();
      await a.flush();
    }
    const known = Math.round(a.state.rate ?? 0);
    expect({ known, cDegraded: c.state.degraded }).toEqual({ known: 1_441, cDegraded: true });
    room.lose();
    partitioned = false;
    // On their own timers, until a's next heartbeat: c is back at once (none offered), offers its
    // 6,000 a second later (seeded) and is heard again a second after (the seeding ends).
    for (let t = 0; t < 10_000; t += 50) {
      clock.advance(50);
      await Promise.resolve();
    }
    await a.refresh();
    expect(Math.round(room.inner.rate ?? 0)).toBeLessThanOrEqual(known);
  });
});
