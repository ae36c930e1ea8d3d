import { afterEach, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { SharedBudget, SharedBudgetOptions } from '../src/redis/index.js';
import { describeRedis, type RedisServer, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// Durations the options check accepts must work against a real Redis (or be refused at creation).

const RATE = 600;
const errors: unknown[] = [];

// After the members are closed (the hooks after a test run last registered, first).
afterEach(() => {
  errors.length = 0;
});

const { member } = sharedMembers('option-bounds', { initialUnitsPerMinute: RATE }, []);

describeRedis('shared budget: durations at the edge of what Node and Redis take', () => {
  let server: RedisServer;
  withRedisServer((started) => ({ server } = started), 6395);

  function budget(more: Partial<SharedBudgetOptions>): SharedBudget {
    const b = member({
      redis: server.url,
      clock: new ManualClock(),
      heartbeatInterval: 60_000, // heartbeats only when the test asks (refresh)
      ...more,
    });
    b.on('degraded', (e) => errors.push(e.error));
    return b;
  }

  it('stateTtl with a fraction of a ms is rounded up: the budget shares, its heartbeats are not all refused by PEXPIRE', async () => {
    const b = budget({ stateTtl: 3_600_000.5 });
    await b.refresh();
    await b.refresh();
    expect(b.state.degraded, String(errors[0])).toBe(false);
    expect(b.state.rate).toBe(RATE);
  });

  it('a memberTimeout with a fraction of a ms (its default stateTtl, twice it, too) is rounded up: the budget shares', async () => {
    const b = budget({ memberTimeout: 1_800_000.25 });
    await b.refresh();
    await b.refresh();
    expect(b.state.degraded, String(errors[0])).toBe(false);
    expect(b.state.rate).toBe(RATE);
  });

  it('stateTtl of 1e20 ms, beyond a whole number of ms, is a ConfigError naming stateTtl and the value', () => {
    expect(() => budget({ stateTtl: 1e20 })).toThrow(
      expect.objectContaining({
        name: 'ConfigError',
        message: expect.stringMatching(/stateTtl[\s\S]*100000000000000000000/),
      }),
    );
  });

  it('redisTimeout above 2^31-1 ms is clamped as the clock clamps its timers: calls are not all timed out at once', async () => {
    const b = member({ redis: server.url, redisTimeout: 2 ** 31 });
    b.on('degraded', (e) => errors.push(e.error));
    await b.ready();
    await b.refresh();
    await b.refresh();
    await b.refresh();
    expect(b.state.degraded, String(errors[0])).toBe(false);
    expect(errors).toEqual([]);
  });
});
