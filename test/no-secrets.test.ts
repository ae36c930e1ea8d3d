import { execFile } from 'node:child_process';
import diagnosticsChannel from 'node:diagnostics_channel';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import { parseConfig } from '../src/config/schema.js';
import { DIAGNOSTICS_CHANNELS } from '../src/diagnostics.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { LazyEmitter } from '../src/limiter/events.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import { createSharedBudget, SharedBudget } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { wrap } from '../src/wrap/wrap.js';
import { freePort } from './helpers/redis-server.js';
import { MARK, Printed, requestPlants, SECRET_PATH, secret } from './helpers/secret-plants.js';

// Secrets planted in each place a user puts one: config in code and in JSON files (our shape and
// the appsettings shape), the Redis URL of a shared budget, requests' URLs and credential headers
// through the interceptor, the fetch wrapper and wrap. Every error, warning, event, diagnostics
// payload, snapshot and NODE_DEBUG line is recorded; none may carry a secret.

const printed = new Printed();
const stops: (() => void)[] = [];

beforeAll(() => {
  // Every limiter and registry event, and the shared budget's, whether anyone listens or not.
  const protos = [LazyEmitter.prototype, RateLimiterRegistry.prototype, SharedBudget.prototype] as {
    emit: (event: string, ...args: unknown[]) => boolean;
  }[];
  for (const proto of protos) {
    const emit = proto.emit as (this: unknown, event: string, ...args: unknown[]) => boolean;
    const spy = vi.spyOn(proto as { emit: typeof emit }, 'emit').mockImplementation(function (
      this: unknown,
      event: string,
      ...args: unknown[]
    ) {
      printed.add(`event ${event}`, args);
      return emit.call(this, event, ...args);
    });
    stops.push(() => spy.mockRestore());
  }
  for (const name of Object.values(DIAGNOSTICS_CHANNELS)) {
    const listener = (message: unknown) => printed.add(`diagnostics ${name}`, message);
    diagnosticsChannel.subscribe(name, listener);
    stops.push(() => diagnosticsChannel.unsubscribe(name, listener));
  }
  const onWarning = (warning: Error) => printed.add('warning', `${warning.message}\n${warning.stack}`);
  process.on('warning', onWarning);
  stops.push(() => process.off('warning', onWarning));
});

afterAll(() => {
  for (const stop of stops.splice(0)) stop();
});

let checked = 0;
afterEach(() => {
  // What this test recorded carries no secret.
  const leaks = printed.leaks(checked);
  checked = printed.items.length;
  expect(leaks).toEqual([]);
});

const limiterConfigs = (): Record<string, Record<string, unknown>> => ({
  'origin-userinfo': { origins: [`https://user:${secret('origin-password')}@api.example.com`] },
  'origin-user': { origins: [`https://${secret('origin-user')}@api.example.com`] },
  'origin-query': { origins: [`https://api.example.com/?key=${secret('origin-query')}`] },
  'origin-malformed': { origins: [`https://user:${secret('origin-malformed')}@exa mple.com:x`] },
  'redis-port': { shared: { redis: `redis://user:${secret('redis-port')}@127.0.0.1:notaport/0` } },
  'redis-scheme': { shared: { redis: `http://user:${secret('redis-scheme')}@127.0.0.1:6379` } },
  'redis-slash': { shared: { redis: `redis://:${secret('redis-slash')}/x@127.0.0.1:6379` } },
  'headers-profile': { origins: ['https://a.example.com'], headers: `Bearer ${secret('headers')}` },
  'unknown-key': { origins: ['https://b.example.com'], authorization: `Bearer ${secret('unknown-key')}` },
  'typo-key': { origin: `https://u:${secret('typo-key')}@c.example.com` },
});

