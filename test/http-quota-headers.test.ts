import type { OutgoingHttpHeaders } from 'node:http';
import { Agent, type Dispatcher, setGlobalDispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError, InvalidCallbackValueError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { InterceptorOptions } from '../src/http/options.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import {
  agentWith,
  cleanups,
  get,
  keepGlobalDispatcher,
  limit,
  serve,
} from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// Real node:http servers sending each header family; the limiters run on a manual clock, so what
// a test counts never depends on real time.

/** A server answering every request 200 (or `status`) with `headers(n)`, n counting from 1. */
function announcing(headers: (n: number) => OutgoingHttpHeaders, status = 200) {
  let n = 0;
  return serve({
    respond: (_req, res) => {
      n++;
      res.writeHead(status, headers(n)).end('ok');
      return true;
    },
  });
}

function setupInterceptor(options: InterceptorOptions = {}) {
  const clock = new ManualClock();
  const rl = limit({ clock, ...options });
  return { clock, rl, agent: agentWith(rl) };
}

/** Sends `n` GETs without awaiting them; resolves to their statuses once all settle. */
function burst(agent: Dispatcher, url: string, n: number) {
  return Promise.all(Array.from({ length: n }, () => get(agent, url).then((r) => r.status)));
}

describe('quota headers through the undici interceptor', () => {
  it('holds the requests that the announced ceiling does not allow yet (IETF RateLimit)', async () => {
    const server = await announcing(() => ({
      'ratelimit-policy': '"default";q=600;w=60',
      ratelimit: '"default";r=4;t=60',
    }));
    const { clock, rl, agent } = setupInterceptor();
    expect((await get(agent, `${server.origin}/`)).status).toBe(200);
    const limiter = rl.registry.get(server.origin);
    expect(limiter?.snapshot().announcedRate).toBe(4);
    // 4 a minute: one unit of burst, then one every 15 s.
    const all = burst(agent, `${server.origin}/`, 5);
    await until(() => server.requests === 2 && limiter?.snapshot().queued === 4, 'one to go, four to wait');
    clock.advance(15_000);
    await until(() => server.requests === 3, 'the next after 15 s');
    expect(limiter?.snapshot().queued).toBe(3);
    clock.advance(45_000);
    expect(await all).toEqual([200, 200, 200, 200, 200]);
  });

  it('pauses until the reset when a 200 says nothing remains', async () => {
    const server = await announcing(() => ({ ratelimit: '"default";r=0;t=50' }));
    const { clock, rl, agent } = setupInterceptor();
    clock.advance(1_000);
    await get(agent, `${server.origin}/`);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(51_000);
  });

  it('pauses until the reset on a 429 whose only wait is an exhausted policy, read or not', async () => {
    for (const headers of ['standard', false] as const) {
      const server = await announcing(() => ({ ratelimit: '"default";r=0;t=50' }), 429);
      const { rl, agent } = setupInterceptor({ maxAttempts: 1, default: { headers } });
      expect((await get(agent, `${server.origin}/`)).status).toBe(429);
      expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(50_000);
    }
  });

  it('lets Retry-After win over an exhausted policy on a 429', async () => {
    const server = await announcing(() => ({ 'retry-after': '2', ratelimit: '"default";r=0;t=50' }), 429);
    const { rl, agent } = setupInterceptor({ maxAttempts: 1 });
    expect((await get(agent, `${server.origin}/`)).status).toBe(429);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(2_000);
  });

  it('reads the Shopify call limit with the shopify profile', async () => {
    const server = await announcing(() => ({ 'x-shopify-shop-api-call-limit': '39/40' }));
    const { rl, agent } = setupInterceptor({ default: { headers: 'shopify' } });
    await get(agent, `${server.origin}/`);
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(120);
  });

  it('reads your quotaFromHeaders', async () => {
    const server = await announcing((n) => ({
      'x-budget-left': String(10 - n),
      'x-budget-reset-ms': '60000',
    }));
    const { rl, agent } = setupInterceptor({
      default: {
        quotaFromHeaders: (headers) => ({
          remaining: Number(headers['x-budget-left']),
          resetMs: Number(headers['x-budget-reset-ms']),
        }),
      },
    });
    await get(agent, `${server.origin}/`);
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(9);
  });

  it('fails the request with InvalidCallbackValueError when quotaFromHeaders answers outside its contract', async () => {
    const server = await announcing(() => ({}));
    const { agent } = setupInterceptor({ default: { quotaFromHeaders: () => Number.NaN as never } });
    const error = await get(agent, `${server.origin}/`).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidCallbackValueError);
    expect(error).toMatchObject({ code: 'ERR_INVALID_CALLBACK_VALUE', callback: 'quotaFromHeaders' });
    expect((error as Error).message).toMatch(/quotaFromHeaders returned NaN/);
  });
});

