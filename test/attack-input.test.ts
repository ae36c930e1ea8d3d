import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import { AdaptiveRateLimitError, ConfigError, InvalidArgumentError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import type { AnnouncedQuota } from '../src/limiter/types.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { wrap } from '../src/wrap/wrap.js';
import { cleanups, serve } from './helpers/interceptor-fixtures.js';

// Hostile input at the public entry points. The project's rule: bad input gets a typed error
// (an AdaptiveRateLimitError: ConfigError, InvalidArgumentError) that names the field and the
// value; nothing is accepted and then lost or misread in silence; documented-valid edge values
// work.

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

function limiter(options: ConstructorParameters<typeof AdaptiveRateLimiter>[0] = {}) {
  return new AdaptiveRateLimiter({
    clock: new ManualClock(),
    initialUnitsPerMinute: 60,
    slowStart: false,
    ...options,
  });
}

describe('maxUnitsPerMinute: Infinity, the documented default ("unbounded")', () => {
  it('is accepted at construction, as the default it is', () => {
    // options.ts: `@default Infinity`; docs/options.md: "unbounded". A caller spelling the default
    // out (or copying snapshot().maxRate) must not get a ConfigError.
    const error = thrown(
      () => new AdaptiveRateLimiter({ clock: new ManualClock(), maxUnitsPerMinute: Infinity }),
    );
    expect(error).toBeUndefined();
  });

  it('lifts a cap at run time with update(), back to unbounded', () => {
    const l = limiter({ maxUnitsPerMinute: 600 });
    expect(thrown(() => l.update({ maxUnitsPerMinute: Infinity }))).toBeUndefined();
    expect(l.snapshot().maxRate).toBe(Infinity);
  });
});

describe('setRate() and pauseFor() take numbers only', () => {
  it('setRate("5") is an InvalidArgumentError, not a rate that is a string', () => {
    const l = limiter();
    const error = thrown(() => l.setRate('5' as never));
    // The rate is otherwise stored as given: snapshot().rate === "5" (a string), and any later
    // `rate + x` concatenates.
    expect(typeof l.snapshot().rate).toBe('number');
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toContain('"5"');
  });

  it('setRate(true) is an InvalidArgumentError, not a rate of `true`', () => {
    const l = limiter();
    const error = thrown(() => l.setRate(true as never));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(l.snapshot().rate).toBe(60);
  });

  it('setRate(Symbol()) and pauseFor(Symbol()) are InvalidArgumentErrors, not a bare TypeError', () => {
    const l = limiter();
    for (const call of [() => l.setRate(Symbol('r') as never), () => l.pauseFor(Symbol('p') as never)]) {
      const error = thrown(call);
      expect(error).toBeInstanceOf(AdaptiveRateLimitError);
      expect((error as AdaptiveRateLimitError).code).toBe('ERR_INVALID_ARGUMENT');
    }
  });

  it('pauseFor(null), pauseFor([]), pauseFor(true) and pauseFor("5000") are refused, not read as 0, 0, 1 and 5000 ms', () => {
    for (const value of [null, [], true, '5000']) {
      const l = limiter();
      const error = thrown(() => l.pauseFor(value as never));
      expect(error, `pauseFor(${JSON.stringify(value)})`).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe('ms');
    }
  });
});

describe('acquire() options', () => {
  it('a waitedMs that is no number >= 0 (NaN, -1, "5") is refused, not read as 0', async () => {
    // AcquireOptions.waitedMs: "ms, >= 0". waitedBefore() turns anything else into 0 in silence,
    // so a retry whose caller computed NaN waits a whole fresh maxWait.
    for (const waitedMs of [Number.NaN, -1, '5000']) {
      const clock = new ManualClock();
      const l = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60, slowStart: false });
      l.tryAcquire(); // the next one has to wait
      const outcome = l.acquire(1, { waitedMs } as never).then(
        () => 'granted',
        (error: unknown) => error,
      );
      clock.advance(1_000);
      const result = await outcome;
      l.close();
      expect(result, `waitedMs ${String(waitedMs)}`).toBeInstanceOf(InvalidArgumentError);
      expect((result as InvalidArgumentError).argument).toBe('waitedMs');
    }
  });

  it('a misspelt or unknown option (maxWait per call, signl) is refused, not ignored', async () => {
    const clock = new ManualClock();
    const l = new AdaptiveRateLimiter({
      clock,
      initialUnitsPerMinute: 60,
      slowStart: false,
      maxWait: 60_000,
    });
    l.tryAcquire();
    const controller = new AbortController();
    // The caller thinks it capped this wait at 0 ms, or can abort it; it waits up to 60 s instead,
    // and the abort does nothing.
    const pending = l.acquire(1, { maxWait: 0, signl: controller.signal } as never);
    const outcome = pending.then(
      () => 'granted',
      (error: unknown) => error,
    );
    controller.abort(new Error('aborted'));
    clock.advance(1_000);
    const result = await outcome;
    l.close();
    expect(result).toBeInstanceOf(AdaptiveRateLimitError);
    expect(String((result as Error).message)).toMatch(/maxWait|signl/);
  });
});

