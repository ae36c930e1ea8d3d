import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateLimitRejectedError } from '../src/errors.js';
import { kWaitCancel } from '../src/internal.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import { notSent, throttledByQuota } from '../src/limiter/permit.js';
import type { AcquireOptions, Permit, ReadQuota } from '../src/limiter/types.js';
import type { WaitCancel } from '../src/limiter/waiting-line.js';

// Attacks on two changes: own units counted in grant order (Ceilings.answer), and waiters
// refused from behind the head at their own deadline (the early heap, the budgets' line).
// Every test runs on a ManualClock and asserts state, never a duration.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

async function advance(clock: ManualClock, ms: number, step = 100) {
  for (let t = 0; t < ms; t += step) {
    clock.advance(Math.min(step, ms - t));
    await flush();
  }
}

function setup(options: AdaptiveLimiterOptions = {}) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, ...options });
  return { clock, limiter };
}

function permits(limiter: AdaptiveRateLimiter, n: number): Permit[] {
  return Array.from({ length: n }, () => {
    const permit = limiter.tryAcquire();
    if (permit === undefined) throw new Error('no permit');
    return permit;
  });
}

/** GitHub's core hour as its reader gives it (`headers: 'github'`): a burst of 900 a minute. */
const hour = (remaining: number, resetMs: number) =>
  [
    { policy: 'github:core', limit: 5_000, windowMs: 3_600_000, remaining, resetMs, burstPerMinute: 900 },
  ] as ReadQuota[];

/** What a promise settled to: 'waiting', 'granted', or the rejection's reason; and how often. */
function track(promise: Promise<unknown>) {
  const state: { now: string; error?: RateLimitRejectedError; settled: number } = {
    now: 'waiting',
    settled: 0,
  };
  promise.then(
    () => {
      state.now = 'granted';
      state.settled++;
    },
    (error: RateLimitRejectedError) => {
      state.now = error.reason ?? 'error';
      state.error = error;
      state.settled++;
    },
  );
  return state;
}

describe('grant order: own units of an announced fixed window', () => {
  it('a request that never reached the API (notSent) is not counted as this process’s part of the drain', () => {
    const { clock, limiter } = setup({ slowStart: false });
    const ps = permits(limiter, 60);
    // Per pair of its grants: one never sent (aborted after its grant, its connection refused,
    // its maxConcurrent slot refused), one answered; another client takes one unit between: the
    // remaining falls by 2 a pair, 1 of them this process's (a part of 1/2), as in the
    // 429 test of limiter-ceiling.test.ts.
    let remaining = 4_880;
    for (let i = 0; i < 60; i += 2) {
      clock.advance(10);
      notSent(ps[i] as Permit);
      remaining -= 2;
      ps[i + 1]?.success(undefined, hour(remaining, 3_000_000 - 10 * i));
    }
    // Shared with another client: not "alone on the quota", not spent at GitHub's burst.
    expect(limiter.snapshot().announcedRate).toBeLessThan(900);
  });

  it('held: a 429 (not counted by the API) between two readings is not counted as its part', () => {
    const { clock, limiter } = setup({ slowStart: false });
    const ps = permits(limiter, 60);
    let remaining = 4_880;
    for (let i = 0; i < 60; i += 2) {
      clock.advance(10);
      ps[i]?.throttled(undefined, hour(remaining, 3_000_000 - 10 * i));
      remaining -= 2;
      ps[i + 1]?.success(undefined, hour(remaining, 3_000_000 - 10 * i));
    }
    expect(limiter.snapshot().announcedRate).toBeLessThan(900);
  });

  it('held: alone on the hour with calls answered out of order, it is still spent at the burst', () => {
    const { clock, limiter } = setup({ slowStart: false });
    const ps = permits(limiter, 80);
    // Answered in pairs in reverse order (each later grant first): the API counted both.
    for (let i = 0; i < 80; i += 2) {
      clock.advance(10);
      ps[i + 1]?.success(undefined, hour(4_880 - (i + 2), 3_000_000 - 10 * i));
      ps[i]?.success(undefined, hour(4_880 - (i + 1), 3_000_000 - 10 * i));
    }
    expect(limiter.snapshot().announcedRate).toBe(900);
  });

  it('an exhausted-policy 429 (throttledByQuota, no Retry-After) answered after a later grant’s reading still pauses', () => {
    const { clock, limiter } = setup({ slowStart: false, maxPause: 3_600_000 });
    const [a, b] = permits(limiter, 2);
    // IETF RateLimit, a 10 s window: b (granted second, arrived first) read 3 left; a arrived
    // after other clients took them and was refused with r=0, the route passing its reset.
    const ietf = (remaining: number) => [
      { policy: 'w', limit: 100, windowMs: 10_000, remaining, resetMs: 8_000 },
    ];
    b?.success(undefined, ietf(3));
    clock.advance(20);
    throttledByQuota(a as Permit, 8_000, ietf(0));
    // The wait was "left to the policy" (retryAfterMs dropped for an exhausted policy), and the
    // policy ignored the answer as a slow call's: nothing pauses, the next calls go into the wall.
    expect(limiter.snapshot().pausedUntil).toBeDefined();
  });

  it('an exhausted-policy 429 whose policy read no pause (its name twice, the first with more left) keeps the route’s wait', () => {
    const { limiter } = setup({ slowStart: false, maxPause: 3_600_000 });
    const [a] = permits(limiter, 1);
    const w = (remaining: number) => ({
      policy: 'w',
      limit: 100,
      windowMs: 10_000,
      remaining,
      resetMs: 8_000,
    });
    throttledByQuota(a as Permit, 8_000, [w(3), w(0)]);
    expect(limiter.snapshot().pausedUntil).toBe(8_000);
  });

  it('held: a reset already past (resetMs 0) does not make a fixed window read as a refilling bucket', () => {
    const { clock, limiter } = setup({ slowStart: false });
    const ps = permits(limiter, 6);
    ps.forEach((p, i) => {
      clock.advance(10);
      p.success(undefined, hour(4_880 - i, i < 3 ? 0 : 3_000_000 - 10 * i));
    });
    // Not paced at the hour's average as a refilling bucket would be.
    expect(limiter.snapshot().announcedRate).toBe(900);
  });
});

