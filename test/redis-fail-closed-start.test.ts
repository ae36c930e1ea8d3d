import { expect, it } from 'vitest';
import type { SharedBudget, SharedBudgetOptions } from '../src/redis/index.js';
import { describeRedis, type RedisServer, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// `failClosed`: nothing is served before Redis has answered once, and nothing after close().

const { member } = sharedMembers('fail-closed-start', { failClosed: true }, ['degraded']);

function budget(redis: string, more: Partial<SharedBudgetOptions> = {}): SharedBudget {
  return member({ redis, ...more });
}

describeRedis('shared budget, failClosed: before Redis has answered', () => {
  // Nothing listens on 6399: Redis is down from the start.
  const DOWN = 'redis://127.0.0.1:6399';

  it("Redis down from the start, no initial rate: tryAcquire (the adapters' fast path) grants nothing", async () => {
    const b = budget(DOWN);
    let granted = 0;
    for (let i = 0; i < 1_000; i++) if (b.tryAcquire() !== undefined) granted++;
    await b.ready();
    expect(b.state.degraded).toBe(true);
    expect(granted).toBe(0);
  });

  it('Redis down from the start, lazy (as a budget from `shared` config): the first tryAcquire grants nothing', () => {
    const b = budget(DOWN, { lazy: true, initialUnitsPerMinute: 60_000 });
    expect(b.tryAcquire()).toBeUndefined();
  });
});

describeRedis('shared budget, failClosed: closing while an acquire waits for the first heartbeat', () => {
  let server: RedisServer;
  withRedisServer((started) => ({ server } = started), 6397);

  it('close() right after acquire(): the acquire is rejected as closed, not granted after close', async () => {
    const b = budget(server.url, { initialUnitsPerMinute: 600 });
    const pending = b.acquire();
    const closing = b.close();
    const outcome = await pending.then(
      () => 'granted',
      (error: unknown) => (error as { reason?: string }).reason ?? String(error),
    );
    await closing;
    expect(outcome).toBe('closed');
  });
});
