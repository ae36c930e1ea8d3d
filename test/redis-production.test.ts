import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import {
  createSharedBudget,
  MemoryBudgetStore,
  type SharedBudget,
  type SharedBudgetOptions,
  SharedBudgetUnavailableError,
} from '../src/redis/index.js';
import { resolveSharedOptions } from '../src/redis/options.js';
import { RedisBudgetStore } from '../src/redis/redis-store.js';
import { PAUSE } from '../src/redis/scripts.js';
import type { BudgetStore } from '../src/redis/store.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';
import { describeRedis, RedisServer, waitFor, withRedisServer } from './helpers/redis-server.js';
import { heartbeatRequest, sharedMembers, storeDownWhile } from './helpers/shared-members.js';

// What production does to a shared budget's keys and connection, on a real redis-server: a
// counter in a form Lua reads and HINCRBY refuses, a failover that loses the last cut, members
// with different maxPause, thousands of members that died without leaving, a server whose clock
// is behind, a connection that goes silent. Each case failed before its fix.

const RATE = 600;
const { name: nameOf, member: make } = sharedMembers('prod', { initialUnitsPerMinute: RATE }, []);
const keys = () => {
  const tag = `arl:{${nameOf()}}`;
  return { state: `${tag}:state`, members: `${tag}:members`, reports: `${tag}:reports` };
};

function members(count: number, redis: string, clock: ManualClock, more: Partial<SharedBudgetOptions> = {}) {
  return Array.from({ length: count }, () => {
    const b = make({
      redis,
      clock,
      heartbeatInterval: 60_000, // heartbeats only when the test asks (refresh)
      controller: 'aimd',
      ...more,
    });
    for (const event of ['degraded', 'recovered', 'repaired'] as const) b.on(event, () => {});
    return b;
  });
}

async function beat(all: SharedBudget[]): Promise<void> {
  for (const b of all) await b.refresh();
}

/** A 429 to member `b` now (the cooldown passed on the manual clock and on the server's). */
async function throttle(b: SharedBudget, clock: ManualClock): Promise<void> {
  clock.advance(2_000);
  const permit = b.tryAcquire();
  expect(permit).toBeDefined();
  permit?.throttled();
  await b.flush();
}

