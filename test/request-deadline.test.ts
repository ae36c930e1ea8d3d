import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateLimitRejectedError } from '../src/errors.js';
import { AdaptiveRateLimiter, FixedWindowRateLimiter, wrap } from '../src/index.js';
import { agentWith, get, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

const slowDown = (retryAfterMs: number) =>
  Object.assign(new Error('slow down'), { status: 429, retryAfterMs });

describe('one maxWait for the whole request, not one per attempt', () => {
  it('refuses the retry of a call that already waited, and rethrows its 429', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60_000, maxWait: 60_000 });
    limiter.pauseFor(40_000);
    let calls = 0;
    const wrapped = wrap(limiter, async () => {
      calls++;
      throw slowDown(30_000);
    });

    const result = wrapped().catch((e: unknown) => e);
    clock.advance(40_000);
    await flush();

    // 40 s waited + a 30 s Retry-After: more than maxWait 60 s in all, so no second attempt.
    expect(await result).toMatchObject({ message: 'slow down' });
    expect(calls).toBe(1);
    expect(limiter.snapshot().queued).toBe(0);
  });

  it('still retries a call whose waits fit in maxWait together', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60_000, maxWait: 60_000 });
    limiter.pauseFor(20_000);
    let calls = 0;
    const wrapped = wrap(limiter, async () => {
      calls++;
      if (calls === 1) throw slowDown(30_000);
      return 'ok';
    });

    const result = wrapped();
    clock.advance(20_000);
    await flush();
    expect(calls).toBe(1);
    clock.advance(30_000);
    await expect(result).resolves.toBe('ok');
    expect(calls).toBe(2);
  });

  it('acquire counts waitedMs against maxWait, and permits tell how long they waited', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60_000, maxWait: 10_000 });
    expect(limiter.tryAcquire()?.waitedMs).toBe(0);
    limiter.pauseFor(6_000);
    const refused = await limiter.acquire(1, { waitedMs: 5_000 }).catch((e: RateLimitRejectedError) => e);
    expect(refused).toMatchObject({
      reason: 'max-wait',
      message: expect.stringContaining('the 5000 ms left of maxWait 10000 ms'),
    });

    const waiting = limiter.acquire(1, { waitedMs: 3_000 });
    clock.advance(6_000);
    expect((await waiting).waitedMs).toBe(6_000);

    const window = new FixedWindowRateLimiter({
      clock,
      limitForPeriod: 1,
      limitRefreshPeriod: 10_000,
      timeoutDuration: 10_000,
    });
    window.tryAcquire();
    await expect(window.acquire(1, { waitedMs: 8_000 })).rejects.toMatchObject({ reason: 'timeout' });
  });

  it('the interceptor hands back the 429 of a request that already waited, instead of waiting maxWait again', async () => {
    const server = await serve({ capacity: 0, retryAfter: '30' });
    const clock = new ManualClock();
    const rl = limit({ clock, default: { ...NEVER_BINDS, maxWait: 60_000 } });
    const limiter = rl.registry.limiterFor(server.origin) as AdaptiveRateLimiter;
    limiter.pauseFor(40_000);

    const pending = get(agentWith(rl), `${server.origin}/`);
    await until(() => limiter.snapshot().queued === 1, 'the request to queue');
    clock.advance(40_000);

    // 40 s waited + a 30 s Retry-After: the retry would pass maxWait 60 s.
    expect((await pending).status).toBe(429);
    expect(server.requests).toBe(1);
    expect(limiter.snapshot().queued).toBe(0);
  });
});