describe('no secret in what the library prints', () => {
  it('config in code: parseConfig, the registry, the interceptor and the fetch wrapper', async () => {
    const before = printed.count('config');
    for (const [name, config] of Object.entries(limiterConfigs())) {
      await printed.throws(`config parseConfig ${name}`, () =>
        parseConfig({ limiters: { [name]: config } } as never),
      );
      await printed.throws(
        `config registry ${name}`,
        () => new RateLimiterRegistry({ limiters: { [name]: config } } as never),
      );
      await printed.throws(`config interceptor ${name}`, () =>
        adaptiveRateLimit({ limiters: { [name]: config } } as never),
      );
      await printed.throws(`config fetch ${name}`, () =>
        rateLimitedFetch({ limiters: { [name]: config } } as never),
      );
    }
    // An origin option with user info is refused, its password not printed.
    await printed.throws('config interceptor origin', () =>
      adaptiveRateLimit({ origin: `https://user:${secret('interceptor-origin')}@api.example.com` }),
    );
    const registry = new RateLimiterRegistry();
    await printed.throws('config registry replace', () =>
      registry.replace(`https://user:${secret('registry-replace')}@api.example.com`, {}),
    );
    await printed.throws('config registry add', () =>
      registry.add('added', { origins: [`https://api.example.com/?token=${secret('registry-add')}`] }),
    );
    registry.close();
    expect(printed.count('config')).toBeGreaterThan(before + 40);
  });

  it('JSON files and the appsettings shape, through parseConfig and loadConfig', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'no-secrets-'));
    try {
      const ours = { limiters: limiterConfigs() };
      const appsettings = {
        AdaptiveRateLimiting: {
          Limiters: {
            Orders: { Origins: [`https://user:${secret('appsettings-origin')}@orders.example.com`] },
            Shared: { Shared: { Redis: `redis://user:${secret('appsettings-redis')}@127.0.0.1:bad/0` } },
            Query: { Origins: [`https://orders.example.com/?api_key=${secret('appsettings-query')}`] },
          },
          Default: { Authorization: `Bearer ${secret('appsettings-default')}` },
        },
      };
      const files = {
        'ours.json': JSON.stringify(ours, null, 2),
        'appsettings.json': `// comments, as .NET allows\n${JSON.stringify(appsettings, null, 2)}`,
        'broken.json': `{ "limiters": { "a": { "origins": ["https://u:${secret('broken-json')}@h.example.com"] } }`,
      };
      for (const [file, text] of Object.entries(files)) {
        const path = join(dir, file);
        await writeFile(path, text);
        await printed.throws(`json loadConfig ${file}`, () => loadConfig(path));
      }
      await printed.throws('json parseConfig appsettings', () => parseConfig(appsettings));
      await printed.throws('json parseConfig section', () => parseConfig(appsettings.AdaptiveRateLimiting));
      await printed.throws('json parseConfig parsed file', () => parseConfig(JSON.parse(files['ours.json'])));
      expect(printed.count('json')).toBe(12);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the Redis URL of createSharedBudget: refused, and unreachable (degraded, then failClosed)', async () => {
    for (const url of [
      `redis://user:${secret('budget-port')}@127.0.0.1:notaport/0`,
      `http://user:${secret('budget-scheme')}@127.0.0.1:6379`,
      `redis://:${secret('budget-slash')}/x@127.0.0.1:6379`,
      `redis://127.0.0.1:6379/0?password=${secret('budget-query')}`.replace('6379/0', 'x/0'),
    ]) {
      await printed.throws(`budget ${url.slice(0, 12)}`, () => createSharedBudget({ name: 'b', redis: url }));
    }
    const port = await freePort();
    const url = `redis://user:${secret('budget-unreachable')}@127.0.0.1:${port}/0`;
    const open = createSharedBudget({ name: 'open', redis: url, redisTimeout: 100, heartbeatInterval: 50 });
    const closed = createSharedBudget({ name: 'closed', redis: url, redisTimeout: 100, failClosed: true });
    try {
      const permit = await open.acquire();
      permit.success();
      await vi.waitFor(() => expect(open.state.degraded).toBe(true), { timeout: 5_000 });
      printed.add('budget snapshot()', open.snapshot());
      printed.add('budget state', open.state);
      await printed.throws('budget failClosed', () => closed.acquire());
      expect(printed.count('warning') + printed.count('event degraded')).toBeGreaterThan(0);
    } finally {
      await open.close();
      await closed.close();
    }
  });

  it('requests through the interceptor and the fetch wrapper: URL query and credential headers', async () => {
    const { sent } = await requestPlants(printed);
    // The secrets did go out (the test plants them where they travel), and the limiter did act.
    expect(sent.filter((s) => s.includes(MARK)).length).toBeGreaterThanOrEqual(8);
    expect(printed.count('event throttled')).toBeGreaterThan(0);
    expect(printed.count('event rejected')).toBeGreaterThan(0);
    expect(printed.count('interceptor (response) refusal')).toBeGreaterThan(0);
    expect(printed.count('fetch (error) request')).toBeGreaterThan(0);
    expect(printed.count('interceptor (error) units')).toBe(2);
    expect(printed.count('diagnostics')).toBeGreaterThan(0);
  });

  it('wrap and the limiters: arguments, options and a throttled call', async () => {
    const limiter = new AdaptiveRateLimiter({ name: 'wrapped', initialUnitsPerMinute: 6_000, maxWait: 0 });
    const fixed = new FixedWindowRateLimiter({
      name: 'fixed',
      limitForPeriod: 1,
      limitRefreshPeriod: 60_000,
      timeoutDuration: 0,
    });
    try {
      const url = `https://user:${secret('wrap-fn')}@api.example.com`;
      await printed.throws('wrap fn', () => wrap(limiter, url as never));
      await printed.throws('wrap maxAttempts', () =>
        wrap(limiter, async () => 1, { maxAttempts: `?key=${secret('wrap-attempts')}` as never }),
      );
      await printed.throws('limiter acquire', () => limiter.acquire(`${SECRET_PATH}` as never));
      await printed.throws('limiter setRate', () => limiter.setRate(`Bearer ${secret('set-rate')}` as never));
      await printed.throws('fixed acquire', () => fixed.acquire(url as never));
      await printed.throws('fixed change', () => fixed.changeLimitForPeriod(url as never));
      const call = wrap(
        limiter,
        async (_url: string, _headers: Record<string, string>) => {
          throw Object.assign(new Error('Too Many Requests'), {
            status: 429,
            headers: { 'retry-after': '1' },
          });
        },
        { maxAttempts: 1 },
      );
      const headers = { authorization: `Bearer ${secret('wrap-header')}` };
      await call(`https://api.example.com${SECRET_PATH}`, headers).catch(() => undefined);
      await printed.throws('wrap rejected', () => call(`https://api.example.com${SECRET_PATH}`, headers));
      printed.add('wrap snapshot()', limiter.snapshot());
      expect(printed.count('event throttled')).toBeGreaterThan(0);
    } finally {
      limiter.close();
      fixed.close();
    }
  });

  it('NODE_DEBUG=adaptive-rate-limit lines of the same requests', async () => {
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'secret-plants-debug.ts')],
      { env: { ...process.env, NODE_DEBUG: 'adaptive-rate-limit' }, timeout: 60_000 },
    );
    const result = JSON.parse(stdout) as { sent: number; leaks: string[] };
    expect(result.sent).toBeGreaterThanOrEqual(8);
    expect(result.leaks).toEqual([]);
    // The debug lines were written (cuts, pauses, refusals of those requests), and are checked.
    expect(stderr).toMatch(/^ADAPTIVE-RATE-LIMIT \d+: .*(cut|paused|rejected)/m);
    printed.add('NODE_DEBUG stderr', stderr);
  });
});
