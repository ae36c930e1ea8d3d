import diagnosticsChannel from 'node:diagnostics_channel';
import { describe, expect, it, vi } from 'vitest';
import { runAttempts } from '../src/attempt-loop.js';
import { ManualClock } from '../src/clock.js';
import { attachDiagnostics, DIAGNOSTICS_CHANNELS } from '../src/diagnostics.js';
import { InvalidArgumentError, RateLimitRejectedError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import type { Permit } from '../src/limiter/types.js';
import { wrap } from '../src/wrap/wrap.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** 600 requests/min paced (one each 100 ms) and 6,000 tokens/min in a one-second bucket (100 tokens). */
const TWO: AdaptiveLimiterOptions = {
  budgets: {
    requests: { initialUnitsPerMinute: 600 },
    tokens: { initialUnitsPerMinute: 6_000, burst: 'second' },
  },
};

function setup(options: AdaptiveLimiterOptions = TWO) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, slowStart: false, ...options });
  return { clock, limiter };
}

/** Acquires in order; records the order and the clock of each grant. */
function queue(limiter: AdaptiveRateLimiter, clock: ManualClock, tokens: number[]) {
  const granted: { i: number; at: number; permit: Permit }[] = [];
  const promises = tokens.map((t, i) =>
    limiter
      .acquire(1, { costs: { tokens: t } })
      .then((permit) => granted.push({ i, at: clock.now(), permit })),
  );
  return { granted, promises };
}

