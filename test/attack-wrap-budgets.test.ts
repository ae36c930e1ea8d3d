import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { ConfigError, InvalidCallbackValueError } from '../src/errors.js';
import { type RateLimitedFetch, type RateLimitedFetchOptions, rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import { type WrapOptions, wrap } from '../src/wrap/wrap.js';
import { NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

// Attack on `wrap`, the fetch wrapper and limiters of several budgets. Each `describe` names what
// was wrong on the code it was written against.

failOnUnhandledRejections();

/** A callback written `async` by mistake, whose promise rejects (a tokenizer that failed). */
const rejecting = async (): Promise<never> => {
  throw new Error('tokenizer failed');
};

const wrappers: RateLimitedFetch[] = [];
afterEach(() => {
  for (const w of wrappers.splice(0)) w.close();
});
function limited(options: RateLimitedFetchOptions): RateLimitedFetch {
  const f = rateLimitedFetch({ clock: new ManualClock(), default: NEVER_BINDS, ...options });
  wrappers.push(f);
  return f;
}

/** Settles `p` into what it resolved with or rejected with. */
const outcome = (p: Promise<unknown>) =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );

// Was: the promise was refused (an `InvalidCallbackValueError`), but its rejection was left
// unhandled, which ends a Node process (`--unhandled-rejections=throw`, Node's default); only
// `costs` handled it. The fetch wrapper's `classify` read the promise as no verdict (the call
// resolved with the default verdict's answer) and `quotaFromHeaders` as a quota with no fields.
describe('an async callback whose promise rejects', () => {
  it.each<[string, WrapOptions<number>]>([
    ['units', { units: rejecting as never }],
    ['costs', { costs: rejecting as never }],
    ['signal', { signal: rejecting as never }],
    ['classify', { classify: rejecting as never }],
    ['classifyError', { classifyError: rejecting as never }],
  ])(
    'wrap %s: the call rejects with InvalidCallbackValueError naming it, nothing unhandled',
    async (name, options) => {
      const limiter = new AdaptiveRateLimiter({ clock: new ManualClock(), slowStart: false });
      const fn =
        name === 'classifyError'
          ? async (): Promise<number> => {
              throw Object.assign(new Error('server error'), { status: 500 });
            }
          : async () => 1;
      const out = await outcome(wrap(limiter, fn, options)());
      expect(out).toMatchObject({ error: expect.any(InvalidCallbackValueError) });
      const error = (out as { error: InvalidCallbackValueError }).error;
      expect(error.callback).toBe(name);
      expect(error.message).toContain('a promise');
    },
  );

  it.each<[string, RateLimitedFetchOptions]>([
    ['units', { units: rejecting as never }],
    ['classify', { classify: rejecting as never }],
    ['responseUnits', { responseUnits: rejecting as never }],
    ['quotaFromHeaders', { default: { ...NEVER_BINDS, quotaFromHeaders: rejecting as never } }],
    ['partition', { partition: rejecting as never }],
    // Asked for a partition's own limiter's name: the second partition's (the first takes the origin's).
    ['partitionName', { partition: (r) => r.path, partitionName: rejecting as never }],
  ])(
    'rateLimitedFetch %s: the call rejects with InvalidCallbackValueError naming it, nothing unhandled',
    async (name, options) => {
      const f = limited({ ...options, fetch: async () => new Response('ok') });
      if (name === 'partitionName') await f('https://api.test/first');
      const out = await outcome(f('https://api.test/items'));
      expect(out).toMatchObject({ error: expect.any(InvalidCallbackValueError) });
      expect((out as { error: InvalidCallbackValueError }).error.callback).toBe(name);
      expect((out as { error: InvalidCallbackValueError }).error.message).toMatch(/returned a promise/i);
    },
  );
});

/** A limiter of 6,000 requests and `tokens` tokens a minute (the tokens a second of burst), on a manual clock. */
function requestsAndTokens(tokens: number) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({
    clock,
    slowStart: false,
    budgets: {
      requests: { initialUnitsPerMinute: 6_000 },
      tokens: { initialUnitsPerMinute: tokens, burst: 'second' },
    },
  });
  return { clock, limiter };
}

// Was: `snapshot().budgets.tokens.queued` and `.queuedUnits` were always 0 (a budget's own limiter
// never queues: the limiter's one line holds the waiters), while calls waited for its tokens; only
// the first budget's entry told the line.
describe('snapshot() of a limiter of several budgets, calls waiting for tokens', () => {
  it("tells each budget's waiters and the units they wait for", async () => {
    const { clock, limiter } = requestsAndTokens(6_000);
    // The tokens bucket (100) spent: the next calls wait for tokens.
    expect(limiter.tryAcquire(1, { tokens: 100 })).toBeDefined();
    const waits = [40, 0, 70].map((tokens) =>
      outcome(wrap(limiter, async () => tokens, { costs: { tokens } })()),
    );
    await Promise.resolve();
    const snapshot = limiter.snapshot();
    expect(snapshot).toMatchObject({ queued: 3, queuedUnits: 3 });
    expect(snapshot.budgets?.requests).toMatchObject({ queued: 3, queuedUnits: 3 });
    // The call that draws no tokens waits behind the others, but not for tokens.
    expect(snapshot.budgets?.tokens).toMatchObject({ queued: 2, queuedUnits: 110 });
    for (let i = 0; i < 20 && limiter.snapshot().queued > 0; i++) clock.advance(500);
    expect(limiter.snapshot().budgets?.tokens).toMatchObject({ queued: 0, queuedUnits: 0 });
    expect(await Promise.all(waits)).toEqual([{ value: 40 }, { value: 0 }, { value: 70 }]);
  });
});