describe('permit arguments', () => {
  it('a quota whose fields are not numbers of the documented range is refused, as quotaFromHeaders is', () => {
    // quotaFromHeaders returning { remaining: '0', resetMs: 5000 } is an InvalidCallbackValueError;
    // the same quota handed to a permit (a custom adapter, a wrap classify) is dropped in silence:
    // no pause, the next request is sent into an exhausted window.
    const l = limiter();
    const quota = [{ remaining: '0', resetMs: 5_000 }] as unknown as AnnouncedQuota[];
    const permit = l.tryAcquire();
    const error = thrown(() => permit?.success(undefined, quota));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toContain('remaining');
  });

  it('wrap: a classify whose quota has a NaN remaining fails the call, not the quota in silence', async () => {
    const l = limiter();
    const call = wrap(l, async () => 'ok', {
      classify: () => ({ kind: 'success', quota: [{ remaining: Number.NaN, resetMs: 5_000 }] }),
    });
    const result = await call().then(
      (value) => value,
      (error: unknown) => error,
    );
    l.close();
    expect(result).toBeInstanceOf(AdaptiveRateLimitError);
  });

  it('a permit of several budgets: throttled(…, budgets) not a list is an InvalidArgumentError, not a bare TypeError', () => {
    const l = new AdaptiveRateLimiter({
      clock: new ManualClock(),
      slowStart: false,
      budgets: { requests: { initialUnitsPerMinute: 600 }, tokens: { initialUnitsPerMinute: 6_000 } },
    });
    const permit = l.tryAcquire(1, { tokens: 10 });
    // `budgets?.includes is not a function`, from budgets.ts.
    const error = thrown(() => permit?.throttled(undefined, undefined, { tokens: true } as never));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('budgets');
  });

  it("a fixed window's permit checks its arguments as the Permit contract says", () => {
    // types.ts, Permit: a bad unitsUsed, retryAfterMs or quota "throws InvalidArgumentError naming
    // the argument and the value". The fixed window's permit takes anything in silence.
    const l = new FixedWindowRateLimiter({
      clock: new ManualClock(),
      limitForPeriod: 10,
      limitRefreshPeriod: 1_000,
      timeoutDuration: 0,
    });
    const calls: [string, (p: NonNullable<ReturnType<typeof l.tryAcquire>>) => void][] = [
      ['success(NaN)', (p) => p.success(Number.NaN)],
      ['throttled(-1)', (p) => p.throttled(-1)],
      ['failed("x")', (p) => p.failed('x' as never)],
      ['success(1, {})', (p) => p.success(1, {} as never)],
    ];
    for (const [what, call] of calls) {
      const permit = l.tryAcquire();
      expect(
        thrown(() => call(permit!)),
        what,
      ).toBeInstanceOf(InvalidArgumentError);
    }
  });
});

