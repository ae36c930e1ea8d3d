import type { Redis } from 'ioredis';
import { afterEach, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { SharedBudget } from '../src/redis/index.js';
import { describeRedis, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// The state's counters (epoch, version) written beyond what a double counts exactly: the state is
// repaired (a fresh generation), and 429s go on cutting the shared rate.

const RATE = 600;
const errors: unknown[] = [];
const repairs: string[] = [];

// After the members are closed (the hooks after a test run last registered, first).
afterEach(() => {
  errors.length = 0;
  repairs.length = 0;
});

const { name, member } = sharedMembers('state-counters', { initialUnitsPerMinute: RATE }, []);

describeRedis('shared budget: counters beyond 2^53 in the state', () => {
  let url: string;
  let redis: Redis;
  withRedisServer((started) => {
    url = started.server.url;
    redis = started.redis;
  }, 6396);

  const stateKey = () => `arl:{${name()}}:state`;

  function budget(clock: ManualClock): SharedBudget {
    const b = member({
      redis: url,
      clock,
      heartbeatInterval: 60_000, // heartbeats only when the test asks (refresh)
      controller: 'aimd',
    });
    b.on('degraded', (e) => errors.push(e.error));
    b.on('repaired', (e) => repairs.push(...e.repaired));
    return b;
  }

  /** One 429 on a permit granted now; waits for the cut script. */
  async function throttleOnce(b: SharedBudget, clock: ManualClock): Promise<void> {
    clock.advance(5_000); // past any cooldown, units refilled
    const permit = b.tryAcquire();
    expect(permit).toBeDefined();
    permit!.throttled();
    await b.flush();
  }

  it.each([
    ['epoch', '1e19'],
    ['epoch', '99999999999999999999'],
    ['epoch', '1e17'],
    ['version', '1e19'],
    ['version', '9007199254740993'],
  ])(
    'HSET state %s %s: the state is repaired and later 429s still cut the shared rate',
    async (field, value) => {
      const clock = new ManualClock();
      const b = budget(clock);
      await b.refresh();
      await throttleOnce(b, clock);
      const cutOnce = Number(await redis.hget(stateKey(), 'rate'));
      expect(cutOnce).toBeLessThan(RATE); // a 429 cuts the shared rate

      await redis.hset(stateKey(), field, value);
      await b.refresh();
      await b.refresh();
      expect(b.state.degraded, String(errors[0])).toBe(false);
      // Past 2^63 Redis answered the counter as -2^63: every later cut was refused (sent in another
      // epoch) or stale (another version), for good, and nothing was repaired. Between 2^53 and
      // 2^63, +1 no longer moved it. Now the state fails its check: a fresh generation.
      expect(repairs).toContain(`${stateKey()} ${field}`);
      const fresh = Number(await redis.hget(stateKey(), 'rate'));
      await throttleOnce(b, clock);
      await b.refresh();
      expect(Number(await redis.hget(stateKey(), 'rate'))).toBeLessThan(fresh);
      expect(await redis.hget(stateKey(), 'epoch')).toBe('1');
      expect(await redis.hget(stateKey(), 'version')).toBe('1');
    },
  );
});