describe("quota headers through Node's global fetch", () => {
  keepGlobalDispatcher();

  function installGlobal(options: InterceptorOptions) {
    const clock = new ManualClock();
    const rl = limit({ clock, ...options });
    const agent = new Agent();
    cleanups.push(() => agent.close());
    setGlobalDispatcher(agent.compose(rl));
    return { clock, rl };
  }

  /** GitHub-style headers: 0 left, the reset 30 s after the server's Date, which is 1 h behind ours. */
  const github = () => {
    const serverNow = Date.now() - 3_600_000;
    return {
      date: new Date(serverNow).toUTCString(),
      'x-ratelimit-limit': '5000',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-used': '5000',
      'x-ratelimit-reset': String(Math.floor(serverNow / 1000) + 30),
      'x-ratelimit-resource': 'core',
    };
  };

  it('pauses until the epoch reset counted from the Date header with the github profile', async () => {
    const server = await announcing(github);
    const { rl } = installGlobal({ limiters: { gh: { origins: [server.origin], headers: 'github' } } });
    const response = await fetch(`${server.origin}/`);
    await response.text();
    const pausedUntil = rl.registry.get('gh')?.snapshot().pausedUntil ?? 0;
    // 30 s after the Date, which is an hour behind the local clock; Date has whole seconds.
    expect(pausedUntil).toBeGreaterThanOrEqual(29_000);
    expect(pausedUntil).toBeLessThanOrEqual(31_000);
  });

  it('never guesses the GitHub form without the profile', async () => {
    const server = await announcing(github);
    const { rl } = installGlobal({});
    await (await fetch(`${server.origin}/`)).text();
    expect(rl.registry.get(server.origin)?.snapshot()).toMatchObject({
      announcedRate: undefined,
      pausedUntil: undefined,
    });
  });

  it('takes the profile from a JSON config, in any case', async () => {
    const server = await announcing(() => ({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-reset-requests': '1s',
    }));
    const config = parseConfig({ limiters: { ai: { origins: [server.origin], headers: 'OpenAI' } } });
    const { rl } = installGlobal(config);
    await (await fetch(`${server.origin}/`)).text();
    expect(rl.registry.get('ai')?.snapshot().announcedRate).toBe(60);
  });
});

describe('quota headers through rateLimitedFetch', () => {
  it('reads the standard fields by default', async () => {
    const server = await announcing(() => ({ ratelimit: '"default";r=30;t=60' }));
    const clock = new ManualClock();
    const f = rateLimitedFetch({ clock });
    cleanups.push(() => f.close());
    await (await f(`${server.origin}/`)).text();
    expect(f.registry.get(server.origin)?.snapshot().announcedRate).toBe(30);
  });
});

describe('quota headers with a SharedBudget behind the origins', () => {
  it('hands the announced quota to the local limiter: this process paces by its ceiling', async () => {
    const server = await announcing(() => ({ ratelimit: '"default";r=12;t=60' }));
    const clock = new ManualClock();
    const budget = createSharedBudget({ name: 'api', store: new MemoryBudgetStore({ clock }), clock });
    cleanups.push(() => budget.close());
    const rl = limit({
      clock,
      limiters: { api: { origins: [server.origin], limiter: budget, headers: 'standard' } },
    });
    await get(agentWith(rl), `${server.origin}/`);
    expect(budget.limiter.snapshot().announcedRate).toBe(12);
  });
});

describe('headers and quotaFromHeaders options', () => {
  it('rejects an unknown profile in code and in JSON, naming the field', () => {
    expect(() => limit({ default: { headers: 'gitlab' as never } })).toThrow(ConfigError);
    expect(() => limit({ default: { headers: 'gitlab' as never } })).toThrow(/default\.headers.*gitlab/s);
    expect(() => parseConfig({ limiters: { a: { headers: 'gitlab' } } })).toThrow(/limiters\.a\.headers/);
  });

  it('reads headers from the appsettings section, keys and profile in any case', () => {
    const config = parseConfig({ AdaptiveRateLimiting: { Limiters: { gh: { Headers: 'GitHub' } } } });
    expect(config.limiters.gh?.headers).toBe('github');
    expect(parseConfig({ default: { headers: false } }).default).toEqual({ headers: false });
  });

  it('rejects a quotaFromHeaders that is not a function, and keeps it out of JSON', () => {
    expect(() => limit({ default: { quotaFromHeaders: 5 as never } })).toThrow(/default\.quotaFromHeaders/);
    expect(() => parseConfig({ default: { quotaFromHeaders: 'x' } })).toThrow(ConfigError);
  });

  it('reads nothing with headers: false', async () => {
    const server = await announcing(() => ({ ratelimit: '"default";r=0;t=50' }));
    const { rl, agent } = setupInterceptor({ default: { headers: false } });
    await get(agent, `${server.origin}/`);
    expect(rl.registry.get(server.origin)?.snapshot()).toMatchObject({
      announcedRate: undefined,
      pausedUntil: undefined,
    });
  });
});
