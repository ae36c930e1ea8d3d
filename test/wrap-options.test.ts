import { describe, expect, expectTypeOf, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { ConfigError, InvalidCallbackValueError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { type WrapOptions, wrap } from '../src/wrap/wrap.js';

// wrap's options are checked as every other options object of the library (an unknown key is a
// ConfigError at its path, with its near miss: a typo of maxAttempts once ran a non-idempotent call
// 4 times), and take a `signal` that ends a call waiting in the limiter, as the other adapters'
// waits end (a `signal` option was once dropped: the call waited out the pause, then ran).

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** What `p` settled with, or 'pending' when it is still waiting after a few turns. */
async function soon(p: Promise<unknown>): Promise<unknown> {
  const later = (async () => {
    for (let i = 0; i < 5; i++) await flush();
    return 'pending';
  })();
  return Promise.race([p, later]);
}

/** An SDK-style 429, as classifyThrown reads it. */
const throttle = (retryAfterMs: number) =>
  Object.assign(new Error('429 Too Many Requests'), { status: 429, retryAfterMs });

function configError(run: () => unknown): ConfigError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('wrap options: unknown keys', () => {
  it('refuses a misspelled maxAttempts with its near miss, before any call', () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
    let runs = 0;
    const error = configError(() =>
      wrap(
        limiter,
        async () => {
          runs++;
        },
        { maxAttemps: 1 } as never,
      ),
    );
    expect(error.issues).toEqual([
      {
        path: 'maxAttemps',
        message: expect.stringContaining('unknown key (did you mean "maxAttempts"?'),
        received: 1,
      },
    ]);
    expect(runs).toBe(0);
  });

  it('refuses a signal that is not one (the controller itself), naming signal', () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
    const controller = new AbortController();
    const error = configError(() => wrap(limiter, async () => 1, { signal: controller as never }));
    expect(error.issues.map(({ path, message }) => ({ path, message }))).toEqual([
      { path: 'signal', message: 'must be an AbortSignal, or a function of the arguments returning one' },
    ]);
  });
});

describe('wrap options: signal', () => {
  it('an aborted signal rejects a waiting call at once with its reason, and fn never runs', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60 });
    limiter.pauseFor(30_000);
    const controller = new AbortController();
    let runs = 0;
    const call = wrap(limiter, async () => ++runs, { signal: controller.signal });
    const outcome = call().catch((e: unknown) => e);
    await flush();
    const reason = new Error('user gave up');
    controller.abort(reason);
    expect(await soon(outcome)).toBe(reason);
    expect(runs).toBe(0);
    expect(limiter.snapshot().queued).toBe(0);
    limiter.close();
  });

  it("an abort while a throttled call's retry waits rejects with the reason; fn ran once", async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600 });
    const controller = new AbortController();
    let runs = 0;
    const call = wrap(
      limiter,
      async () => {
        runs++;
        throw throttle(5_000);
      },
      { signal: controller.signal },
    );
    const outcome = call().catch((e: unknown) => e);
    for (let i = 0; i < 5 && runs === 0; i++) await flush();
    expect(runs).toBe(1);
    await flush();
    const reason = new Error('user gave up');
    controller.abort(reason);
    expect(await soon(outcome)).toBe(reason);
    expect(runs).toBe(1);
    limiter.close();
  });

  it("a function of the call's arguments gives each call its own signal", async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60 });
    limiter.pauseFor(30_000);
    const call = wrap(limiter, async (request: { id: number; signal?: AbortSignal }) => request.id, {
      signal: (request: { signal?: AbortSignal }) => request.signal,
    });
    const reason = new Error('first gave up');
    const first = call({ id: 1, signal: AbortSignal.abort(reason) }).catch((e: unknown) => e);
    const second = call({ id: 2 });
    expect(await soon(first)).toBe(reason);
    for (let i = 0; i < 40; i++) {
      await flush();
      clock.advance(1_000);
    }
    expect(await second).toBe(2);
    limiter.close();
  });
});

describe("wrap options: the functions are typed by the wrapped function's arguments", () => {
  // They were typed `(...args: never[])`: the docs' `(request) => ({ tokens: request.max_tokens })`
  // ran in JavaScript and failed to compile in TypeScript (`npm run typecheck` checks this file).
  it('units, costs and signal read the call typed, unannotated', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      initialUnitsPerMinute: 600,
      budgets: { requests: {}, tokens: { initialUnitsPerMinute: 60_000 } },
    });
    type Request = { max_tokens: number; weight: number; signal?: AbortSignal };
    const seen: number[] = [];
    const call = wrap(limiter, async (request: Request, tag: string) => `${tag}:${request.max_tokens}`, {
      units: (request, tag) => {
        expectTypeOf(tag).toEqualTypeOf<string>();
        return request.weight;
      },
      costs: (request) => {
        seen.push(request.max_tokens);
        return { tokens: request.max_tokens };
      },
      signal: (request) => request.signal,
    });
    expect(await call({ max_tokens: 1_200, weight: 2 }, 'a')).toBe('a:1200');
    expect(seen).toEqual([1_200]);
    // Each paced bucket (a request, 10 tokens) went into debt by what the call drew (2, and 1,200).
    const { budgets } = limiter.snapshot();
    expect(budgets?.requests?.tokens).toBeLessThan(0);
    expect(budgets?.tokens?.tokens).toBeLessThan(-1_000);
    limiter.close();
  });
  it('an options object typed apart (WrapOptions<R>) still fits a function of any arguments', async () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() }); // unlimited: no wait
    type Request = { weight: number };
    const fixed: WrapOptions<number> = { units: 2 };
    const byRequest: WrapOptions<number> = { units: (request: Request) => request.weight };
    const fn = async (request: Request) => request.weight;
    expect(await wrap(limiter, fn, fixed)({ weight: 3 })).toBe(3);
    expect(await wrap(limiter, fn, byRequest)({ weight: 1 })).toBe(1);
    limiter.close();
  });
});

describe('wrap options: what the units, costs and signal functions return', () => {
  it.each([
    ['units', Number.NaN, { units: () => Number.NaN }],
    ['units', -5, { units: () => -5 }],
    ['units', '3', { units: () => '3' as unknown as number }],
    ['costs', 7, { costs: () => 7 as unknown as Record<string, number> }],
    ['signal', 'stop', { signal: () => 'stop' as unknown as AbortSignal }],
  ] as [string, unknown, object][])(
    'a %s function returning %s rejects the call with InvalidCallbackValueError naming it',
    async (callback, received, options) => {
      const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
      let ran = 0;
      const call = wrap(
        limiter,
        async () => {
          ran++;
          return 'ok';
        },
        options as never,
      );

      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );

      // Before: an InvalidArgumentError of acquire() (units), or a TypeError deep in the loop.
      expect(error).toBeInstanceOf(InvalidCallbackValueError);
      expect((error as InvalidCallbackValueError).callback).toBe(callback);
      expect((error as InvalidCallbackValueError).received).toEqual(received);
      expect(ran).toBe(0);
      // Nothing was taken from the limiter: the next good call goes.
      expect(await wrap(limiter, async () => 'next')()).toBe('next');
      limiter.close();
    },
  );
});
