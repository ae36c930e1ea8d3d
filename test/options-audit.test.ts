import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';

// The documented options against the code: each bad value a ConfigError naming the field and the
// value, at the API the user called.

describe('clock: now(), setTimeout() and clearTimeout() are checked by every API that takes one', () => {
  const real = new ManualClock();
  const without = (method: 'now' | 'setTimeout' | 'clearTimeout') => {
    const clock: Record<string, unknown> = {
      now: () => real.now(),
      setTimeout: (fn: () => void, ms: number) => real.setTimeout(fn, ms),
      clearTimeout: (handle: unknown) => real.clearTimeout(handle),
    };
    delete clock[method];
    return clock as never;
  };
  const store = () => new MemoryBudgetStore({ clock: real });
  const makers: Record<string, (clock: never) => unknown> = {
    AdaptiveRateLimiter: (clock) => new AdaptiveRateLimiter({ clock }),
    FixedWindowRateLimiter: (clock) =>
      new FixedWindowRateLimiter({ limitForPeriod: 1, limitRefreshPeriod: 1000, timeoutDuration: 0, clock }),
    RateLimiterRegistry: (clock) => new RateLimiterRegistry({ clock }),
    adaptiveRateLimit: (clock) => adaptiveRateLimit({ clock }),
    rateLimitedFetch: (clock) => rateLimitedFetch({ clock, fetch: async () => new Response('') }),
    createSharedBudget: (clock) => createSharedBudget({ name: 'clock', store: store(), clock }),
  };
  for (const [api, make] of Object.entries(makers)) {
    for (const method of ['now', 'setTimeout', 'clearTimeout'] as const) {
      it(`${api} refuses a clock without ${method}()`, () => {
        const error = configError(() => make(without(method)));
        expect(error.issues.map((i) => i.path)).toEqual(['clock']);
        expect(error.issues[0]?.message).toBe(
          `expected a Clock with now(), setTimeout() and clearTimeout(); not a function here: ${method}()`,
        );
      });
    }
  }

  it('names every method missing, and a clock that is no object is told the three', () => {
    const error = configError(() => new AdaptiveRateLimiter({ clock: { now: () => 0 } as never }));
    expect(error.issues[0]?.message).toBe(
      'expected a Clock with now(), setTimeout() and clearTimeout(); not a function here: setTimeout(), clearTimeout()',
    );
    const notObject = configError(() => new RateLimiterRegistry({ clock: 5 as never }));
    expect(notObject.issues[0]).toEqual({
      path: 'clock',
      message: 'expected a Clock with now(), setTimeout() and clearTimeout()',
      received: 5,
    });
  });
});
