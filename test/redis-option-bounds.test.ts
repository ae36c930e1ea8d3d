import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { createSharedBudget, type SharedBudget } from '../src/redis/index.js';
import { describeRedis, RedisServer } from './helpers/redis-server.js';

// Durations the options check accepts must work against a real Redis (or be refused at creation).

const RATE = 600;
let names = 0;
const open: SharedBudget[] = [];
const errors: unknown[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((b) => b.close()));
  errors.length = 0;
  names++;
});

describeRedis('shared budget: durations at the edge of what Node and Redis take', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start(6395);
  });
  afterAll(async () => {
    await server?.stop();
  });

  const name = () => `option-bounds-${process.pid}-${names}`;

  it('redisTimeout above 2^31-1 ms is clamped as the clock clamps its timers: calls are not all timed out at once', async () => {
    const b = createSharedBudget({
      redis: server.url,
      name: name(),
      initialUnitsPerMinute: RATE,
      redisTimeout: 2 ** 31,
    });
    b.on('degraded', (e) => errors.push(e.error));
    open.push(b);
    await b.ready();
    await b.refresh();
    await b.refresh();
    await b.refresh();
    expect(b.state.degraded, String(errors[0])).toBe(false);
    expect(errors).toEqual([]);
  });
});
