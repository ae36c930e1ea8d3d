import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ConfigError, RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { configError } from './helpers/config-error.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { describeRedis, type RedisServer, waitFor, withRedisServer } from './helpers/redis-server.js';

// A shared budget per partition: N processes serving one customer share that customer's quota,
// and one customer's 429 pauses that customer only, in every process.

const SECRET = 'a secret of the deployment, 32 B';
const TOKEN_A = 'Bearer customer-a-token-0123456789';
const TOKEN_B = 'Bearer customer-b-token-9876543210';

describe('shared budgets per partition: checks', () => {
  it('refuses partitionBy on a shared limiter without partitionSecret, naming the field', () => {
    const error = configError(() =>
      adaptiveRateLimit({
        limiters: {
          api: {
            origins: ['https://api.test'],
            partitionBy: ['authorization'],
            shared: { redis: 'redis://127.0.0.1:1' },
          },
        },
      }),
    );
    expect(error.issues.map((i) => i.path)).toEqual(['limiters.api.partitionBy']);
    expect(error.message).toMatch(/partitionSecret/);
  });

  it('names a short partitionSecret by its length, never its value', () => {
    const error = configError(() => adaptiveRateLimit({ partitionSecret: 'short-secret' }));
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.issues[0]).toMatchObject({ path: 'partitionSecret', received: 'a string of 12 characters' });
    expect(error.message).not.toContain('short-secret');
  });

  it("names a misspelt partitionSecret key by its value's kind and length, never the value", () => {
    const value = 'the deployment secret 0123456789';
    for (const key of ['partitionSecrets', 'PartitionSecret', 'partition_secret', 'partitionSecert']) {
      for (const make of [adaptiveRateLimit, rateLimitedFetch]) {
        const error = configError(() => make({ [key]: value } as never));
        expect(error.issues[0]).toMatchObject({ path: key, received: 'a string of 32 characters' });
        expect(error.message).toMatch(/did you mean "partitionSecret"/);
        // Before: the unknown key's value was shown as received, the secret in full.
        expect(JSON.stringify(error.issues)).not.toContain('0123456789');
        expect(error.message).not.toContain('0123456789');
      }
    }
  });
});