describe('a limiter of several budgets', () => {
  it('grants a request only when every budget it draws from can, taking from all at once', () => {
    const { limiter } = setup();
    expect(limiter.tryAcquire(1, { tokens: 80 })).toBeDefined();
    // The request budget's next slot is 100 ms away, and 20 tokens are left.
    expect(limiter.tryAcquire(1, { tokens: 10 })).toBeUndefined();
    const snapshot = limiter.snapshot();
    expect(snapshot.budget).toBe('requests');
    expect(snapshot.budgets?.tokens?.tokens).toBeCloseTo(20);
    expect(snapshot.budgets?.tokens?.budget).toBe('tokens');
  });

  it('tells a wait to the budget that held the head back, whose controller raises it, and not to one that had room', async () => {
    // Requests (the first budget) have room for 100/s; the tokens (600/min, 10 a second) bind.
    const { clock, limiter } = setup({
      controller: 'aimd',
      aimd: { increaseInterval: 1_000, increaseStep: 60 },
      budgets: {
        requests: { initialUnitsPerMinute: 6_000 },
        tokens: { initialUnitsPerMinute: 600, burst: 'second' },
      },
    });
    // Two calls of 10 tokens a second, each answered at once: bounded, 100 simulated seconds.
    for (let i = 0; i < 200; i++) {
      void limiter.acquire(1, { costs: { tokens: 10 } }).then((permit) => permit.success());
      clock.advance(500);
      await flush();
    }
    const s = limiter.snapshot();
    expect(s.budgets?.tokens?.rate).toBeGreaterThan(600);
    expect(s.budgets?.requests?.rate).toBe(6_000);
    expect(s.budgets?.requests?.waited).toBe(false);
    limiter.close();
  });

  it('tells a wait to the second budget when it binds, and none to the first, which has room', async () => {
    // The tokens (the first budget) have room; the requests (one a second) bind.
    const { clock, limiter } = setup({
      controller: 'aimd',
      aimd: { increaseInterval: 1_000, increaseStep: 60 },
      budgets: {
        tokens: { initialUnitsPerMinute: 60_000, burst: 'second' },
        requests: { initialUnitsPerMinute: 60 },
      },
    });
    const permits: Permit[] = [];
    for (let i = 0; i < 3; i++)
      void limiter.acquire(10, { costs: { requests: 1 } }).then((p) => permits.push(p));
    await flush();
    expect(permits).toHaveLength(1);
    expect(limiter.snapshot().budgets?.requests?.waited).toBe(true);
    expect(limiter.snapshot().budgets?.tokens?.waited).toBe(false);
    for (let i = 0; i < 4; i++) {
      clock.advance(1_000);
      await flush();
      for (const permit of permits.splice(0)) permit.success();
    }
    const s = limiter.snapshot();
    expect(s.budgets?.requests?.rate).toBeGreaterThan(60);
    expect(s.budgets?.tokens?.rate).toBe(60_000);
    expect(s.budgets?.tokens?.waited).toBe(false);
  });

  it('serves waiters first in, first out: a small request waits behind a large one, and nothing is held meanwhile', async () => {
    const { clock, limiter } = setup();
    const { granted } = queue(limiter, clock, [100, 100, 5]);
    await flush();
    expect(granted.map((g) => g.i)).toEqual([0]);
    // 100 ms later the request budget has a slot but the tokens are short: nobody goes, and no
    // request slot is taken while the tokens refill.
    clock.advance(100);
    await flush();
    expect(granted.map((g) => g.i)).toEqual([0]);
    clock.advance(900);
    await flush();
    expect(granted.map((g) => g.i)).toEqual([0, 1]);
    expect(granted[1]?.at).toBe(1_000);
    // The small one went right after, at its request slot.
    clock.advance(100);
    await flush();
    expect(granted.map((g) => g.i)).toEqual([0, 1, 2]);
    expect(granted[2]?.at).toBe(1_100);
  });

  it('serves a request larger than a whole budget once that budget is full, leaving it in debt', async () => {
    const { clock, limiter } = setup();
    const { granted } = queue(limiter, clock, [250, 10]);
    await flush();
    expect(granted.map((g) => g.i)).toEqual([0]);
    expect(limiter.snapshot().budgets?.tokens?.tokens).toBeCloseTo(-150);
    // 150 tokens owed, then 10 more: 1.6 s at 100 tokens/s.
    clock.advance(1_599);
    await flush();
    expect(granted).toHaveLength(1);
    clock.advance(1);
    await flush();
    expect(granted.map((g) => g.i)).toEqual([0, 1]);
  });

  it('rejects at once a request whose wait for any budget passes maxWait, counting the tokens queued ahead', async () => {
    const { clock, limiter } = setup({ ...TWO, maxWait: 1_500 });
    const { granted } = queue(limiter, clock, [100, 100]);
    await expect(limiter.acquire(1, { costs: { tokens: 100 } })).rejects.toMatchObject({
      reason: 'max-wait',
    });
    await flush();
    expect(granted).toHaveLength(1);
    clock.advance(1_000);
    await flush();
    expect(granted).toHaveLength(2);
  });

  it('gives an aborted waiter’s place to the next one, with the next one’s costs', async () => {
    const { clock, limiter } = setup();
    expect(limiter.tryAcquire(1, { tokens: 100 })).toBeDefined();
    const abort = new AbortController();
    const big = limiter.acquire(1, { costs: { tokens: 100 }, signal: abort.signal });
    const small = limiter.acquire(1, { costs: { tokens: 10 } });
    abort.abort(new Error('gone'));
    await expect(big).rejects.toThrow('gone');
    clock.advance(100);
    await expect(small).resolves.toBeDefined();
    expect(clock.now()).toBe(100);
  });

  it('cuts only the budget that ran out, and all of them when that cannot be told', () => {
    const { limiter } = setup();
    const throttled = vi.fn();
    limiter.on('throttled', throttled);
    limiter.tryAcquire(1, { tokens: 10 })?.throttled(undefined, undefined, ['tokens']);
    let s = limiter.snapshot();
    expect(s.budgets?.tokens?.cuts).toBe(1);
    expect(s.budgets?.requests?.cuts).toBe(0);
    expect(throttled).toHaveBeenCalledWith(expect.objectContaining({ budget: 'tokens', cut: true }));
    expect(throttled).toHaveBeenCalledTimes(1);

    const { limiter: other } = setup();
    other
      .tryAcquire(1, { tokens: 10 })
      ?.throttled(undefined, [{ budget: 'tokens', remaining: 0, resetMs: 1_000 }]);
    s = other.snapshot();
    expect([s.budgets?.requests?.throttles, s.budgets?.tokens?.throttles]).toEqual([0, 1]);

    const { limiter: third } = setup();
    third.tryAcquire(1, { tokens: 10 })?.throttled();
    s = third.snapshot();
    expect([s.budgets?.requests?.throttles, s.budgets?.tokens?.throttles]).toEqual([1, 1]);
  });

  it('names the budget on the diagnostics channels', () => {
    const { limiter } = setup();
    attachDiagnostics(limiter);
    const messages: unknown[] = [];
    const listener = (message: unknown) => messages.push(message);
    diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNELS.throttle, listener);
    try {
      limiter.tryAcquire(1, { tokens: 10 })?.throttled(2_000, undefined, ['tokens']);
    } finally {
      diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNELS.throttle, listener);
    }
    expect(messages).toEqual([expect.objectContaining({ budget: 'tokens', cut: true, retryAfterMs: 2_000 })]);
  });

  it('pauses only the budget a Retry-After came for; requests drawing none of it still go', async () => {
    const { clock, limiter } = setup();
    limiter.tryAcquire(1, { tokens: 10 })?.throttled(5_000, undefined, ['tokens']);
    clock.advance(100);
    expect(limiter.tryAcquire(1, { tokens: 1 })).toBeUndefined();
    expect(limiter.tryAcquire(1)).toBeDefined();
    const waiting = limiter.acquire(1, { costs: { tokens: 1 } });
    clock.advance(4_900);
    await expect(waiting).resolves.toBeDefined();
    expect(clock.now()).toBe(5_000);
  });

  it('charges a correction after the permit was settled', () => {
    const { limiter } = setup();
    limiter.tryAcquire(1, { tokens: 90 })?.success();
    limiter.charge({ tokens: -50 });
    expect(limiter.snapshot().budgets?.tokens?.tokens).toBeCloseTo(60);
  });

  // Regression: a misspelled budget, NaN or a string was dropped in silence (a refund lost).
  it('refuses a charge of a budget it does not have, or of no finite number, naming it, and charges nothing', () => {
    const { limiter } = setup();
    limiter.tryAcquire(1, { tokens: 90 })?.success();
    const before = limiter.snapshot().budgets?.tokens?.tokens;
    for (const [units, message] of [
      [
        { tokens: -50, tokns: -50 },
        /charge\(\): units\.tokns: no such budget \(budgets: requests, tokens\) \(received -50\)/,
      ],
      [{ tokens: Number.NaN }, /charge\(\): units\.tokens: must be a finite number .*\(received NaN\)/],
      [{ tokens: '5' }, /units\.tokens: must be a finite number .*\(received "5"\)/],
      [Number.POSITIVE_INFINITY, /charge\(\): units: must be a finite number .*\(received Infinity\)/],
    ] as const) {
      expect(() => limiter.charge(units as never)).toThrow(InvalidArgumentError);
      expect(() => limiter.charge(units as never)).toThrow(message);
    }
    expect(limiter.snapshot().budgets?.tokens?.tokens).toBe(before);
    expect(() => new AdaptiveRateLimiter().charge({ tokens: 5 })).toThrow(
      /units\.tokens: no such budget \(the limiter has no budgets: charge a number\)/,
    );
  });

  it('updates every budget with the options they share, and the first budget with its rates', () => {
    const { limiter } = setup();
    limiter.update({ maxPause: 1_000, instanceCount: 2, minUnitsPerMinute: 60, budgets: TWO.budgets });
    const s = limiter.snapshot();
    expect([s.budgets?.requests?.instanceCount, s.budgets?.tokens?.instanceCount]).toEqual([2, 2]);
    // Each budget's share of its own rate: 600 / 2 and 6,000 / 2.
    expect([s.budgets?.requests?.rate, s.budgets?.tokens?.rate]).toEqual([300, 3_000]);
    expect(s.budgets?.requests?.minRate).toBe(30);
    expect(s.budgets?.tokens?.minRate).toBe(0.5);
    limiter.tryAcquire(1, { tokens: 1 })?.throttled(60_000, undefined, ['tokens']);
    expect(limiter.snapshot().budgets?.tokens?.pausedUntil).toBe(1_000);
    expect(() => limiter.update({ budgets: { requests: {} } })).toThrow(/budgets: cannot change at run time/);
  });

  it('names the budgets it has when costs name another, and checks each cost', () => {
    const { limiter } = setup();
    expect(() => limiter.tryAcquire(1, { token: 5 })).toThrow(InvalidArgumentError);
    expect(() => limiter.tryAcquire(1, { token: 5 })).toThrow(/no such budget \(budgets: requests, tokens\)/);
    expect(() => limiter.tryAcquire(1, { tokens: -1 })).toThrow(/costs\.tokens/);
  });

  it('spends the announced bucket at once, less the reserve, then paces at its refill', async () => {
    const { clock, limiter } = setup({
      budgets: { requests: {}, tokens: { burst: 'announced', reserve: 1_500 } },
    });
    // Unlimited until the API announces: 40,000 tokens/min, 10,000 left.
    limiter
      .tryAcquire(1, { tokens: 100 })
      ?.success(undefined, [
        { budget: 'tokens', limit: 40_000, windowMs: 60_000, remaining: 10_000, resetMs: 1.5 },
      ]);
    // 10,000 - 1,000 (1.5 s of 40,000/min) = 9,000 at once.
    let n = 0;
    while (limiter.tryAcquire(1, { tokens: 1_000 }) !== undefined) n++;
    expect(n).toBe(9);
    const { granted } = queue(limiter, clock, [1_000]);
    clock.advance(1_499);
    await flush();
    expect(granted).toHaveLength(0);
    clock.advance(1);
    await flush();
    expect(granted).toHaveLength(1);
  });

  it('refuses a waiter whose deadline passed while another budget held the head before it back', async () => {
    // 24,000 requests/min paced (a slot each 2.5 ms), 6,000 tokens/min in a one-second bucket.
    const { clock, limiter } = setup({
      maxWait: 60_000,
      budgets: {
        requests: { initialUnitsPerMinute: 24_000 },
        tokens: { initialUnitsPerMinute: 6_000, burst: 'second' },
      },
    });
    const granted: number[] = [];
    limiter.on('acquired', () => granted.push(clock.now()));
    const refused: unknown[] = [];
    const acquire = (tokens: number | undefined, waitedMs = 0) =>
      void limiter
        .acquire(1, { waitedMs, ...(tokens === undefined ? {} : { costs: { tokens } }) })
        .catch((e: unknown) => refused.push(e));
    // The tokens are spent; the head needs 10 more (100 ms of them). Behind it, a request that
    // draws no tokens and has 150 ms of its maxWait left.
    acquire(100);
    acquire(10);
    acquire(undefined, 60_000 - 150);
    await flush();
    expect(granted).toEqual([0]);
    // An answer's usage costs 5.2 tokens more: the head goes at 152 ms, past the other's deadline.
    limiter.charge({ tokens: 5.2 });
    clock.advance(200);
    await flush();
    expect(granted).toHaveLength(2);
    expect(granted[1]).toBeCloseTo(152, 6);
    // The one behind it could not have gone by its deadline: refused, not served 2 ms after it.
    expect(refused).toHaveLength(1);
    expect(refused[0]).toBeInstanceOf(RateLimitRejectedError);
    expect((refused[0] as RateLimitRejectedError).reason).toBe('max-wait');
    limiter.close();
  });
});

