import { Redis } from 'ioredis';
import { expect, it, vi } from 'vitest';
import { ConfigError } from '../src/errors.js';
import { createSharedBudget } from '../src/redis/index.js';
import { describeRedis, type RedisServer, waitFor, withRedisServer } from './helpers/redis-server.js';

// `redis://host:port/99`, a database beyond the server's (16 by default: 0-15), passes the URL
// check: only Redis knows. ioredis reports the refused SELECT as an 'error' event and goes on in
// database 0. Regression: the budget swallowed that event, ran its scripts in database 0 (its keys
// mixed with another budget's) and never said so: no `degraded` event, every acquire granted,
// failClosed too. Now every acquire, fail-open or closed, ends with a ConfigError naming `redis`
// and the database, so does the `degraded` event, and nothing is written to database 0.

describeRedis("a shared budget whose Redis refuses the URL's database", () => {
  let server: RedisServer;
  const { closeAfter } = withRedisServer((started) => ({ server } = started));

  const refusal = (error: unknown) => {
    expect(error).toBeInstanceOf(ConfigError);
    const config = error as ConfigError;
    expect(config.issues.map((i) => i.path)).toEqual(['redis']);
    expect(config.message).toMatch(
      /redis: Redis refused database 99 \(SELECT 99: ERR DB index is out of range\)/,
    );
  };

  it.each([
    ['fail-open (the default)', false],
    ['failClosed', true],
  ])(
    '%s: the degraded event and every acquire end with a ConfigError naming redis and 99',
    async (_c, closed) => {
      const budget = closeAfter(
        createSharedBudget({
          redis: `${server.url}/99`,
          name: `db99-${closed}`,
          heartbeatInterval: 50,
          redisTimeout: 500,
          failClosed: closed,
        }),
      );
      const events: { error: unknown }[] = [];
      budget.on('degraded', (event) => events.push(event));
      await budget.ready();
      await waitFor('the degraded event', () => events.length > 0);
      refusal(events[0]?.error);
      refusal(
        await budget.acquire().then(
          () => undefined,
          (error: unknown) => error,
        ),
      );
      expect(() => budget.tryAcquire()).toThrow(ConfigError);

      // Nothing went to database 0 (where ioredis went on after the refusal).
      const admin = new Redis(server.url);
      try {
        expect(await admin.keys('*')).toEqual([]);
      } finally {
        admin.disconnect();
      }
    },
  );

  // Regression: with no `degraded` listener, the process warning said "serving from the local
  // share, Infinity units/min", where every acquire is refused.
  it('the process warning (no degraded listener) says every acquire is refused, not served', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const budget = closeAfter(
      createSharedBudget({
        redis: `${server.url}/99`,
        name: 'db99-warning',
        heartbeatInterval: 50,
        redisTimeout: 500,
      }),
    );
    try {
      await budget.ready();
      await waitFor('the warning', () => warn.mock.calls.length > 0);
      expect(warn.mock.calls).toEqual([
        [expect.stringContaining('Redis refused database 99'), { code: 'ARL_SHARED_BUDGET_DEGRADED' }],
      ]);
      const text = String(warn.mock.calls[0]?.[0]);
      expect(text).not.toContain('serving from the local share');
      expect(text).toContain('every acquire ends with this error');
    } finally {
      warn.mockRestore();
    }
  });
});
