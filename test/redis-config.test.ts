import type { ServerResponse } from 'node:http';
import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/schema.js';
import { parseClusterUrl } from '../src/config/shared.js';
import { ConfigError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { createSharedBudget } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { describeRedis, type RedisServer, waitFor, withRedisServer } from './helpers/redis-server.js';

describe('shared budget in JSON config: checks', () => {
  it('parses shared with its durations, in our shape and in appsettings.json', () => {
    const config = parseConfig({
      limiters: {
        github: {
          origins: ['https://api.github.com'],
          maxWait: '5s',
          shared: { redis: 'redis://127.0.0.1:6379/2', name: 'gh', heartbeatInterval: '100ms' },
        },
      },
    });
    expect(config.limiters.github?.shared).toEqual({
      redis: 'redis://127.0.0.1:6379/2',
      name: 'gh',
      heartbeatInterval: 100,
    });
    const appsettings = parseConfig({
      AdaptiveRateLimiting: {
        Limiters: {
          github: { Origins: ['https://api.github.com'], Shared: { Redis: 'rediss://cache:6380' } },
        },
      },
    });
    expect(appsettings.limiters.github?.shared).toEqual({ redis: 'rediss://cache:6380' });
  });

  it('reads a Redis Cluster as redis+cluster://host:port,host:port (or rediss+cluster://)', () => {
    const url = 'redis+cluster://app:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002';
    expect(parseClusterUrl(url)).toEqual({
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 6379 },
        { host: '::1', port: 7002 },
      ],
      username: 'app',
      password: 'p@ss',
      tls: false,
    });
    expect(parseClusterUrl('rediss+cluster://h:1')).toMatchObject({
      tls: true,
      nodes: [{ host: 'h', port: 1 }],
    });
    const config = parseConfig({
      limiters: {
        gh: { origins: ['https://api.github.com'], shared: { redis: 'redis+cluster://a:7000,b:7001' } },
      },
    });
    expect(config.limiters.gh?.shared?.redis).toBe('redis+cluster://a:7000,b:7001');
    for (const bad of [
      'redis+cluster://',
      'redis+cluster://a:7000,',
      'redis+cluster://a:99999',
      'redis+cluster://a:7000/0',
    ]) {
      expect(parseClusterUrl(bad)).toBeUndefined();
      expect(() => createSharedBudget({ redis: bad, name: 'x' })).toThrow(ConfigError);
    }
  });

  it('refuses a database path that is not a number and a user or password that does not decode', () => {
    // Regression: `/abc` passed, then ioredis's SELECT NaN was refused by Redis as an unhandled
    // rejection that ended the process at the first request; `%ZZ` passed, then every request
    // failed with a bare `URIError: URI malformed`.
    for (const bad of [
      'redis://127.0.0.1:6379/abc',
      'redis://127.0.0.1:6379/-1',
      'redis://127.0.0.1:6379/0/1',
      'redis://u:p%ZZ@127.0.0.1:6379/0',
      'redis://%ZZ@127.0.0.1:6379',
    ]) {
      const inConfig = configError(() =>
        parseConfig({ limiters: { a: { origins: ['https://a.test'], shared: { redis: bad } } } }),
      );
      expect(inConfig.issues.map((i) => i.path)).toEqual(['limiters.a.shared.redis']);
      expect(
        configError(() => createSharedBudget({ redis: bad, name: 'x' })).issues.map((i) => i.path),
      ).toEqual(['redis']);
    }
    for (const good of [
      'redis://127.0.0.1:6379',
      'redis://127.0.0.1:6379/',
      'redis://:p%40ss@127.0.0.1:6379/15',
    ]) {
      expect(() =>
        parseConfig({ limiters: { a: { origins: ['https://a.test'], shared: { redis: good } } } }),
      ).not.toThrow();
    }
  });

  it('names a bad Redis URL, an unknown key and a shared default', () => {
    const error = configError(() =>
      parseConfig({
        limiters: {
          github: { origins: ['https://api.github.com'], shared: { redis: 'localhost:6379', nam: 'x' } },
        },
        default: { shared: { redis: 'redis://127.0.0.1' } },
      }),
    );
    expect(error.issues.map((i) => i.path).sort()).toEqual([
      'default.shared',
      'limiters.github.shared.nam',
      'limiters.github.shared.redis',
    ]);
    expect(error.message).toMatch(/limiters\.github\.shared\.redis: must be a redis:\/\/ or rediss:\/\/ URL/);
  });

  // Regression: since unknown keys became errors, `headers` next to `shared` was "unknown key".
  it('takes headers and quotaFromHeaders next to shared, and refuses api there, naming it', () => {
    const shared = { redis: 'redis://127.0.0.1:1' };
    const quotaFromHeaders = () => undefined;
    const registry = new RateLimiterRegistry({
      limiters: {
        github: { origins: ['https://api.github.com'], headers: 'github', shared },
        own: { origins: ['https://own.test'], quotaFromHeaders, shared: { ...shared, name: 'own' } },
      },
    });
    expect(registry.names()).toEqual(expect.arrayContaining(['github', 'own']));
    registry.close();
    const error = configError(
      () =>
        new RateLimiterRegistry({
          limiters: { openai: { origins: ['https://api.openai.com'], api: 'openai', shared } },
        }),
    );
    expect(error.issues).toEqual([
      expect.objectContaining({
        path: 'limiters.openai.api',
        message: expect.stringMatching(/not with `shared`/),
      }),
    ]);
  });

  it('refuses a bad URL in code too: createSharedBudget, and the registry naming the limiter', () => {
    const bad = configError(() => createSharedBudget({ redis: 'http://127.0.0.1:6379', name: 'x' }));
    expect(bad.issues.map((i) => i.path)).toEqual(['redis']);
    const inRegistry = configError(
      () =>
        new RateLimiterRegistry({
          limiters: { api: { origins: ['https://api.test'], shared: { redis: 'not a url' }, maxWait: -1 } },
          default: { shared: { redis: 'redis://127.0.0.1' } },
        }),
    );
    expect(inRegistry.issues.map((i) => i.path).sort()).toEqual([
      'default.shared',
      'limiters.api.maxWait',
      'limiters.api.shared.redis',
    ]);
    expect(() =>
      createSharedBudget({ redis: 'redis://127.0.0.1:1', name: 'x', lazy: true, heartbeatInterval: 0 }),
    ).toThrow(ConfigError);
  });

  it('opens nothing before the first request: a lazy budget has no store and no member', async () => {
    const budget = createSharedBudget({ redis: 'redis://127.0.0.1:1', name: 'never', lazy: true });
    expect(budget.opened).toBe(false);
    expect(budget.state).toMatchObject({ members: 1, roundTrips: 0, degraded: false });
    await budget.close();
    expect(budget.opened).toBe(false);
  });
});

