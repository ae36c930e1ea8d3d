import { request, fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { ConfigError, RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { InterceptorOptions } from '../src/http/options.js';
import {
  AdaptiveRateLimiter,
  classifyThrown,
  FixedWindowRateLimiter,
  parseConfig,
  wrap,
} from '../src/index.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';

/** The server answers 429 with `Retry-After: 600` to every request: one 429 pauses the limiter for 10 min. */
async function pausedByA429(options: InterceptorOptions) {
  const server = await serve({ capacity: 0, retryAfter: '600' });
  const rl = limit({ clock: new ManualClock(), maxAttempts: 1, ...options });
  const agent = agentWith(rl);
  expect((await get(agent, `${server.origin}/`)).status).toBe(429);
  return { server, rl, agent };
}

const refusalBody = (reason: string) => ({
  error: { type: 'rate_limit_rejected', code: expect.stringMatching(/^ERR_RATE_LIMIT_/), reason },
});

describe("rejection: 'response' (the interceptor)", () => {
  it('answers a request refused for max-wait with a local 429, Retry-After the predicted wait', async () => {
    const { server, agent } = await pausedByA429({ rejection: 'response' });

    const refused = await get(agent, `${server.origin}/`);

    expect(refused.status).toBe(429);
    expect(refused.headers).toMatchObject({
      'retry-after': '600',
      'x-adaptive-rate-limit': 'rejected;reason=max-wait',
      'content-type': 'application/json',
    });
    expect(JSON.parse(refused.body)).toMatchObject(refusalBody('max-wait'));
    expect(server.requests).toBe(1);
  });

  it("gives undici's fetch a Response, not a TypeError", async () => {
    const { server, agent } = await pausedByA429({ rejection: 'response' });

    const response = await undiciFetch(`${server.origin}/`, { dispatcher: agent });

    expect(response.status).toBe(429);
    expect(response.headers.get('x-adaptive-rate-limit')).toBe('rejected;reason=max-wait');
    expect(await response.json()).toMatchObject(refusalBody('max-wait'));
    expect(server.requests).toBe(1);
  });

  it('answers queue-full with the predicted wait, and closed with Retry-After 1', async () => {
    const { server, rl, agent } = await pausedByA429({
      rejection: 'response',
      default: { queueLimit: 0, maxWait: 3_600_000 },
    });

    const full = await get(agent, `${server.origin}/`);
    expect(full.headers).toMatchObject({
      'retry-after': '600',
      'x-adaptive-rate-limit': 'rejected;reason=queue-full',
    });

    rl.close();
    const closed = await get(agent, `${server.origin}/`);
    expect(closed.status).toBe(429);
    expect(closed.headers).toMatchObject({
      'retry-after': '1',
      'x-adaptive-rate-limit': 'rejected;reason=closed',
    });
    expect(server.requests).toBe(1);
  });

  it("keeps the typed error by default ('error')", async () => {
    const { server, agent } = await pausedByA429({});

    const error = await request(`${server.origin}/`, { dispatcher: agent }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(RateLimitRejectedError);
    expect(error).toMatchObject({ reason: 'max-wait' });
    expect((error as RateLimitRejectedError).retryAfterMs).toBeGreaterThan(599_000);
  });

  it('is set from a config file too, in any case (appsettings: "Rejection": "Response")', async () => {
    const config = parseConfig({ AdaptiveRateLimiting: { Rejection: 'Response', MaxAttempts: 1 } });
    expect(config.rejection).toBe('response');
    const { server, agent } = await pausedByA429(config);

    expect((await get(agent, `${server.origin}/`)).headers['x-adaptive-rate-limit']).toBe(
      'rejected;reason=max-wait',
    );
    expect(() => parseConfig({ rejection: 'nope' })).toThrow(/rejection/);
  });

  it('names a bad value', () => {
    expect(() => limit({ rejection: 'nope' as never })).toThrow(ConfigError);
    expect(() => limit({ rejection: 'nope' as never })).toThrow(/rejection/);
  });
});

describe("rejection: 'response' (the fetch wrapper)", () => {
  it('resolves a refused request with the local 429; the server sees only the first', async () => {
    const server = await serve({ capacity: 0, retryAfter: '600' });
    const f = rateLimitedFetch({ clock: new ManualClock(), maxAttempts: 1, rejection: 'response' });
    cleanups.push(() => f.close());
    expect((await f(`${server.origin}/`)).status).toBe(429);

    const refused = await f(`${server.origin}/`);

    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('600');
    expect(refused.headers.get('x-adaptive-rate-limit')).toBe('rejected;reason=max-wait');
    expect(await refused.json()).toMatchObject(refusalBody('max-wait'));
    expect(server.requests).toBe(1);
  });
});

describe('a local refusal is not a throttle', () => {
  it('classifyThrown reads an SDK error made from a local 429 as failed, so wrap neither cuts nor pauses', async () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock(), initialUnitsPerMinute: 600 });
    const local = Object.assign(new Error('429'), {
      status: 429,
      headers: new Headers({ 'retry-after': '600', 'x-adaptive-rate-limit': 'rejected;reason=max-wait' }),
    });
    expect(classifyThrown(local)).toEqual({ kind: 'failed' });

    await expect(wrap(limiter, async () => Promise.reject(local))()).rejects.toBe(local);
    expect(limiter.snapshot()).toMatchObject({ throttles: 0, pausedUntil: undefined });
  });
});