describe('a request that never reached the API', () => {
  const tokensLeft = (limiter: AdaptiveRateLimiter) =>
    limiter.snapshot().budgets?.tokens?.tokens ?? Number.NaN;
  const requestsLeft = (limiter: AdaptiveRateLimiter) =>
    limiter.snapshot().budgets?.requests?.tokens ?? Number.NaN;

  it('its slot refused after its units: the tokens are given back, the request stays drawn', async () => {
    const { limiter } = setup();
    const [tokens, requests] = [tokensLeft(limiter), requestsLeft(limiter)];
    const refusal = new Error('no slot');
    const sent = vi.fn(async () => 'answer');
    const run = runAttempts({
      limiter,
      units: 1,
      costs: { tokens: 60 },
      maxAttempts: 2,
      unitsFirst: true,
      slot: () => Promise.reject(refusal),
      send: sent,
      classify: () => ({ kind: 'success' }),
    });
    await expect(run).rejects.toBe(refusal);
    expect(sent).not.toHaveBeenCalled();
    expect(tokensLeft(limiter)).toBeCloseTo(tokens);
    expect(requestsLeft(limiter)).toBeCloseTo(requests - 1);
  });

  it('a send that failed with notSent gives the tokens back; one that failed otherwise keeps them', async () => {
    for (const notSent of [true, false]) {
      const { limiter } = setup();
      const tokens = tokensLeft(limiter);
      const run = runAttempts({
        limiter,
        units: 1,
        costs: { tokens: 60 },
        maxAttempts: 2,
        send: () => Promise.reject(new Error('down')),
        classify: () => ({ kind: 'success' }),
        classifyError: () => (notSent ? { kind: 'failed', notSent: true } : { kind: 'failed' }),
      });
      await expect(run).rejects.toThrow('down');
      expect(tokensLeft(limiter)).toBeCloseTo(notSent ? tokens : tokens - 60);
    }
  });
});

describe('wrap with budgets', () => {
  it('draws the costs a function of the call gives, from its arguments', async () => {
    const { limiter } = setup();
    const complete = wrap(limiter, async (request: { max_tokens: number }) => request.max_tokens, {
      costs: (request: { max_tokens: number }) => ({ tokens: request.max_tokens }),
    });
    expect(await complete({ max_tokens: 70 })).toBe(70);
    expect(limiter.snapshot().budgets?.tokens?.tokens).toBeCloseTo(30);
  });
});

describe('a limiter of one budget', () => {
  it('reads the quotas of its requests budget and of none, and ignores those of another budget', () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock });
    limiter.tryAcquire()?.success(undefined, [{ budget: 'tokens', limit: 60, windowMs: 60_000 }]);
    expect(limiter.snapshot().announcedRate).toBeUndefined();
    limiter.tryAcquire()?.success(undefined, [{ budget: 'requests', limit: 120, windowMs: 60_000 }]);
    expect(limiter.snapshot().announcedRate).toBe(120);
    expect(limiter.snapshot().budget).toBeUndefined();
  });
});
