import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { noAnswer, notSent } from '../src/limiter/permit.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { wrap } from '../src/wrap/wrap.js';
import { advanceUntil, agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// A real node:http server announcing an IETF quota, then resetting connections; the limiter on a
// ManualClock. "Past a policy's reset, 4 answers in a row that leave it out forget it": a transport
// error is no answer, and leaves no policy out.

/** An hour's quota of 100 (50 min to its reset: 1.67 a minute at most); requests 2-5 are reset. */
async function resettingServer() {
  let n = 0;
  return serve({
    respond: (req, res) => {
      n++;
      if (n >= 2 && n <= 5) {
        req.socket.destroy();
        return true;
      }
      res
        .writeHead(200, {
          'ratelimit-policy': '"hourly";q=100;w=3600',
          ratelimit: `"hourly";r=${100 - n};t=3000`,
        })
        .end('ok');
      return true;
    },
  });
}

type Send = (url: string) => Promise<number>;

/**
 * The quota is read; 4 requests meet a reset connection; then 10 are sent together: how many go
 * at once (the others wait, or are refused at once for a wait past `maxWait`), and the 10.
 */
async function sentAtOnceAfterResets(
  server: Awaited<ReturnType<typeof resettingServer>>,
  clock: ManualClock,
  send: Send,
  limiterOf: () => { snapshot(): { announcedRate?: number; queued: number } } | undefined,
): Promise<{ sent: number; all: Promise<unknown>[] }> {
  const url = `${server.origin}/`;
  expect(await send(url)).toBe(200);
  const limiter = limiterOf();
  if (limiter === undefined) throw new Error('no limiter');
  expect(limiter.snapshot().announcedRate).toBeCloseTo(1.67, 1);
  for (let i = 0; i < 4; i++) {
    let settled = false;
    const failed = send(url).then(
      () => 'answered',
      () => 'error',
    );
    void failed.then(() => {
      settled = true;
    });
    await advanceUntil(clock, () => settled, `failed request ${i + 1}`);
    expect(await failed).toBe('error');
  }
  // The server announced nothing else: the quota still caps the rate.
  expect(limiter.snapshot().announcedRate).toBeCloseTo(1.67, 1);
  const before = server.requests;
  let refused = 0;
  const all = Array.from({ length: 10 }, () =>
    send(url).catch(() => {
      refused++;
    }),
  );
  await until(
    () => server.requests - before + limiter.snapshot().queued + refused === 10,
    'every request at the server, queued or refused',
  );
  return { sent: server.requests - before, all };
}

describe('announced quotas through transport errors', () => {
  it('keeps an announced quota through connection resets (the interceptor)', async () => {
    const server = await resettingServer();
    const clock = new ManualClock();
    const rl = limit({ clock });
    const agent = agentWith(rl);
    const { sent, all } = await sentAtOnceAfterResets(
      server,
      clock,
      async (url) => (await get(agent, url)).status,
      () => rl.registry.get(server.origin),
    );
    rl.close();
    await Promise.allSettled(all);
    expect(sent).toBeLessThanOrEqual(1);
  });

  it('keeps an announced quota through connection resets (the fetch wrapper)', async () => {
    const server = await resettingServer();
    const clock = new ManualClock();
    const limited = rateLimitedFetch({ clock });
    cleanups.push(() => limited.close());
    const { sent, all } = await sentAtOnceAfterResets(
      server,
      clock,
      async (url) => {
        const response = await limited(url);
        await response.arrayBuffer();
        return response.status;
      },
      () => limited.registry.get(server.origin),
    );
    limited.close();
    await Promise.allSettled(all);
    expect(sent).toBeLessThanOrEqual(1);
  });

  it("keeps an announced quota through an SDK's connection resets (wrap, the default classifyError)", async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock });
    let reset = false;
    const call = wrap(
      limiter,
      async () => {
        if (reset) throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
        return 'ok';
      },
      {
        maxAttempts: 1,
        classify: () => ({
          kind: 'success',
          quota: [{ policy: 'p', limit: 60, windowMs: 60_000, remaining: 50, resetMs: 30_000 }],
        }),
      },
    );
    await call();
    const announced = limiter.snapshot().announcedRate;
    expect(announced).toBeDefined();
    reset = true;
    for (let i = 0; i < 4; i++) {
      clock.advance(1_000);
      await call().catch(() => undefined);
    }
    // Before: classifyThrown made each reset an answer that left the policy out; after 4 the
    // limiter forgot the quota (announcedRate undefined) and went unlimited.
    expect(limiter.snapshot().announcedRate).toBe(announced);
    limiter.close();
  });

  it('a request not sent or without an answer leaves the policies as they were; a failed answer does not', () => {
    // The one-second bucket: the answers go without moving the clock.
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, burst: 'second' });
    const acquire = () => {
      const permit = limiter.tryAcquire();
      if (permit === undefined) throw new Error('no permit');
      return permit;
    };
    acquire().success(undefined, [{ limit: 6_000, windowMs: 60_000 }]);
    // Past the window the reading is kept for (see Ceilings): an answer without it forgets it.
    clock.advance(60_000);
    for (let i = 0; i < 4; i++) notSent(acquire());
    expect(limiter.snapshot().announcedRate).toBe(6_000);
    for (let i = 0; i < 4; i++) noAnswer(acquire());
    expect(limiter.snapshot().announcedRate).toBe(6_000);
    // A failed answer (a 5xx) is an answer that left the policy out: 4 in a row forget it.
    for (let i = 0; i < 3; i++) acquire().failed();
    expect(limiter.snapshot().announcedRate).toBe(6_000);
    acquire().failed();
    expect(limiter.snapshot().announcedRate).toBeUndefined();
  });

  it('a request of several budgets without an answer leaves the policies of every budget as they were', () => {
    const limiter = new AdaptiveRateLimiter({
      clock: new ManualClock(),
      slowStart: false,
      budgets: { requests: { burst: 'second' }, tokens: { burst: 'second' } },
    });
    const acquire = () => {
      const permit = limiter.tryAcquire(1, { tokens: 1 });
      if (permit === undefined) throw new Error('no permit');
      return permit;
    };
    acquire().success(undefined, [
      { limit: 6_000, windowMs: 60_000 },
      { budget: 'tokens', limit: 60_000, windowMs: 60_000 },
    ]);
    const rates = () => {
      const { budgets } = limiter.snapshot();
      return [budgets?.requests?.announcedRate, budgets?.tokens?.announcedRate];
    };
    for (let i = 0; i < 4; i++) notSent(acquire());
    expect(rates()).toEqual([6_000, 60_000]);
    for (let i = 0; i < 4; i++) noAnswer(acquire());
    expect(rates()).toEqual([6_000, 60_000]);
  });

  it('a request of a shared budget without an answer leaves the policies as they were', () => {
    const budget = createSharedBudget({
      store: new MemoryBudgetStore(),
      name: 'transport',
      clock: new ManualClock(),
      initialUnitsPerMinute: 60_000,
      burst: 'second',
    });
    cleanups.push(() => budget.close());
    const acquire = () => {
      const permit = budget.tryAcquire();
      if (permit === undefined) throw new Error('no permit');
      return permit;
    };
    acquire().success(undefined, [{ limit: 6_000, windowMs: 60_000 }]);
    for (let i = 0; i < 4; i++) notSent(acquire());
    expect(budget.limiter.snapshot().announcedRate).toBe(6_000);
    for (let i = 0; i < 4; i++) noAnswer(acquire());
    expect(budget.limiter.snapshot().announcedRate).toBe(6_000);
  });
});
