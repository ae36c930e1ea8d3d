import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, limit, serve } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

// `replace` and `add` take limiters out of the registry without closing them: the requests
// queued in them, or holding them for a retry, are still served. The registry's close must close
// them too: their waiters are refused (`closed`) then, as every other waiter is, not served by a
// limiter nobody can close any more, and sent after the close. The clocks are manual: nothing but
// the close can end the waits.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));
/** 60 a minute, no cold start: once its one unit is spent, the next request waits a second. */
const SLOW = { initialUnitsPerMinute: 60, slowStart: false } as const;

describe("the registry's close and the limiters replace and add took out", () => {
  it('the engine: a waiter of a replaced limiter is refused (closed) by the close', async () => {
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({
      clock,
      limiters: { api: { origins: ['https://a.test'], ...SLOW } },
    });
    cleanups.push(() => registry.close());
    const old = registry.get('api') as AdaptiveRateLimiter;
    expect(old.tryAcquire()).toBeDefined();
    const waiting = settled(old.acquire());
    registry.replace('api', { origins: ['https://a.test'], ...SLOW });
    await flush();
    expect(waiting.done).toBe(false); // replace leaves it waiting in the old limiter
    registry.close();
    await expect.poll(() => waiting.done).toBe(true);
    expect(waiting.error).toBeInstanceOf(RateLimitRejectedError);
    expect((waiting.error as RateLimitRejectedError).reason).toBe('closed');
    expect(old.snapshot()).toMatchObject({ queued: 0, closed: true });
  });

  it('interceptor: a request waiting in a replaced limiter is refused at close, never sent', async () => {
    const server = await serve({ capacity: 100 });
    const clock = new ManualClock();
    const rl = limit({ clock, limiters: { api: { origins: [server.origin], ...SLOW } } });
    const agent = agentWith(rl);
    const old = rl.registry.get('api') as AdaptiveRateLimiter;
    expect(old.tryAcquire()).toBeDefined();
    const call = settled(request(`${server.origin}/a`, { dispatcher: agent }));
    await expect.poll(() => old.snapshot().queued).toBe(1);
    rl.registry.replace('api', { origins: [server.origin], ...SLOW });
    rl.close();
    await expect.poll(() => call.done).toBe(true);
    expect(call.error).toBeInstanceOf(RateLimitRejectedError);
    expect((call.error as RateLimitRejectedError).reason).toBe('closed');
    clock.advance(60_000);
    await flush();
    expect(server.requests).toBe(0);
  });

  it("interceptor: a retry waiting in a replaced limiter's pause ends at close with the 429 it held", async () => {
    let answered = 0;
    const server = await serve({
      respond: (_req, res) => {
        answered++;
        res.writeHead(429, { 'retry-after': '30' }).end('slow down');
        return true;
      },
    });
    const clock = new ManualClock();
    const rl = limit({
      clock,
      limiters: { api: { origins: [server.origin], initialUnitsPerMinute: 6_000 } },
    });
    const agent = agentWith(rl);
    const old = rl.registry.get('api') as AdaptiveRateLimiter;
    const call = settled(
      request(`${server.origin}/a`, { dispatcher: agent }).then(async (r) => ({
        status: r.statusCode,
        body: await r.body.text(),
      })),
    );
    await expect.poll(() => old.snapshot().queued).toBe(1); // the retry, behind the pause
    rl.registry.replace('api', { origins: [server.origin], initialUnitsPerMinute: 6_000 });
    rl.close();
    await expect.poll(() => call.done).toBe(true);
    expect(call.value).toEqual({ status: 429, body: 'slow down' });
    clock.advance(60_000);
    await flush();
    expect(answered).toBe(1);
  });

  it('fetch wrapper: a request waiting in the per-origin limiter an added limiter took over is refused at close', async () => {
    const server = await serve({ capacity: 100 });
    const clock = new ManualClock();
    const limitedFetch = rateLimitedFetch({ clock, default: SLOW });
    cleanups.push(() => limitedFetch.close());
    const perOrigin = limitedFetch.registry.limiterFor(server.origin) as AdaptiveRateLimiter;
    expect(perOrigin.tryAcquire()).toBeDefined();
    const call = settled(limitedFetch(`${server.origin}/a`));
    await expect.poll(() => perOrigin.snapshot().queued).toBe(1);
    limitedFetch.registry.add('api', { origins: [server.origin], ...SLOW });
    expect(limitedFetch.registry.limiterFor(server.origin)).not.toBe(perOrigin);
    limitedFetch.close();
    await expect.poll(() => call.done).toBe(true);
    expect(call.error).toBeInstanceOf(RateLimitRejectedError);
    clock.advance(60_000);
    await flush();
    expect(server.requests).toBe(0);
  });
});