/** A TCP proxy on 127.0.0.1 in front of Redis (a DNS name, a virtual IP); `route` joins each connection. */
async function proxy(route: (client: Socket) => void): Promise<{ port: number; close: () => void }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on('error', () => {});
    route(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    port,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

/** A budget reaching Redis through `port`, heartbeating every 50 ms, and the events it said. */
function through(port: number, more: Partial<SharedBudgetOptions> = {}) {
  const budget = make({
    redis: `redis://127.0.0.1:${port}`,
    heartbeatInterval: 50,
    controller: 'aimd',
    ...more,
  });
  const events: string[] = [];
  budget.on('degraded', () => events.push('degraded'));
  budget.on('recovered', () => events.push('recovered'));
  return { budget, events };
}

/** Two members sharing the budget (each heard twice), after one shared cut, heard again. */
async function cutOnce(redis: string, clock: ManualClock): Promise<SharedBudget[]> {
  const all = members(2, redis, clock, { decreaseCooldown: 0 });
  await beat(all);
  await beat(all);
  await throttle(all[0]!, clock);
  await beat(all);
  return all;
}

describeRedis('shared budget in production: what Redis holds after a failover, a restore, a crowd', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started));

  for (const value of ['1e3', '0x10', ' 7']) {
    it(`a counter Lua reads and HINCRBY refuses (version ${JSON.stringify(value)}): a cut is made whole, nobody degraded`, async () => {
      const clock = new ManualClock();
      const all = members(2, server.url, clock, { decreaseCooldown: 0 });
      await beat(all);
      await beat(all);
      await redis.hset(keys().state, 'version', value, 'cuts', value, 'acceptedSinceCut', value);
      const generation = all[0]!.state.generation;
      await throttle(all[0]!, clock);
      await beat(all);
      const state = await redis.hgetall(keys().state);
      expect(all.map((b) => b.state.degraded)).toEqual([false, false]);
      expect(all[0]!.state.generation).toBe(generation);
      expect(Number(state.epoch)).toBe(1);
      expect(Number(state.rate)).toBeLessThan(RATE);
      expect(Number(state.version)).toBe(Number(value) + 1); // the cut's change, written whole
      expect(Number(state.cuts)).toBe(Number(value) + 1);
    });
  }

  it('a failover to a replica that missed the last cut (same generation, a lower epoch): the next 429 cuts again', async () => {
    const clock = new ManualClock();
    const all = await cutOnce(server.url, clock);
    const replica = await redis.hgetall(keys().state); // what the replica holds: cut 1
    await throttle(all[1]!, clock);
    await beat(all);
    expect(Number(await redis.hget(keys().state, 'epoch'))).toBe(2);
    // The failover: the state as the replica had it, generation and all.
    await redis.del(keys().state);
    await redis.hset(keys().state, replica);
    await beat(all);
    expect(all.map((b) => b.state.epoch)).toEqual([1, 1]);
    const rate = Number(await redis.hget(keys().state, 'rate'));
    await throttle(all[0]!, clock);
    expect(Number(await redis.hget(keys().state, 'epoch'))).toBe(2);
    expect(Number(await redis.hget(keys().state, 'rate'))).toBeLessThan(rate);
  });

  it("members with different maxPause: a pause longer than one member's cap keeps the state, and each waits up to its own", async () => {
    const clock = new ManualClock();
    const [long, short] = [
      ...members(1, server.url, clock),
      ...members(1, server.url, clock, { maxPause: 30_000 }),
    ] as [SharedBudget, SharedBudget];
    await beat([long, short]);
    await beat([long, short]);
    const generation = long.state.generation;
    const permit = long.tryAcquire();
    permit?.failed(120_000); // a 503 with Retry-After: 120
    await long.flush();
    await beat([short, long]);
    expect(short.state.generation).toBe(generation);
    expect(Number(await redis.hget(keys().state, 'rate'))).toBe(RATE);
    expect(short.snapshot().pausedUntil).toBe(clock.now() + 30_000);
    expect(long.snapshot().pausedUntil).toBe(clock.now() + 120_000);
  });

  it('9,000 members that died without leaving (a fleet of short jobs): dropped, nobody degraded', async () => {
    const clock = new ManualClock();
    const [a] = members(1, server.url, clock);
    await a!.refresh();
    const dead: (string | number)[] = [];
    const reports: string[] = [];
    for (let i = 0; i < 9_000; i++) {
      dead.push(1, `gone-${i}`);
      reports.push(`gone-${i}`, '10 10 10');
    }
    await redis.zadd(keys().members, ...dead);
    await redis.hset(keys().reports, ...reports);
    await a!.refresh();
    expect(a!.state.degraded).toBe(false);
    expect(await redis.zcard(keys().members)).toBe(1);
    expect(await redis.hlen(keys().reports)).toBe(1);
  });

  it('a server whose clock is behind (its times read a minute ahead): the state and its learned rate are kept', async () => {
    const clock = new ManualClock();
    const all = await cutOnce(server.url, clock);
    const cut = Number(await redis.hget(keys().state, 'rate'));
    expect(cut).toBeLessThan(RATE);
    const generation = all[0]!.state.generation;
    const [seconds] = await redis.time();
    const ahead = Number(seconds) * 1_000 + 60_000;
    for (const field of ['lastChangeAt', 'lastCutAt', 'createdAt']) {
      await redis.hset(keys().state, field, String(ahead));
    }
    const ids = await redis.zrange(keys().members, '0', '-1');
    for (const id of ids) await redis.zadd(keys().members, String(ahead), id);
    await all[0]!.refresh();
    expect(all[0]!.state.generation).toBe(generation);
    expect(all[0]!.state.members).toBe(2);
    expect(Number(await redis.hget(keys().state, 'rate'))).toBe(cut);
    expect(Number(await redis.hget(keys().state, 'lastCutAt'))).toBeLessThan(ahead);
  });

  it('a connection that goes silent (the primary moved, no FIN): its own client connects again, and the budget recovers', async () => {
    let silent = false;
    let connections = 0;
    const silenced = new Set<Socket>();
    const front = await proxy((client) => {
      connections++;
      const upstream = connect(server.port, '127.0.0.1');
      if (!silent) silenced.add(client);
      const quiet = () => silent && silenced.has(client);
      client.on('data', (d) => (quiet() ? undefined : upstream.write(d)));
      upstream.on('data', (d) => (quiet() ? undefined : client.write(d)));
      upstream.on('error', () => {});
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    const { budget: b, events } = through(front.port, { redisTimeout: 200 });
    try {
      await b.ready();
      expect(b.state.degraded).toBe(false);
      silent = true; // the open connection's packets go nowhere; a new one gets through
      await waitFor('degraded', () => events.includes('degraded'));
      await waitFor('recovered', () => events.includes('recovered'));
      expect(connections).toBeGreaterThanOrEqual(2);
    } finally {
      await b.close();
      front.close();
    }
  });

  it('a pause held back past its redisTimeout (an outage, a frozen server) does nothing when it arrives', async () => {
    let holding = false;
    const held: Buffer[] = [];
    let upstream: Socket | undefined;
    const front = await proxy((client) => {
      const up = connect(server.port, '127.0.0.1');
      upstream = up;
      up.on('error', () => {});
      client.on('data', (d) => (holding ? held.push(d) : up.write(d)));
      up.on('data', (d) => client.write(d));
      client.on('close', () => up.end());
    });
    const store = new RedisBudgetStore({
      redis: `redis://127.0.0.1:${front.port}`,
      name: nameOf(),
      keyPrefix: 'arl:',
      redisTimeout: 200,
    });
    const heartbeat = () =>
      store.heartbeat(heartbeatRequest('a', { demand: 10, memberTimeout: 60_000, initialRate: RATE }));
    try {
      expect((await heartbeat()).pauseRemaining).toBe(0); // connected
      expect((await heartbeat()).pauseRemaining).toBe(0); // the server's clock learnt, on a warm connection
      await redis.script('LOAD', PAUSE); // cached: the held call is the pause itself, not a NOSCRIPT
      const serverNow = async () => {
        const [seconds, micros] = await redis.time();
        return Number(seconds) * 1_000 + Number(micros) / 1_000;
      };
      const sentAt = await serverNow();
      holding = true; // the pause's bytes wait in the proxy, as in a queue through an outage
      await expect(store.pause({ ms: 30_000, ttl: 3_600_000 })).rejects.toThrow(
        'no answer from Redis within 200 ms',
      );
      // Held until the server's clock is well past the call's deadline (its redisTimeout, plus half
      // a heartbeat's round trip, which a loaded machine makes long).
      await waitFor('the server clock past the deadline', async () => (await serverNow()) > sentAt + 1_000);
      holding = false;
      for (const d of held.splice(0)) upstream?.write(d); // the pause reaches Redis, late
      // The same connection: Redis runs this heartbeat after the late pause.
      expect((await heartbeat()).pauseRemaining).toBe(0);
      expect(await redis.hget(keys().state, 'pausedUntil')).toBeNull();
    } finally {
      await store.close();
      front.close();
    }
  });
});

