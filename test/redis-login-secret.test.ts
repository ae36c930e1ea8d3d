import { inspect } from 'node:util';
import { expect, it } from 'vitest';
import { createSharedBudget, type SharedBudget, SharedBudgetUnavailableError } from '../src/redis/index.js';
import { describeRedis, type RedisServer, waitFor, withRedisServer } from './helpers/redis-server.js';

// A login Redis refuses: ioredis's ReplyError carries the command it answered, password included
// (`AUTH <password>`, or `HELLO 3 AUTH <user> <password>` with a user name). Regression: that
// error was the `degraded` event's `error` and the `cause` of SharedBudgetUnavailableError as it
// was, so `console.log(event)` or `JSON.stringify(event)` printed the password.

const PASSWORD = 'ZQXsecret-redis-login-7f3a';

/** Everything a user might print of a value. */
const printed = (value: unknown) => `${inspect(value, { depth: 10 })}\n${JSON.stringify(value)}`;

describeRedis('a shared budget whose Redis refuses its login', () => {
  let server: RedisServer;

  withRedisServer(async (started) => {
    server = started.server;
    await started.redis.config('SET', 'requirepass', 'the-right-one');
  });

  it.each([
    ['a password alone (AUTH)', ':'],
    ['a user and a password (HELLO 3 AUTH)', 'default:'],
  ])('never prints the password with %s: degraded event, failClosed error', async (_case, user) => {
    const url = `redis://${user}${PASSWORD}@127.0.0.1:${server.port}/0`;
    const budgets: SharedBudget[] = [];
    try {
      const budget = createSharedBudget({
        redis: url,
        name: 'login',
        heartbeatInterval: 50,
        redisTimeout: 500,
      });
      budgets.push(budget);
      const events: unknown[] = [];
      budget.on('degraded', (event) => events.push(event));
      (await budget.acquire()).success();
      await waitFor('the degraded event', () => events.length > 0);
      // The case under test: the refusal is ioredis's error with its command.
      expect(printed(events[0])).toMatch(/WRONGPASS/);
      expect(printed(events[0])).not.toContain(PASSWORD);

      const closed = createSharedBudget({
        redis: url,
        name: 'login-closed',
        heartbeatInterval: 50,
        redisTimeout: 500,
        failClosed: true,
      });
      budgets.push(closed);
      closed.on('degraded', () => {});
      await closed.acquire().then(
        (p) => p.success(),
        () => {},
      );
      await waitFor('the failClosed budget degraded', () => closed.state.degraded);
      const error = await closed.acquire().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(SharedBudgetUnavailableError);
      expect(printed((error as Error).cause)).toMatch(/WRONGPASS/);
      expect(printed(error)).not.toContain(PASSWORD);
    } finally {
      await Promise.all(budgets.map((b) => b.close()));
    }
  });
});