describeRedis('shared budgets per partition on a real Redis', () => {
  let server: RedisServer;
  let redis: Redis;

  withRedisServer((started) => ({ server, redis } = started));

  it("gives each credential a budget named alike in every process: A's 429 pauses A in both, not B", async () => {
    let answeredA = 0;
    const api = await serve({
      respond: (req: IncomingMessage, res: ServerResponse) => {
        // A's first request is answered; then A's token is exhausted.
        if (req.headers.authorization !== TOKEN_A || answeredA++ === 0) return false;
        res.writeHead(429, { 'retry-after': '30' }).end('token exhausted');
        return true;
      },
    });
    const name = `parts-${process.pid}`;
    const options = {
      limiters: {
        api: {
          origins: [api.origin],
          maxWait: 5_000,
          shared: { redis: server.url, name, heartbeatInterval: 50 },
        },
      },
      default: false as const,
      partitionSecret: SECRET,
      maxAttempts: 1,
    };
    const one = limit(options);
    const two = rateLimitedFetch(options);
    cleanups.push(() => two.close());

    // Process two meets A first (a member of A's budget), then process one is answered 429.
    const firstA = await two(`${api.origin}/a`, { headers: { authorization: TOKEN_A } });
    await firstA.arrayBuffer();
    expect(firstA.status).toBe(200);
    const throttled = await get(agentWith(one), `${api.origin}/a`, { headers: { authorization: TOKEN_A } });
    expect(throttled.status).toBe(429);
    const keyA = one.registry.names().find((n) => n.startsWith('api#')) as string;
    await waitFor(
      "A's pause in process two",
      async () => two.registry.get(keyA)?.snapshot().pausedUntil !== undefined,
    );

    const b = await two(`${api.origin}/b`, { headers: { authorization: TOKEN_B } });
    await b.arrayBuffer();
    expect(b.status).toBe(200);
    const a = await two(`${api.origin}/a`, { headers: { authorization: TOKEN_A } }).catch((e: Error) => e);

    // The same partition key in both processes: `api#<id>` in the registry, `<name>#<id>` in Redis.
    const partitionOf = (names: string[]) => names.filter((n) => n.startsWith('api#')).sort();
    expect(partitionOf(one.registry.names())).toHaveLength(1);
    expect(partitionOf(two.registry.names())).toHaveLength(2);
    expect(partitionOf(two.registry.names())).toContain(partitionOf(one.registry.names())[0]);
    const budgets = async () => new Set((await redis.keys(`arl:{${name}#*`)).map((k) => k.split('}')[0]));
    await waitFor("A's and B's budgets in Redis", async () => (await budgets()).size === 2);
    const keys = await redis.keys(`arl:{${name}#*`);
    // A's pause of 30 s, learned in process one, is A's in process two too: A's request there is
    // refused (its wait passes maxWait), never sent; B's went at once.
    expect(api.received.filter((r) => r.headers.authorization === TOKEN_A).map((r) => r.status)).toEqual([
      200, 429,
    ]);
    expect(a).toBeInstanceOf(RateLimitRejectedError);
    expect(a).toMatchObject({ reason: 'max-wait' });
    expect(two.registry.get(keyA)?.snapshot().pausedUntil).toBeDefined();
    for (const secret of ['customer-a-token', 'customer-b-token', SECRET]) {
      expect(JSON.stringify([keys, one.registry.names(), two.registry.names()])).not.toContain(secret);
    }
    await waitFor('members', async () => (await redis.keys(`arl:{${name}#*}:members`)).length === 2);
  });

  it("replace() leaves a request waiting in a partition's budget served, and closes that budget after it", async () => {
    const api = await serve();
    const config = {
      origins: [api.origin],
      maxWait: 600_000,
      // One request a minute: the second waits in the line.
      initialUnitsPerMinute: 1,
      maxUnitsPerMinute: 1,
      shared: { redis: server.url, name: `replace-${process.pid}`, heartbeatInterval: 50 },
    };
    const f = rateLimitedFetch({
      limiters: { api: config },
      default: false,
      partitionSecret: SECRET,
      maxAttempts: 1,
    });
    cleanups.push(() => f.close());
    const abort = new AbortController();
    cleanups.push(() => abort.abort());
    const call = (token: string) =>
      f(`${api.origin}/b`, { headers: { authorization: token }, signal: abort.signal }).then(
        (r) => r.status,
        (e: unknown) => e,
      );
    expect(await call(TOKEN_B)).toBe(200);
    let waiting: unknown;
    void call(TOKEN_B).then((s) => (waiting = s));
    const key = f.registry.names().find((n) => n.startsWith('api#')) as string;
    const old = f.registry.get(key);
    await waitFor("B's second request in its budget's line", async () => (old?.snapshot().queued ?? 0) > 0);

    f.registry.replace('api', { ...config, initialUnitsPerMinute: 60, maxUnitsPerMinute: 60 });
    // A request through the new config (a budget of its own, joined in Redis) goes meanwhile.
    expect(await call(TOKEN_A)).toBe(200);
    // Before: refused with reason `closed` ("closed with 1 units waiting") by the replace.
    expect(waiting).toBeUndefined();
    expect(old?.snapshot().closed).toBe(false);
    abort.abort(new Error('the caller gave up'));
    await waitFor('the abort', async () => waiting !== undefined);
    expect(waiting).toMatchObject({ message: 'the caller gave up' });
    // Nothing waits in it any more: the budget taken out is closed.
    await waitFor('the old budget closed', async () => old?.snapshot().closed === true);
  });
});