// Regression: an HTTP adapter over another (the fetch wrapper over a rate-limited global
// dispatcher, an SDK's fetch) read the inner one's local 429 as the server's: it cut and paused
// its own limiter and sent the call again after each Retry-After (4 attempts of a `closed`).
describe('a local refusal is not a throttle for an outer HTTP adapter either', () => {
  it("the fetch wrapper over another's local 429: sent once, handed over, no cut, no pause", async () => {
    const server = await serve({ capacity: 100 });
    const clock = new ManualClock();
    const inner = rateLimitedFetch({ clock, rejection: 'response' });
    inner.close();
    let calls = 0;
    const outer = rateLimitedFetch({
      clock,
      fetch: (input, init) => {
        calls++;
        return inner(input, init);
      },
    });
    cleanups.push(() => outer.close());

    const answer = await outer(`${server.origin}/`);

    expect(answer.status).toBe(429);
    expect(answer.headers.get('x-adaptive-rate-limit')).toBe('rejected;reason=closed');
    expect(calls).toBe(1);
    expect(outer.registry.limiterFor(server.origin)?.snapshot()).toMatchObject({
      throttles: 0,
      cuts: 0,
      pausedUntil: undefined,
    });
    expect(server.requests).toBe(0);
  });
});

describe('RateLimitRejectedError.retryAfterMs: the wait the limiter predicted', () => {
  it('is set for max-wait at acquire, for a waiter that expired, and for the fixed window; not once closed', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60, maxWait: 10_000 });
    limiter.tryAcquire()?.throttled(30_000);
    const atAcquire = await limiter.acquire().catch((e: RateLimitRejectedError) => e);
    expect(atAcquire).toMatchObject({ reason: 'max-wait', retryAfterMs: 30_000 });

    clock.advance(25_000);
    const waiting = limiter.acquire().catch((e: RateLimitRejectedError) => e);
    limiter.pauseFor(60_000);
    clock.advance(10_000);
    expect(await waiting).toMatchObject({ reason: 'max-wait', retryAfterMs: 50_000 });

    limiter.close();
    expect(await limiter.acquire().catch((e: RateLimitRejectedError) => e)).toMatchObject({
      reason: 'closed',
      retryAfterMs: undefined,
    });

    const window = new FixedWindowRateLimiter({
      clock,
      limitForPeriod: 1,
      limitRefreshPeriod: 60_000,
      timeoutDuration: 0,
    });
    window.tryAcquire();
    const timeout = await window.acquire().catch((e: RateLimitRejectedError) => e);
    expect(timeout).toMatchObject({ reason: 'timeout' });
    expect((timeout as RateLimitRejectedError).retryAfterMs).toBeGreaterThan(0);
  });
});