describeRedis('shared budget in JSON config, on a real Redis', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started));

  it('makes the budget from config: two adapters (two processes) join it at their first request and leave on close', async () => {
    const api = await serve({ capacity: 1_000, retryAfter: undefined });
    const json = {
      limiters: {
        api: {
          origins: [api.origin],
          initialUnitsPerMinute: 60_000,
          shared: { redis: server.url, name: `config-${process.pid}`, heartbeatInterval: '50ms' },
        },
      },
      default: false as const,
    };
    const members = `arl:{config-${process.pid}}:members`;
    const one = limit(parseConfig(json));
    const two = rateLimitedFetch(parseConfig(json));
    cleanups.push(() => two.close());
    expect(await redis.zcard(members)).toBe(0); // lazy: nothing opened yet

    expect((await get(agentWith(one), `${api.origin}/a`)).status).toBe(200);
    const response = await two(`${api.origin}/b`);
    await response.arrayBuffer();
    expect(response.status).toBe(200);
    await waitFor('two members', async () => (await redis.zcard(members)) === 2);
    // The registry answers the budget's local limiter: this process's share of the whole rate.
    // Each process applies its share at its own next heartbeat: wait for both, then add them.
    await waitFor(
      'shares',
      async () => one.registry.get('api')!.rate < 60_000 && two.registry.get('api')!.rate < 60_000,
    );
    expect(one.registry.get('api')!.rate + two.registry.get('api')!.rate).toBeCloseTo(60_000, -2);

    one.close();
    await waitFor('one member left', async () => (await redis.zcard(members)) === 1);
    two.close();
    await waitFor('no member left', async () => (await redis.zcard(members)) === 0);
    expect(one.registry.get('api')!.snapshot().closed).toBe(true);
  });

  it('closes a shared budget that replace took out once nothing waits in it', async () => {
    const api = await serve({ capacity: 1_000, retryAfter: undefined });
    const name = `replaced-${process.pid}`;
    const shared = { redis: server.url, name, heartbeatInterval: 50 };
    const rl = limit({ limiters: { api: { origins: [api.origin], shared } }, default: false });
    expect((await get(agentWith(rl), `${api.origin}/a`)).status).toBe(200);
    await waitFor('a member', async () => (await redis.zcard(`arl:{${name}}:members`)) === 1);
    const old = rl.registry.get('api')!;

    rl.registry.replace('api', { origins: [api.origin], shared: { ...shared, name: `${name}-2` } });
    await waitFor('the old budget left', async () => (await redis.zcard(`arl:{${name}}:members`)) === 0);
    // The budget leaves Redis, then closes its connection, then its local limiter: wait for the last.
    await waitFor('the old limiter closed', async () => old.snapshot().closed);
    expect(await redis.zcard(`arl:{${name}-2}:members`)).toBe(0); // the new one opens at its first request
  });

  it('a shared budget that replace took out while its code loads serves the request already on its way, then closes', async () => {
    const api = await serve({ capacity: 1_000, retryAfter: undefined });
    const name = `replaced-loading-${process.pid}`;
    const shared = { redis: server.url, name, heartbeatInterval: 50 };
    // Two requests a second: the second waits in the budget's line.
    const rl = limit({
      limiters: { api: { origins: [api.origin], initialUnitsPerMinute: 120, shared } },
      default: false,
    });
    const agent = agentWith(rl);
    const answers = [get(agent, `${api.origin}/a`), get(agent, `${api.origin}/b`)];
    expect(rl.registry.get('api')).toBeUndefined(); // its code is not there yet
    rl.registry.replace('api', { origins: [api.origin], shared: { ...shared, name: `${name}-2` } });
    // Before: closed once its code was there, and the waiting request refused `closed`.
    expect((await Promise.all(answers)).map((r) => r.status)).toEqual([200, 200]);
    await waitFor('the old budget left', async () => (await redis.zcard(`arl:{${name}}:members`)) === 0);
  });

  it.each(['interceptor', 'fetch wrapper'] as const)(
    'a shared budget that replace took out serves the retry of a request in flight through it (%s), then closes',
    async (adapter) => {
      // The first request is held, then answered 429; the rest pass.
      const held: ServerResponse[] = [];
      const api = await serve({
        capacity: 1_000,
        respond: (_req, res) => {
          if (held.length > 0) return false;
          held.push(res);
          return true;
        },
      });
      const name = `replaced-in-flight-${adapter === 'interceptor' ? 'i' : 'f'}-${process.pid}`;
      const members = `arl:{${name}}:members`;
      // A heartbeat of a second: at 50 ms, a loaded machine (the whole suite on 2 cores) missed
      // the member's timeout and pruned it before the count below (0 members, not 1).
      const shared = { redis: server.url, name, heartbeatInterval: 1_000 };
      const config = {
        limiters: { api: { origins: [api.origin], initialUnitsPerMinute: 60_000, shared } },
        default: false as const,
      };
      let registry: RateLimiterRegistry;
      let answer: Promise<number>;
      if (adapter === 'interceptor') {
        const rl = limit(config);
        registry = rl.registry;
        answer = get(agentWith(rl), `${api.origin}/a`).then((r) => r.status);
      } else {
        const f = rateLimitedFetch(config);
        cleanups.push(() => f.close());
        registry = f.registry;
        answer = f(`${api.origin}/a`).then(async (r) => {
          await r.arrayBuffer();
          return r.status;
        });
      }
      await waitFor('the request at the server', async () => held.length === 1);
      // The budget grants before its first heartbeat's reply is in: the member is counted once
      // that reply is (on a loaded machine, after the request reached the server: 0 members).
      await waitFor('the member in the budget', async () => (await redis.zcard(members)) === 1);
      const old = registry.get('api')!;
      registry.replace('api', { origins: [api.origin], shared: { ...shared, name: `${name}-2` } });
      expect(await redis.zcard(members)).toBe(1); // held by the request in flight

      held[0]!.writeHead(429, { 'retry-after': '0' }).end('slow down');
      // Its retry goes through the old budget (before: refused `closed`, the caller got the 429).
      expect(await answer).toBe(200);
      expect(api.requests).toBe(2);
      // Longer limits than the others': the whole suite on 2 cores once ran one of these past
      // 10 s (the test passes alone in about a second).
      await waitFor('the old budget left', async () => (await redis.zcard(members)) === 0, 20_000);
      await waitFor('the old limiter closed', async () => old.snapshot().closed, 20_000);
    },
    45_000,
  );
});
