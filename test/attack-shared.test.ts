import { Redis } from 'ioredis';
import { afterEach, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { SharedBudget, SharedBudgetOptions } from '../src/redis/index.js';
import { describeRedis, type RedisServer, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// Attacks on the Redis-shared budget, each on a real redis-server and a ManualClock (heartbeats
// only when the test asks: `refresh`). Each test fails on the code it was written against.

const clients: Redis[] = [];

afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

const { name, member: budget } = sharedMembers(
  'attack',
  { heartbeatInterval: 60_000, controller: 'aimd' }, // heartbeats only when the test asks (refresh)
  ['degraded', 'recovered', 'repaired'],
);

function member(
  clock: ManualClock,
  options: Partial<SharedBudgetOptions> & Pick<SharedBudgetOptions, 'redis'>,
): SharedBudget {
  return budget({ clock, ...options });
}

const stateKey = () => `arl:{${name()}}:state`;

/** Takes permits until the local limiter says no (bounded): a request of this member waited. */
function drain(b: SharedBudget): void {
  for (let i = 0; i < 10_000; i++) if (b.tryAcquire() === undefined) return;
  throw new Error('never ran out of units');
}

describeRedis('attack: the Redis-shared budget', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started));

  it('an ioredis client of your own with stringNumbers: the members, the epoch and the shared pause are still learned', async () => {
    // ioredis's `stringNumbers: true` answers every integer reply as a string, inside a script's
    // array too. redis-store.ts knows of it (the pause's "-1"), but the heartbeat's integers
    // (epoch, pause, members, index, proposed, version, waited) go through as strings and
    // checkHeartbeat throws each away.
    const clock = new ManualClock();
    const own = new Redis(server.url, { stringNumbers: true, maxRetriesPerRequest: 0 });
    clients.push(own);
    const opts = { initialUnitsPerMinute: 6_000 };
    const a = member(clock, { redis: server.url, ...opts });
    const b = member(clock, { redis: own, ...opts });
    for (let round = 0; round < 2; round++) for (const m of [a, b]) await m.refresh();

    (await a.acquire()).throttled(30_000); // a cut (aimd: 0.7) and a shared pause of 30 s
    await a.flush();
    expect(Number(await redis.hget(stateKey(), 'epoch'))).toBe(1);
    await b.refresh();

    const paused = b.snapshot().pausedUntil;
    expect({
      degraded: b.state.degraded,
      members: b.state.members,
      epoch: b.state.epoch,
      rate: b.state.rate,
      paused: paused !== undefined && paused > clock.now(),
      canSendDuringSharedPause: b.tryAcquire() !== undefined,
    }).toEqual({
      degraded: false,
      members: 2,
      epoch: 1,
      rate: 4_200,
      paused: true,
      canSendDuringSharedPause: false,
    });
  });

  it('an ioredis client with stringNumbers: its 429s cut the budget', async () => {
    const clock = new ManualClock();
    const own = new Redis(server.url, { stringNumbers: true, maxRetriesPerRequest: 0 });
    clients.push(own);
    const b = member(clock, { redis: own, initialUnitsPerMinute: 6_000, decreaseCooldown: 0 });
    await b.refresh();
    for (let i = 0; i < 2; i++) {
      (await b.acquire()).throttled(); // sent after the last cut: each may cut
      await b.flush();
      await b.refresh();
      clock.advance(1_000);
    }
    // Two 429s, each sent after the cut before it: two cuts, 6,000 -> 4,200 -> 2,940. (None is
    // made: the books' version is answered as a string, read as -1, so every cut is "stale".)
    expect(Number(await redis.hget(stateKey(), 'cuts'))).toBe(2);
    expect(b.state.rate).toBeCloseTo(2_940);
  });

  it('a pauseBanked longer than the state has lived (HSET state pauseBanked 86400000): the CUBIC budget still climbs', async () => {
    // pauseBanked (ms of shared pause since the last cut) passes its check as any number >= 0; it
    // is never bounded by the time since that cut. CUBIC's t = since - pause is then 0 for a day:
    // the budget never rises again until a 429 (there may be none: it is below the quota).
    const climb = async (corrupt: boolean): Promise<number | undefined> => {
      const clock = new ManualClock();
      // A budget of its own for each run.
      const b = member(clock, {
        redis: server.url,
        name: name(corrupt ? 'attack-corrupt' : 'attack-clean'),
        controller: 'cubic',
        initialUnitsPerMinute: 600,
        maxUnitsPerMinute: 1_200,
      });
      await b.refresh();
      if (corrupt) await redis.hset(`arl:{${b.name}}:state`, 'pauseBanked', '86400000');
      await b.refresh();
      drain(b); // a request waited: CUBIC may raise the rate
      clock.advance(20_000);
      await b.refresh(); // carries the proposal made from the books aged 20 s
      const rate = (await b.refresh()).rate;
      await b.close();
      return rate;
    };
    expect(await climb(false)).toBe(1_200); // as the budget climbs without the write
    expect(await climb(true)).toBe(1_200);
  });

  it('the state lost (FLUSHALL) of a budget without an initial rate: the members share the rate they knew, no one unlimited', async () => {
    const clock = new ManualClock();
    const opts = { redis: server.url, maxUnitsPerMinute: 6_000 };
    const [a, b] = [member(clock, opts), member(clock, opts)];
    for (let round = 0; round < 2; round++) for (const m of [a, b]) await m.refresh();
    (await a.acquire()).throttled(); // the budget's first cut: it has a rate from now on
    await a.flush();
    for (const m of [a, b]) await m.refresh();
    const lostRate = a.state.rate;
    expect(lostRate).toBeDefined();

    await redis.flushall();
    for (let round = 0; round < 2; round++) for (const m of [a, b]) await m.refresh();
    const c = member(clock, opts); // a process that joins now
    await c.refresh();
    for (const m of [a, b]) await m.refresh();
    // The state is made again from the rate the members knew (their heartbeats offer it): the
    // process that joins now takes its share of it. (Before the fix before this one, the old
    // members kept their shares while the new one was unlimited; then all were unlimited again
    // until a 429, the budget unbounded.)
    const rates = [a, b, c].map((m) => m.limiter.rate);
    expect({ b: b.state.rate, c: c.state.rate, finite: rates.every(Number.isFinite) }).toEqual({
      b: lostRate,
      c: lostRate,
      finite: true,
    });
    expect(rates.reduce((s, r) => s + r, 0)).toBeLessThanOrEqual(lostRate! * 1.001);
  });

  it("a throwing 'members' listener (a metrics bug): the heartbeat's shared pause is still applied and the member is not degraded", async () => {
    const clock = new ManualClock();
    const opts = { redis: server.url, initialUnitsPerMinute: 6_000 };
    const [a, b] = [member(clock, opts), member(clock, opts)];
    for (let round = 0; round < 2; round++) for (const m of [a, b]) await m.refresh();
    b.on('members', () => {
      throw new Error('metrics bug');
    });
    await member(clock, opts).refresh(); // a third process joins
    const onWarning = (): void => {};
    process.on('warning', onWarning); // a fix may report the throw as a warning
    try {
      (await a.acquire()).throttled(30_000); // a shared pause of 30 s
      await a.flush();
      await b.refresh(); // learns 3 members (the listener throws) and the pause
      const paused = b.snapshot().pausedUntil;
      expect({
        degraded: b.state.degraded,
        paused: paused !== undefined && paused > clock.now(),
        canSendDuringSharedPause: b.tryAcquire() !== undefined,
      }).toEqual({ degraded: false, paused: true, canSendDuringSharedPause: false });
    } finally {
      process.off('warning', onWarning);
    }
  });
});
