import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { type RateLimitedFetchOptions, rateLimitedFetch } from '../src/http/fetch.js';
import { cleanups, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';
import type { RateLimitedServer } from './helpers/rate-limited-server.js';

// The fetch wrapper meters one call against the origin it was called with; Node's fetch follows
// the redirects itself. An answer from the origin a redirect led to is that origin's: its 429
// paused and retried the first origin, whose server had answered with a redirect.

/** A server that redirects every request to `target`'s `/moved`. */
async function redirectingTo(target: () => string): Promise<RateLimitedServer> {
  return serve({
    respond: (_req, res) => {
      res.writeHead(302, { location: `${target()}/moved` });
      res.end();
      return true;
    },
  });
}

/** A server that answers every request with a 429 and `Retry-After: retryAfter`. */
async function throttling(retryAfter: string): Promise<RateLimitedServer> {
  return serve({
    respond: (_req, res) => {
      res.writeHead(429, { 'retry-after': retryAfter, 'content-type': 'text/plain' });
      res.end('slow down');
      return true;
    },
  });
}

function wrapper(options: RateLimitedFetchOptions) {
  const f = rateLimitedFetch({ fetch: globalThis.fetch, ...options });
  cleanups.push(() => f.close());
  return f;
}

describe('rateLimitedFetch: a redirect to another origin', () => {
  it("a 429 from the origin redirected to pauses that origin's limiter, not the first one's", async () => {
    const b = await throttling('30');
    const a = await redirectingTo(() => b.origin);
    const clock = new ManualClock();
    const f = wrapper({ clock, default: NEVER_BINDS, maxAttempts: 1 });

    const response = await f(`${a.origin}/start`);

    expect(response.status).toBe(429);
    expect(response.redirected).toBe(true);
    expect(response.url).toBe(`${b.origin}/moved`);
    expect(await response.text()).toBe('slow down');
    const first = f.registry.limiterFor(a.origin)?.snapshot();
    expect(first?.pausedUntil).toBeUndefined();
    expect(first?.throttles).toBe(0);
    expect(f.registry.limiterFor(b.origin)?.snapshot().pausedUntil).toBe(clock.now() + 30_000);
  });

  it('is returned as it is, not retried through the first origin', async () => {
    const b = await throttling('0');
    const a = await redirectingTo(() => b.origin);
    const f = wrapper({ clock: new ManualClock(), default: NEVER_BINDS, maxAttempts: 3 });

    const response = await f(`${a.origin}/start`, { method: 'HEAD' });

    expect(response.status).toBe(429);
    expect([a.requests, b.requests]).toEqual([1, 1]);
    expect(f.registry.limiterFor(a.origin)?.snapshot().throttles).toBe(0);
  });

  it('a redirect within the origin: its 429 is still that origin’s, retried', async () => {
    let seen = 0;
    const a = await serve({
      respond: (req, res) => {
        seen++;
        if (req.url === '/start') res.writeHead(302, { location: '/moved' });
        else if (seen <= 2) res.writeHead(429, { 'retry-after': '0' });
        else res.writeHead(200);
        res.end();
        return true;
      },
    });
    const f = wrapper({ clock: new ManualClock(), default: NEVER_BINDS, maxAttempts: 2 });

    const response = await f(`${a.origin}/start`);

    expect(response.status).toBe(200);
    expect(a.requests).toBe(4);
    expect(f.registry.limiterFor(a.origin)?.snapshot().throttles).toBe(1);
  });

  it('two origins of one named limiter: the 429 counts against that limiter', async () => {
    const b = await throttling('0');
    const a = await redirectingTo(() => b.origin);
    const f = wrapper({
      clock: new ManualClock(),
      limiters: { both: { origins: [a.origin, b.origin], ...NEVER_BINDS } },
      maxAttempts: 2,
    });

    const response = await f(`${a.origin}/start`);

    expect(response.status).toBe(429);
    expect([a.requests, b.requests]).toEqual([2, 2]);
    expect(f.registry.get('both')?.snapshot().throttles).toBe(2);
  });
});