describe('unknown keys', () => {
  it('FixedWindowRateLimiter refuses a misspelt or unknown option instead of dropping it', () => {
    const clock = new ManualClock();
    for (const extra of [{ timeoutDurations: 5_000 }, { queueLimit: 5 }, { maxWait: 5_000 }]) {
      const error = thrown(
        () =>
          new FixedWindowRateLimiter({
            clock,
            limitForPeriod: 2,
            limitRefreshPeriod: 1_000,
            timeoutDuration: 0,
            ...extra,
          } as never),
      );
      const [key] = Object.keys(extra);
      expect(error, key).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).issues.map((i) => i.path)).toEqual([key]);
    }
  });

  it('new AdaptiveRateLimiter and update() name the key meant for a near miss, as docs/options.md says', () => {
    // "An unknown key ... is a ConfigError at its own path, with the key meant when it is a near
    // miss" for new AdaptiveRateLimiter, its update(), createSharedBudget and wrap.
    const ctor = thrown(() => new AdaptiveRateLimiter({ maxWiat: 5 } as never)) as ConfigError;
    expect(ctor).toBeInstanceOf(ConfigError);
    expect(ctor.issues[0]?.message).toContain('did you mean "maxWait"');
    const l = limiter();
    const update = thrown(() => l.update({ maxWiat: 5 } as never)) as ConfigError;
    expect(update.issues[0]?.message).toContain('did you mean "maxWait"');
  });

  it('createSharedBudget names the shared option meant for a near miss (heartbeatIntervl)', () => {
    const clock = new ManualClock();
    const error = thrown(() =>
      createSharedBudget({
        name: 'typo',
        store: new MemoryBudgetStore({ clock }),
        clock,
        heartbeatIntervl: 100,
      } as never),
    ) as ConfigError;
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.issues[0]?.path).toBe('heartbeatIntervl');
    expect(error.issues[0]?.message).toContain('did you mean "heartbeatInterval"');
    // The keys expected, each once: name is the budget's and its limiter's.
    const listed = (error.issues[0]?.message ?? '').replace(/^.*expected one of: /, '').replace(/\)$/, '');
    const keys = listed.split(', ');
    expect(keys).toContain('name');
    expect(new Set(keys).size).toBe(keys.length);
  });
});

describe('shared.redis URLs', () => {
  it('a Redis URL with port 0 is a ConfigError, as it is in a cluster URL', () => {
    // redis+cluster://h:0 is refused (port 1..65535); redis://h:0 is accepted and can never connect.
    const config = (redis: string) => ({
      limiters: { a: { origins: ['https://a.test'], shared: { redis, name: 'a' } } },
    });
    expect(thrown(() => parseConfig(config('redis+cluster://127.0.0.1:0')))).toBeInstanceOf(ConfigError);
    const error = thrown(() => parseConfig(config('redis://127.0.0.1:0'))) as ConfigError;
    expect(error).toBeInstanceOf(ConfigError);
    expect(error.issues.map((i) => i.path)).toEqual(['limiters.a.shared.redis']);
  });
});

describe('documented-valid edge values', () => {
  it('queueLimit 0 grants what needs no wait and refuses at once, queue-full, what would wait', async () => {
    const l = limiter({ queueLimit: 0 });
    await expect(l.acquire(1)).resolves.toBeDefined();
    await expect(l.acquire(1)).rejects.toMatchObject({ reason: 'queue-full' });
    expect(l.snapshot().queued).toBe(0);
  });

  it('pauseFor(Infinity) and throttled(Infinity) pause for maxPause, not for ever (and no NaN)', () => {
    const clock = new ManualClock();
    const l = new AdaptiveRateLimiter({
      clock,
      initialUnitsPerMinute: 60,
      slowStart: false,
      maxPause: 5_000,
    });
    l.pauseFor(Infinity);
    expect(l.snapshot().pausedUntil).toBe(clock.now() + 5_000);
    clock.advance(5_000);
    l.tryAcquire()?.throttled(Infinity);
    expect(l.snapshot().pausedUntil).toBe(clock.now() + 5_000);
    expect(Number.isFinite(l.snapshot().rate)).toBe(true);
  });
});

describe("a server's quota headers with numbers no quota has", () => {
  it('a GitHub-style answer announcing a limit of 0 is served, the limit dropped, its remaining read', async () => {
    const server = await serve({
      headers: { 'x-ratelimit-limit': '0', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '9999999999' },
    });
    const clock = new ManualClock();
    const limitedFetch = rateLimitedFetch({ clock, default: { headers: 'github' } });
    cleanups.push(() => limitedFetch.close());
    // A permit refuses a quota with `limit: 0`; the headers' reader drops that field, so the
    // request is not failed for what the server sent, and `remaining: 0` still pauses.
    const res = await limitedFetch(`${server.origin}/`);
    await res.text();
    expect(res.status).toBe(200);
    expect(limitedFetch.registry.get(server.origin)?.snapshot().pausedUntil).toBeGreaterThan(clock.now());
  });
});
