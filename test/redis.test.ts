import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { ConfigError } from '../src/errors.js';
import {
  createSharedBudget,
  type SharedBudget,
  type SharedBudgetOptions,
  SharedBudgetUnavailableError,
} from '../src/redis/index.js';
import {
  describeRedis,
  freePort,
  RedisServer,
  sharedMembers,
  waitFor,
  withRedisServer,
} from './helpers/redis-server.js';

const { member } = sharedMembers('test', { heartbeatInterval: 50, controller: 'aimd' }, [
  'degraded',
  'recovered',
]);

function budget(options: Partial<SharedBudgetOptions> & Pick<SharedBudgetOptions, 'redis'>): SharedBudget {
  return member(options);
}

describeRedis('shared budget on a real Redis', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started));

  it('validates its options at once, naming the field', () => {
    expect(() => createSharedBudget({ redis: server.url, name: '' })).toThrow(ConfigError);
    expect(() => createSharedBudget({ redis: server.url, name: 'x', heartbeatInterval: -1 })).toThrow(
      /heartbeatInterval/,
    );
    expect(() =>
      createSharedBudget({ redis: server.url, name: 'x', minUnitsPerMinute: 10, initialUnitsPerMinute: 5 }),
    ).toThrow(/initialUnitsPerMinute/);
  });

  it('derives the members from heartbeats and drops one that dies within a few heartbeats', async () => {
    const opts = { redis: server.url, memberTimeout: 300 };
    const a = budget(opts);
    const b = budget(opts);
    const client = new Redis(server.url, { maxRetriesPerRequest: 0 });
    const c = budget({ ...opts, redis: client });
    await waitFor('3 members', () => [a, b, c].every((x) => x.state.members === 3));

    client.disconnect(); // c can no longer heartbeat: to the others it is dead
    await waitFor('2 members', () => a.state.members === 2 && b.state.members === 2);
    expect(c.state.degraded).toBe(true);

    await a.close(); // a clean close leaves at once
    const state = await b.refresh();
    expect(state.members).toBe(1);
  });

  it('cuts the shared rate once for a burst sent before the cut, then again for a later request', async () => {
    const opts = {
      redis: server.url,
      initialUnitsPerMinute: 600,
      decreaseCooldown: 0,
      heartbeatInterval: 5_000,
    };
    const members = [budget(opts), budget(opts), budget(opts)];
    for (const m of members) await m.refresh();
    for (const m of members) await m.refresh();
    expect(members.map((m) => m.state.members)).toEqual([3, 3, 3]);
    expect(members[0]!.state.share).toBeCloseTo(200);

    const burst = await Promise.all(members.map((m) => m.acquire()));
    burst[0]!.throttled();
    await members[0]!.flush();
    burst[1]!.throttled();
    burst[2]!.throttled();
    await Promise.all(members.map((m) => m.flush()));

    const key = `arl:{${members[0]!.name}}:state`;
    expect(Number(await redis.hget(key, 'cuts'))).toBe(1);
    expect(Number(await redis.hget(key, 'rate'))).toBeCloseTo(420);
    for (const m of members) expect((await m.refresh()).rate).toBeCloseTo(420);
    // Each member's local rate is its share of the cut budget, the refused local cuts undone.
    for (const m of members) expect(m.limiter.rate).toBeCloseTo(140);

    const later = await members[1]!.acquire();
    later.throttled();
    await members[1]!.flush();
    expect(Number(await redis.hget(key, 'cuts'))).toBe(2);
    expect(Number(await redis.hget(key, 'rate'))).toBeCloseTo(294);
  });

  it('cuts the shared rate again after the shared state is lost (a restart, a FLUSHALL)', async () => {
    const opts = {
      redis: server.url,
      initialUnitsPerMinute: 600,
      decreaseCooldown: 0,
      heartbeatInterval: 5_000,
    };
    const members = [budget(opts), budget(opts), budget(opts)];
    for (const m of members) await m.refresh();
    const key = `arl:{${members[0]!.name}}:state`;
    const throttle = async (m: SharedBudget) => {
      (await m.acquire()).throttled();
      await m.flush();
    };
    for (let i = 0; i < 3; i++) await throttle(members[0]!);
    expect(Number(await redis.hget(key, 'cuts'))).toBe(3);
    for (const m of members) expect((await m.refresh()).epoch).toBe(3);

    await redis.flushall(); // the store's epoch is 0 again; the members knew 3
    for (const m of members) await m.refresh();
    for (const m of members) expect(m.state).toMatchObject({ epoch: 0, rate: 600 });
    for (let i = 0; i < 3; i++) await throttle(members[1]!);
    expect(Number(await redis.hget(key, 'cuts'))).toBe(3);
    expect(Number(await redis.hget(key, 'rate'))).toBeCloseTo(600 * 0.7 ** 3);
    for (const m of members) expect((await m.refresh()).rate).toBeCloseTo(600 * 0.7 ** 3);
  });

  it('pauses every member when one sees a Retry-After', async () => {
    const opts = { redis: server.url, initialUnitsPerMinute: 6_000, heartbeatInterval: 5_000 };
    const [a, b, c] = [budget(opts), budget(opts), budget(opts)];
    for (const m of [a, b, c]) await m.refresh();

    const permit = await a.acquire();
    permit.throttled(30_000);
    await a.flush();
    expect(a.snapshot().pausedUntil).toBeDefined();
    expect(b.tryAcquire()).toBeDefined(); // b has not heard yet: one heartbeat of lag

    await b.refresh();
    await c.refresh();
    expect(b.snapshot().pausedUntil).toBeDefined();
    expect(c.snapshot().pausedUntil).toBeDefined();
    expect(c.tryAcquire()).toBeUndefined();
  });

  it.each([
    ['a Retry-After of a second pauses only the member it answered', 1_000, false],
    ['a longer Retry-After pauses every member', 2_000, true],
  ] as const)('once the budget has a rate, %s', async (_name, retryAfter, othersPaused) => {
    const opts = { redis: server.url, initialUnitsPerMinute: 6_000, heartbeatInterval: 5_000 };
    const [a, b, c] = [budget(opts), budget(opts), budget(opts)];
    for (const m of [a, b, c]) await m.refresh();
    for (const m of [a, b, c]) await m.refresh();
    const key = `arl:{${a.name}}:state`;

    (await a.acquire()).throttled(retryAfter);
    await a.flush();
    expect(a.snapshot().pausedUntil).toBeDefined(); // the member answered waits what it was asked
    await b.refresh();
    await c.refresh();
    // Every member has the cut (aimd: 0.7 of 6,000) and sends its part of it.
    for (const m of [a, b, c]) expect(m.state.rate).toBeCloseTo(4_200);
    expect(b.limiter.rate).toBeCloseTo(1_400);
    expect(Number(await redis.hget(key, 'pausedUntil')) > 0).toBe(othersPaused);
    for (const m of [b, c]) expect(m.snapshot().pausedUntil !== undefined).toBe(othersPaused);
    expect(c.tryAcquire() === undefined).toBe(othersPaused);
  });

  it('a Retry-After of a second still pauses every member while the budget has no rate, and on a failure', async () => {
    const unlimited = [budget({ redis: server.url, heartbeatInterval: 5_000 })];
    unlimited.push(budget({ redis: server.url, heartbeatInterval: 5_000 }));
    for (const m of unlimited) await m.refresh();
    (await unlimited[0]!.acquire()).throttled(1_000);
    await unlimited[0]!.flush();
    await unlimited[1]!.refresh();
    expect(unlimited[1]!.snapshot().pausedUntil).toBeDefined();

    const opts = {
      redis: server.url,
      name: `${unlimited[0]!.name}-failed`,
      initialUnitsPerMinute: 6_000,
      heartbeatInterval: 5_000,
    };
    const [a, b] = [budget(opts), budget(opts)];
    for (const m of [a, b]) await m.refresh();
    (await a.acquire()).failed(1_000); // a 503 with Retry-After: no cut, every member waits
    await a.flush();
    await b.refresh();
    expect(b.snapshot().pausedUntil).toBeDefined();
  });

  it('gives a busy member a larger share than an idle one', async () => {
    const opts = { redis: server.url, initialUnitsPerMinute: 600, heartbeatInterval: 5_000 };
    const idle = budget(opts);
    const busy = budget(opts);
    await idle.refresh();
    await busy.refresh();
    const waiting = Array.from({ length: 30 }, () => busy.acquire().catch(() => undefined));
    await busy.refresh();
    await idle.refresh();
    const busyShare = busy.state.share ?? 0;
    const idleShare = idle.state.share ?? 0;
    expect(busyShare).toBeGreaterThan(4 * idleShare);
    expect(busyShare + idleShare).toBeCloseTo(600, 0);
    await busy.close();
    await Promise.all(waiting);
  });
});