describe('the waiting line: early deadlines', () => {
  it('a max-wait refusal does not claim earlier attempts for a first attempt after maxWait was raised', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60, maxWait: 10_000 });
    limiter.tryAcquire();
    limiter.pauseFor(3_000);
    const first = track(limiter.acquire());
    const messages: string[] = [];
    limiter.on('rejected', (e) => messages.push(e.message));
    // Its deadline stays 10 s; the option is raised while it waits, and a pause holds it past.
    limiter.update({ maxWait: 20_000 });
    limiter.pauseFor(30_000);
    await advance(clock, 11_000, 500);
    expect(first.now).toBe('max-wait');
    // The one attempt waited 10 s: no earlier attempt to speak of, the wait it was given.
    expect(first.error?.message).not.toMatch(/earlier attempts/);
    expect(messages[0]).toMatch(/waited 10000 ms of the 10000 ms it was given, maxWait is 20000 ms/);
    limiter.close();
  });

  it('held: the timer is armed for an early deadline queued behind a head waiting on a long pause', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60, maxWait: 60_000 });
    limiter.tryAcquire();
    limiter.pauseFor(3_000);
    const first = track(limiter.acquire());
    const retry = track(limiter.acquire(1, { waitedMs: 55_000 })); // 5 s left
    limiter.pauseFor(50_000);
    // Only the timer can refuse it: step the clock without any other kick.
    clock.advance(4_999);
    await flush();
    expect(retry.now).toBe('waiting');
    clock.advance(2);
    await flush();
    expect(retry.now).toBe('max-wait');
    expect(first.now).toBe('waiting');
    limiter.close();
    await flush();
    expect(first.now).toBe('closed');
    expect([first.settled, retry.settled]).toEqual([1, 1]);
  });

  it('held: budgets stay in step with the line through aborts, early expiries, both compactions and close', async () => {
    // 600 requests a minute, 6,000 tokens a minute in a bucket of 100: a live waiter costs 10
    // tokens (served 100 ms apart), a waiter that leaves costs 50 (a grant with its costs would
    // hold the next one 500 ms).
    const { clock, limiter } = setup({
      slowStart: false,
      maxWait: 600_000,
      budgets: {
        requests: { initialUnitsPerMinute: 600 },
        tokens: { initialUnitsPerMinute: 6_000, burst: 'second' },
      },
    });
    limiter.pauseFor(5_000);
    const live: { name: string; state: ReturnType<typeof track> }[] = [];
    const leaving: ReturnType<typeof track>[] = [];
    const controllers: AbortController[] = [];
    const grants: [string, number][] = [];
    let n = 0;
    const push = (kind: 'live' | 'early' | 'abort') => {
      const name = `${kind}${n++}`;
      if (kind === 'live') {
        const p = limiter.acquire(1, { costs: { tokens: 10 } });
        const state = track(p);
        p.then(
          () => grants.push([name, clock.now()]),
          () => {},
        );
        live.push({ name, state });
      } else if (kind === 'early') {
        leaving.push(track(limiter.acquire(1, { costs: { tokens: 50 }, waitedMs: 540_000 })));
      } else {
        const controller = new AbortController();
        controllers.push(controller);
        leaving.push(track(limiter.acquire(1, { costs: { tokens: 50 }, signal: controller.signal })));
      }
    };
    // Waves: the line's ring fills with waiters half of which leave (aborted), so the next push
    // compacts it (renumbering the early ones); 70+ budget entries, half dead, compact the
    // budgets' line too.
    for (let wave = 0; wave < 6; wave++) {
      for (let i = 0; i < 16; i++)
        push(i % 4 === 0 ? 'live' : i % 4 === 1 ? 'early' : i % 4 === 2 ? 'abort' : 'live');
      for (const c of controllers.splice(0)) c.abort(new Error('gone'));
      await flush();
    }
    expect(leaving.every((s) => s.now === 'waiting' || s.now === 'error')).toBe(true);
    // A 429's Retry-After after they were queued: the early ones (60 s left) leave at their
    // deadline from behind the head.
    limiter.pauseFor(120_000);
    await advance(clock, 70_000, 1_000);
    expect(leaving.filter((s) => s.now === 'max-wait').length).toBe(leaving.length / 2);
    expect(live.every((w) => w.state.now === 'waiting')).toBe(true);
    // After the pause: the live ones 100 ms apart, each with its own 10 tokens.
    await advance(clock, 52_000, 100);
    const served = grants.length;
    expect(served).toBeGreaterThan(10);
    const gaps = grants.slice(1).map(([, at], i) => at - (grants[i] as [string, number])[1]);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(100);
    expect(grants.map(([name]) => name)).toEqual(live.slice(0, served).map((w) => w.name));
    limiter.close();
    await flush();
    expect(live.every((w) => w.state.settled === 1)).toBe(true);
    expect(live.slice(served).every((w) => w.state.now === 'closed')).toBe(true);
    expect(leaving.every((s) => s.settled === 1)).toBe(true);
    expect(limiter.snapshot().queued).toBe(0);
    expect(limiter.snapshot().queuedUnits).toBe(0);
  });

  it('held: an adapter’s waiter refused from behind the head is told once, and its later cancel reaches nobody', async () => {
    for (const budgets of [false, true]) {
      const { clock, limiter } = setup({
        slowStart: false,
        initialUnitsPerMinute: 60,
        maxWait: 60_000,
        ...(budgets
          ? {
              budgets: {
                requests: { initialUnitsPerMinute: 60 },
                tokens: { initialUnitsPerMinute: 6_000, burst: 'second' },
              },
            }
          : {}),
      });
      limiter.tryAcquire(1, budgets ? { tokens: 1 } : undefined);
      limiter.pauseFor(3_000);
      const events: string[] = [];
      limiter.on('canceled', () => events.push('canceled'));
      limiter.on('rejected', (e) => events.push(`rejected ${e.reason}`));
      const first = track(limiter.acquire(1, budgets ? { costs: { tokens: 1 } } : undefined));
      const told: string[] = [];
      const cancel: WaitCancel = {
        waitingIn: undefined,
        waitSeq: 0,
        granted: () => told.push('granted'),
        refused: (e) => told.push(`refused ${(e as RateLimitRejectedError).reason}`),
      };
      const options = {
        waitedMs: 55_000,
        [kWaitCancel]: cancel,
        costs: budgets ? { tokens: 50 } : undefined,
      };
      const retry = budgets ? track(limiter.acquire(1, options as AcquireOptions)) : undefined;
      if (!budgets) void limiter.acquire(1, options as AcquireOptions);
      const after = track(limiter.acquire(1, budgets ? { costs: { tokens: 1 } } : undefined));
      limiter.pauseFor(20_000);
      await advance(clock, 6_000, 500);
      if (budgets) expect(retry?.now).toBe('max-wait');
      else {
        expect(told).toEqual(['refused max-wait']);
        expect(cancel.waitingIn).toBeUndefined();
      }
      // The adapter cancels it late (its caller went away): nobody else is taken out, no event.
      cancel.waitingIn?.cancel(cancel.waitSeq, new Error('late'));
      await flush();
      expect(events).toEqual(['rejected max-wait']);
      expect(limiter.snapshot()).toMatchObject({ queued: 2, queuedUnits: 2 });
      await advance(clock, 16_000, 500);
      expect([first.now, after.now]).toEqual(['granted', 'granted']);
      if (!budgets) expect(told).toEqual(['refused max-wait']);
      limiter.close();
    }
  });
});