describeRedis('shared budget in production: a primary demoted by a failover', () => {
  let first: RedisServer;
  let second: RedisServer;

  beforeAll(async () => {
    [first, second] = await Promise.all([RedisServer.start(), RedisServer.start()]);
  });
  afterAll(async () => {
    await Promise.all([first.stop(), second.stop()]);
  });

  it('the old primary, now a replica, answers READONLY while the address leads to the new one: connects again, recovers', async () => {
    let target = first.port; // where the budget's address leads
    const front = await proxy((client) => {
      const upstream = connect(target, '127.0.0.1');
      upstream.on('error', () => {});
      client.on('close', () => upstream.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
    });
    const { budget: b } = through(front.port);
    const [one, two] = [new Redis(first.url), new Redis(second.url)];
    try {
      await b.ready();
      await waitFor('a first answer', () => b.state.generation !== undefined);
      // The failover: the second promoted, the first made its replica, the address moved.
      await two.replicaof('NO', 'ONE');
      await one.replicaof('127.0.0.1', String(second.port));
      target = second.port;
      await waitFor('the first primary read-only', async () => (await one.role())[0] === 'slave');
      await waitFor('an answer from the new primary', async () => (await two.exists(keys().members)) === 1);
      // Its answer applied (a moment after the script ran there): sharing, not degraded.
      await waitFor('sharing again', () => !b.state.degraded);
    } finally {
      one.disconnect();
      two.disconnect();
      await b.close();
      front.close();
    }
  });
});

describe('shared budget back from an outage (a store in memory, on a manual clock)', () => {
  it('a 429 on the first member heard again never raises its rate: the members stay within the budget', async () => {
    const clock = new ManualClock();
    const memory = new MemoryBudgetStore({ clock });
    let down = false;
    const store = storeDownWhile(memory, () => down);
    const all = Array.from({ length: 3 }, () => {
      const b = make({
        name: 'rejoin',
        store,
        clock,
        controller: 'aimd',
        decreaseCooldown: 0,
        burst: 'second',
      });
      b.on('degraded', () => {});
      b.on('recovered', () => {});
      return b;
    });
    for (let i = 0; i < 4; i++) clock.advance(250);
    expect(all.map((b) => b.limiter.rate)).toEqual([200, 200, 200]);
    down = true;
    for (let i = 0; i < 40; i++) clock.advance(250); // 10 s: every member degraded, then dropped
    down = false;
    let first: SharedBudget | undefined;
    while (first === undefined) {
      clock.advance(10);
      first = all.find((b) => !b.state.degraded);
    }
    expect(first.state.members).toBe(1); // the others not heard yet: its answered share is the whole rate
    first.tryAcquire(1)?.throttled();
    expect(first.limiter.rate).toBeLessThanOrEqual(200);
    // The others, not heard yet, keep their last shares of the budget before the cut (one
    // heartbeat of lag): the three add up to no more than that budget.
    const sum = all.reduce((total, b) => total + b.limiter.rate, 0);
    expect(sum).toBeLessThanOrEqual(RATE);
  });
});

describe('shared budget failing closed (a store in memory, on a manual clock)', () => {
  it('acquires queued before the store went away are refused at their turn, as a new one is', async () => {
    const clock = new ManualClock();
    const memory = new MemoryBudgetStore({ clock });
    let down = false;
    const store: BudgetStore = {
      roundTrips: 0,
      heartbeat: (r) => {
        if (down) throw new Error('ECONNREFUSED');
        return memory.heartbeat(r);
      },
      cut: (r) => memory.cut(r),
      pause: (r) => memory.pause(r),
      leave: (id) => memory.leave(id),
    };
    const b = make({
      name: 'closed',
      store,
      clock,
      failClosed: true,
      initialUnitsPerMinute: 60,
    });
    b.on('degraded', () => {});
    await b.ready();
    const ends = Array.from({ length: 5 }, () =>
      b.acquire(1).then(
        () => 'granted',
        (error: Error) => error.name,
      ),
    );
    await new Promise((resolve) => setImmediate(resolve)); // in the local limiter's queue
    down = true;
    clock.advance(300); // the next heartbeat fails: degraded
    expect(b.state.degraded).toBe(true);
    await expect(b.acquire(1)).rejects.toThrow(SharedBudgetUnavailableError);
    for (let i = 0; i < 10; i++) {
      clock.advance(1_000);
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(await Promise.all(ends)).toEqual([
      'granted', // free at once, before the store went away
      ...Array(4).fill('SharedBudgetUnavailableError'),
    ]);
  });
});

const config900 = () => ({
  limiters: {
    api: { origins: ['https://api.test'], shared: { redis: 'redis://127.0.0.1', heartbeatInterval: '15m' } },
  },
});

describe('shared budget options that cannot share', () => {
  it('drops a member no sooner than a slow answer and two heartbeats after its last (1.5 s by default)', () => {
    expect(resolveSharedOptions({ redis: 'redis://127.0.0.1', name: 'x' }).memberTimeout).toBe(1_500);
    expect(
      resolveSharedOptions({ redis: 'redis://127.0.0.1', name: 'x', heartbeatInterval: 1_000 }).memberTimeout,
    ).toBe(4_000);
    expect(
      resolveSharedOptions({ redis: 'redis://127.0.0.1', name: 'x', memberTimeout: 300 }).memberTimeout,
    ).toBe(300);
  });

  it('refuses a memberTimeout within one heartbeat, and a stateTtl within memberTimeout, naming both', () => {
    const refused = (o: Partial<SharedBudgetOptions>) => {
      try {
        resolveSharedOptions({ redis: 'redis://127.0.0.1', name: 'x', ...o });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        return (error as ConfigError).issues;
      }
      throw new Error('accepted');
    };
    const [member] = refused({ heartbeatInterval: 500, memberTimeout: 400 });
    expect(member).toMatchObject({ path: 'memberTimeout', received: 400 });
    expect(member?.message).toContain('heartbeatInterval (500 ms)');
    const [ttl] = refused({ heartbeatInterval: 60_000, stateTtl: 30_000 });
    expect(ttl).toMatchObject({ path: 'stateTtl', received: 30_000 });
    expect(ttl?.message).toContain('memberTimeout (240000 ms)');
  });

  it('refuses them in JSON config when it is read, under the limiter, not at the first request', () => {
    const config = (shared: Record<string, unknown>) => ({
      limiters: { api: { origins: ['https://api.test'], shared: { redis: 'redis://127.0.0.1', ...shared } } },
    });
    const error = configError(() => parseConfig(config({ heartbeatInterval: '1s', memberTimeout: '900ms' })));
    expect(error.issues).toMatchObject([{ path: 'limiters.api.shared.memberTimeout', received: '900ms' }]);
    expect(() => new RateLimiterRegistry(config({ stateTtl: '1s' }))).toThrow(
      /limiters\.api\.shared\.stateTtl/,
    );
  });

  it('refuses several budgets (requests and tokens): one rate is leased, the others would run whole in every process', () => {
    const budgets = { requests: { initialUnitsPerMinute: 600 }, tokens: { initialUnitsPerMinute: 60_000 } };
    const error = configError(() =>
      createSharedBudget({ store: new MemoryBudgetStore(), name: 'x', budgets } as SharedBudgetOptions),
    );
    expect(error.issues.map((i) => i.path)).toEqual(['budgets']);
    expect(
      () =>
        new RateLimiterRegistry({
          limiters: {
            api: { origins: ['https://api.test'], budgets, shared: { redis: 'redis://127.0.0.1' } },
          },
        }),
    ).toThrow(/limiters\.api\.budgets: not with a shared budget/);
  });

  it("refuses burst: 'announced': every process would spend the API's whole bucket", () => {
    const error = configError(() =>
      createSharedBudget({ store: new MemoryBudgetStore(), name: 'x', burst: 'announced' }),
    );
    expect(error.issues.map((i) => i.path)).toEqual(['burst']);
  });

  it('a long heartbeat alone keeps the state long enough: stateTtl defaults to twice memberTimeout', () => {
    const { stateTtl, memberTimeout } = resolveSharedOptions({
      redis: 'redis://127.0.0.1',
      name: 'x',
      heartbeatInterval: 900_000,
    });
    expect(stateTtl).toBe(2 * memberTimeout);
    expect(parseConfig(config900()).limiters.api?.shared?.heartbeatInterval).toBe(900_000);
  });
});