describeRedis('shared budget when Redis fails', () => {
  it('serves from the local share when Redis is down at start, and says so once', async () => {
    const port = await freePort();
    const b = budget({ redis: `redis://127.0.0.1:${port}`, initialUnitsPerMinute: 6_000, redisTimeout: 200 });
    const degraded: unknown[] = [];
    b.on('degraded', (e) => degraded.push(e));
    await b.ready();
    const permits = await Promise.all(Array.from({ length: 20 }, () => b.acquire()));
    for (const p of permits) p.success();
    await sleep(200);
    expect(b.state.degraded).toBe(true);
    expect(degraded).toHaveLength(1);
  });

  it('rejects instead when failClosed is set', async () => {
    const port = await freePort();
    const b = budget({ redis: `redis://127.0.0.1:${port}`, failClosed: true, redisTimeout: 200 });
    await expect(b.acquire()).rejects.toBeInstanceOf(SharedBudgetUnavailableError);
    expect(b.tryAcquire()).toBeUndefined();
  });

  it('keeps each member at its last share when Redis is killed mid-run, loses and hangs no request, and resumes sharing', async () => {
    const server = await RedisServer.start();
    const opts = { redis: server.url, initialUnitsPerMinute: 12_000, redisTimeout: 200 };
    const [busy, light] = [budget(opts), budget(opts)] as [SharedBudget, SharedBudget];
    try {
      const events: string[] = [];
      for (const m of [busy, light]) {
        m.on('degraded', () => events.push('degraded'));
        m.on('recovered', () => events.push('recovered'));
      }
      await waitFor('2 members', () => [busy, light].every((m) => m.state.members === 2));

      let done = 0;
      let stop = false;
      /** `lanes` requests at once, each a success, until `stop`, or `n` in all when given. */
      const run = async (m: SharedBudget, lanes: number, pause = 0): Promise<void> => {
        await Promise.all(
          Array.from({ length: lanes }, async () => {
            while (!stop) {
              (await m.acquire()).success();
              done++;
              if (pause > 0) await sleep(pause);
            }
          }),
        );
      };
      // The busy member has a backlog; the light one sends a request every 50 ms or so.
      const running = Promise.all([run(busy, 20), run(light, 1, 50)]);
      await waitFor('uneven shares', () => (busy.state.share ?? 0) > 3 * (light.state.share ?? 0));
      await server.kill();
      await waitFor('both degraded', () => busy.state.degraded && light.state.degraded);
      // Each keeps its last share: the busy one the larger part, and the two still add up to the rate.
      for (const m of [busy, light]) expect(Math.abs(m.limiter.rate / m.state.share! - 1)).toBeLessThan(0.01);
      expect(busy.limiter.rate).toBeGreaterThan(3 * light.limiter.rate);
      // Each share is from its own last heartbeat, with the demands of then (docs/redis.md: while
      // the demands move, the shares add up to a little more or less than the rate).
      expect(Math.abs((busy.state.share! + light.state.share!) / 12_000 - 1)).toBeLessThan(0.1);
      const before = done;
      await waitFor('requests served while degraded', () => done >= before + 100);
      expect(events.filter((e) => e === 'degraded')).toHaveLength(2);

      await server.restart();
      await waitFor('sharing resumed', () =>
        [busy, light].every((m) => !m.state.degraded && m.state.members === 2),
      );
      expect(events.filter((e) => e === 'recovered')).toHaveLength(2);
      stop = true;
      await running; // every request of every lane ended with a permit: none lost, none hanging
      for (const m of [busy, light]) expect((await m.refresh()).members).toBe(2);
      expect(busy.snapshot().queued + light.snapshot().queued).toBe(0);
    } finally {
      // Closed before the server stops.
      await Promise.all([busy, light].map((b) => b.close()));
      await server.stop();
    }
  });
});