describe('snapshot() of a limiter of several budgets, fractional costs', () => {
  it('tells 0 tokens queued once the waiters are served, not what rounding left', async () => {
    const { clock, limiter } = requestsAndTokens(60);
    expect(limiter.tryAcquire(1, { tokens: 1 })).toBeDefined();
    const waits = [0.7, 0.1, 0.2].map((tokens) => limiter.acquire(1, { costs: { tokens } }));
    expect(limiter.snapshot().budgets?.tokens?.queued).toBe(3);
    for (let i = 0; i < 20 && limiter.snapshot().queued > 0; i++) clock.advance(500);
    await Promise.all(waits);
    expect(limiter.snapshot().budgets?.tokens).toMatchObject({ queued: 0, queuedUnits: 0 });
  });
});

// Was: a call that drew nothing from a budget named after a member of Object.prototype read its
// cost as that member (`{}.constructor`, a function), which `predictWait` took for units (its
// guard was `units <= 0`, false for a function): the wait predicted was NaN, so no call was ever
// refused at once when its wait passed maxWait; each waited in line until its deadline.
describe('a budget named after a member of Object.prototype (an ordinary name, as the docs say)', () => {
  it.each(['constructor', 'toString'])(
    '%s: a call whose wait passes maxWait is refused at once',
    async (name) => {
      const clock = new ManualClock();
      const limiter = new AdaptiveRateLimiter({
        clock,
        slowStart: false,
        maxWait: 1_000,
        budgets: {
          requests: { initialUnitsPerMinute: 60 },
          [name]: { initialUnitsPerMinute: 6_000, burst: 'second' },
        },
      });
      // One a second: the first goes, the second waits a second, the third would wait two.
      const calls = [1, 2, 3].map(() => outcome(limiter.acquire(1)));
      await Promise.resolve();
      const third = await Promise.race([calls[2], Promise.resolve('waiting')]);
      expect(third).toMatchObject({ error: { reason: 'max-wait' } });
      limiter.close();
      await Promise.all(calls);
    },
  );
});

// Was: `update()` compared the budgets it was given, as written, with the limiter's, as parsed
// (each budget's fields in the schema's order), in JSON: the very options the limiter was made
// with were refused ("budgets: cannot change at run time") when a budget listed its fields in
// another order, so `update({ ...options, maxWait })` threw; and a budget's custom controller
// (methods only: `{}` in JSON) could be swapped for another, accepted and ignored.
describe('update() given the budgets the limiter was made with', () => {
  it('accepts them whatever the order of their fields, and changes the rest', () => {
    const options: AdaptiveLimiterOptions = {
      clock: new ManualClock(),
      budgets: {
        requests: { initialUnitsPerMinute: 600 },
        tokens: { burst: 'second', initialUnitsPerMinute: 60_000 },
      },
    };
    const limiter = new AdaptiveRateLimiter(options);
    expect(() => limiter.update({ ...options, maxWait: 5_000 })).not.toThrow();
    expect(limiter.snapshot().budgets?.tokens?.rate).toBe(60_000);
  });

  it('still refuses other budgets, and another controller object for one', () => {
    const controller = {
      name: 'mine',
      onSuccess: (s: { rate: number }) => s.rate,
      onThrottled: (s: { rate: number }) => s.rate / 2,
    };
    const budgets = {
      requests: { initialUnitsPerMinute: 600 },
      tokens: { initialUnitsPerMinute: 60_000, controller },
    } as AdaptiveLimiterOptions['budgets'];
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock(), budgets });
    expect(() => limiter.update({ budgets })).not.toThrow();
    const other = { ...controller, onThrottled: (s: { rate: number }) => s.rate / 4 };
    expect(() =>
      limiter.update({
        budgets: { ...budgets, tokens: { initialUnitsPerMinute: 60_000, controller: other } } as never,
      }),
    ).toThrow(ConfigError);
    expect(() =>
      limiter.update({
        budgets: { tokens: { initialUnitsPerMinute: 60_000 }, requests: { initialUnitsPerMinute: 600 } },
      }),
    ).toThrow(ConfigError);
    expect(() => limiter.update({ budgets: { requests: { initialUnitsPerMinute: 600 } } })).toThrow(
      ConfigError,
    );
  });
});

// Was: the limiter's own `burst` (and `reserve`), which its first budget's entry overrides and the
// other budgets take, was compared with the first budget's: `update({ ...options })` with the
// options it was made with threw "burst: cannot change at run time".
describe("update() given the limiter's own burst, which its first budget overrides", () => {
  it('accepts it and the first budget’s, and still refuses another', () => {
    const options: AdaptiveLimiterOptions = {
      clock: new ManualClock(),
      burst: 'paced',
      budgets: {
        requests: { initialUnitsPerMinute: 600, burst: 'second' },
        tokens: { initialUnitsPerMinute: 60_000 },
      },
    };
    const limiter = new AdaptiveRateLimiter(options);
    expect(() => limiter.update({ ...options, maxWait: 5_000 })).not.toThrow();
    expect(() => limiter.update({ burst: 'second' })).not.toThrow();
    expect(() => limiter.update({ burst: 'announced' })).toThrow(ConfigError);
    // The first budget's bucket is still one second of its rate (10 requests), not paced.
    expect(limiter.snapshot().capacity).toBe(10);
  });
});
