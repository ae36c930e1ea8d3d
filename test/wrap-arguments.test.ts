import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { ConfigError, InvalidCallbackValueError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Outcome } from '../src/limiter/types.js';
import { wrap } from '../src/wrap/wrap.js';

// wrap's arguments are checked when it is called, before the first call, each bad one named with
// the value received; a classify or classifyError that returns what is not an outcome fails the
// call with a typed error and answers its permit (it was left unanswered: a cold start's slot
// taken for good, and after 10 such calls every call of the limiter waited).

function setup() {
  const clock = new ManualClock();
  // No rate yet: the cold start lets 10 calls be in flight at once.
  const limiter = new AdaptiveRateLimiter({ clock });
  let calls = 0;
  const fn = async () => {
    calls++;
    return 'result';
  };
  return { limiter, fn, calls: () => calls };
}

function configIssues(run: () => unknown): { path: string; received: unknown }[] {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).issues.map(({ path, received }) => ({ path, received }));
  }
  throw new Error('expected a ConfigError');
}

describe('wrap: its arguments', () => {
  it('refuses a limiter that is not one (undefined, {}), naming limiter', () => {
    const { fn } = setup();
    expect(configIssues(() => wrap(undefined as never, fn))).toEqual([
      { path: 'limiter', received: undefined },
    ]);
    expect(configIssues(() => wrap({} as never, fn))).toEqual([{ path: 'limiter', received: {} }]);
    expect(() => wrap(5 as never, fn)).toThrow(/limiter: must be a rate limiter .*\(received 5\)/);
  });

  it('refuses options that are not an object (null, 5), naming options', () => {
    const { limiter, fn } = setup();
    expect(configIssues(() => wrap(limiter, fn, null as never))).toEqual([
      { path: 'options', received: null },
    ]);
    expect(configIssues(() => wrap(limiter, fn, 5 as never))).toEqual([{ path: 'options', received: 5 }]);
  });

  it('refuses a classify or classifyError that is not a function, before any call, every bad field at once', () => {
    const { limiter, fn, calls } = setup();
    const options = { classify: 5, classifyError: 'x', maxAttempts: 0 } as never;
    expect(configIssues(() => wrap(limiter, fn, options))).toEqual([
      { path: 'maxAttempts', received: 0 },
      { path: 'classify', received: 5 },
      { path: 'classifyError', received: 'x' },
    ]);
    expect(calls()).toBe(0);
  });
});

describe('wrap: what classify and classifyError return', () => {
  it.each<[string, unknown]>([
    ['undefined (a forgotten return)', undefined],
    ["a bare kind ('success')", 'success'],
    ['an unknown kind', { kind: 'done' }],
    ['one quota object where the list belongs', { kind: 'success', quota: { limit: 10 } }],
    ['a wait that is NaN', { kind: 'throttled', retryAfterMs: Number.NaN }],
  ])('fails the call with InvalidCallbackValueError for %s, and answers its permit', async (_, outcome) => {
    const { limiter, fn, calls } = setup();
    const call = wrap(limiter, fn, { classify: () => outcome as Outcome, maxAttempts: 1 });
    for (let i = 0; i < 10; i++) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidCallbackValueError);
      expect(error).toMatchObject({ callback: 'classify', code: 'ERR_INVALID_CALLBACK_VALUE' });
    }
    expect(calls()).toBe(10);
    // Ten permits answered: the cold start's cap of 10 in flight is free again.
    expect(limiter.tryAcquire()).toBeDefined();
    expect(limiter.snapshot().queued).toBe(0);
  });

  it('names classifyError when it returns what is not an outcome, with the value', async () => {
    const { limiter } = setup();
    const call = wrap(
      limiter,
      async () => {
        throw new Error('boom');
      },
      { classifyError: () => ({ kind: 'throttled', retryAfterMs: -5 }), maxAttempts: 1 },
    );
    const error = await call().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidCallbackValueError);
    expect(error).toMatchObject({
      callback: 'classifyError',
      received: { kind: 'throttled', retryAfterMs: -5 },
    });
    expect((error as Error).message).toMatch(
      /classifyError returned \{"kind":"throttled","retryAfterMs":-5\}/,
    );
  });

  it('still takes every outcome of the contract', async () => {
    const { limiter, fn } = setup();
    for (const outcome of [
      { kind: 'success' },
      { kind: 'success', units: 0 },
      { kind: 'failed', retryAfterMs: 0 },
      { kind: 'throttled', budgets: ['requests'] },
    ] as Outcome[]) {
      await expect(wrap(limiter, fn, { classify: () => outcome, maxAttempts: 1 })()).resolves.toBe('result');
    }
  });
});

describe('wrap: a method, and the error a bad classifyError hides', () => {
  it('keeps `this` of a method call, for the function and its units', async () => {
    const { limiter } = setup();
    const api = {
      base: 'https://api.test',
      weight: 2,
      get: async function (this: { base: string }, path: string) {
        return `${this.base}${path}`;
      },
    };
    api.get = wrap(limiter, api.get, {
      units: function (this: { weight: number }) {
        return this.weight;
      },
    });
    await expect(api.get('/y')).resolves.toBe('https://api.test/y');
  });

  it("keeps the call's own error as the cause of a classifyError that throws or returns nothing", async () => {
    const { limiter } = setup();
    const boom = new Error('connect ECONNREFUSED');
    const fn = async () => {
      throw boom;
    };
    const forgot = wrap(limiter, fn, { classifyError: (() => undefined) as never, maxAttempts: 1 });
    const error = await forgot().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidCallbackValueError);
    expect((error as Error).cause).toBe(boom);
    const threw = wrap(limiter, fn, {
      classifyError: () => {
        throw new TypeError('a bug in the classifier');
      },
      maxAttempts: 1,
    });
    expect(((await threw().catch((e: unknown) => e)) as Error).cause).toBe(boom);
  });
});
