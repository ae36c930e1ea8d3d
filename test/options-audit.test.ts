import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import { aimd, cubic, probe } from '../src/controllers/index.js';
import { ConfigError, InvalidArgumentError, InvalidCallbackValueError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { wrap } from '../src/wrap/wrap.js';
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
          `must be a Clock with now(), setTimeout() and clearTimeout(); not a function here: ${method}()`,
        );
      });
    }
  }

  it('names every method missing, and a clock that is no object is told the three', () => {
    const error = configError(() => new AdaptiveRateLimiter({ clock: { now: () => 0 } as never }));
    expect(error.issues[0]?.message).toBe(
      'must be a Clock with now(), setTimeout() and clearTimeout(); not a function here: setTimeout(), clearTimeout()',
    );
    const notObject = configError(() => new RateLimiterRegistry({ clock: 5 as never }));
    expect(notObject.issues[0]).toEqual({
      path: 'clock',
      message: 'must be a Clock with now(), setTimeout() and clearTimeout()',
      received: 5,
    });
  });
});

describe('aimd(), cubic() and probe() refuse a key they do not know', () => {
  it('a typo is a ConfigError at its own path, with the key meant (a 30 % cut ran where 50 % was asked)', () => {
    const cases: [() => unknown, string, string][] = [
      [() => aimd({ decreaseFactr: 0.5 } as never), 'aimd.decreaseFactr', 'decreaseFactor'],
      [() => cubic({ bet: 0.5 } as never), 'cubic.bet', 'beta'],
      [() => probe({ holdTme: 5 } as never), 'probe.holdTme', 'holdTime'],
    ];
    for (const [make, path, meant] of cases) {
      const error = configError(make);
      expect(error.issues.map((i) => i.path)).toEqual([path]);
      expect(error.issues[0]?.message).toContain(`did you mean "${meant}"? expected one of: `);
      expect(error.issues[0]?.received).toBe(path === 'probe.holdTme' ? 5 : 0.5);
      expect(error.message).toMatch(/^invalid rate limiter options:/);
    }
    expect(configError(() => aimd({ lazy: true } as never)).issues[0]?.message).toBe(
      'unknown key (expected one of: decreaseFactor, increaseInterval, increaseStep)',
    );
  });

  it('a known key with a bad value and an unknown key are told together', () => {
    const error = configError(() => cubic({ beta: 2, scale: 1 } as never));
    expect(error.issues.map((i) => i.path).sort()).toEqual(['cubic.beta', 'cubic.scale']);
  });
});

describe("parseConfig applies the probe controller's maxHold >= holdTime rule", () => {
  it('refuses maxHold below the default holdTime, at the path the file writes', () => {
    const error = configError(() => parseConfig({ default: { probe: { maxHold: 1000 } } }));
    expect(error.issues).toEqual([
      { path: 'default.probe.maxHold', message: 'must be >= holdTime (4000)', received: 1000 },
    ]);
  });

  it('reads durations as the limiter will, and tells the rule beside the other bad fields', () => {
    const error = configError(() =>
      parseConfig({
        limiters: {
          a: { origins: ['https://a.test'], probe: { holdTime: '10s', maxHold: '5s', cruiseMargin: 0.9 } },
        },
      }),
    );
    expect(error.issues.map((i) => [i.path, i.message])).toEqual([
      ['limiters.a.probe.cruiseMargin', expect.any(String)],
      ['limiters.a.probe.maxHold', 'must be >= holdTime (10000)'],
    ]);
    expect(
      parseConfig({
        limiters: { a: { origins: ['https://a.test'], probe: { holdTime: '10s', maxHold: '10s' } } },
      }).limiters.a?.probe,
    ).toEqual({ holdTime: 10_000, maxHold: 10_000 });
  });

  it('names an appsettings field as the file writes it', () => {
    const error = configError(() =>
      parseConfig({
        AdaptiveRateLimiting: {
          Limiters: {
            a: { Origins: ['https://a.test'], Probe: { HoldTime: '00:00:10', MaxHold: '00:00:05' } },
          },
        },
      }),
    );
    expect(error.issues.map((i) => i.path)).toEqual(['AdaptiveRateLimiting.Limiters.a.Probe.MaxHold']);
  });

  it("checks a budget's probe too, its durations read as the limiter's", () => {
    const budgets = (probe: object) => ({ default: { budgets: { requests: {}, tokens: { probe } } } });
    expect(configError(() => parseConfig(budgets({ maxHold: 1 }))).issues).toEqual([
      { path: 'default.budgets.tokens.probe.maxHold', message: 'must be >= holdTime (4000)', received: 1 },
    ]);
    expect(parseConfig(budgets({ holdTime: '10s', maxHold: '20s' })).default).toEqual({
      budgets: { requests: {}, tokens: { probe: { holdTime: 10_000, maxHold: 20_000 } } },
    });
    expect(configError(() => parseConfig({ default: { budgets: {} } })).issues[0]?.message).toBe(
      'must have at least one budget',
    );
  });

  it('tells a holdTime above the default maxHold at holdTime, the field written', () => {
    const error = configError(() => parseConfig({ default: { probe: { holdTime: '60s' } } }));
    expect(error.issues).toEqual([
      { path: 'default.probe.holdTime', message: 'must be <= maxHold (30000, its default)', received: '60s' },
    ]);
  });

  // The rule holds for every probe given, whatever the controller: the limiter made in code tells
  // what parseConfig tells, so a config that passes one passes the other (and a later change of
  // controller to probe does not fail on it).
  it("is the limiter's rule too, in code, for every probe given (a budget's, with controller aimd)", () => {
    const inCode = configError(
      () => new AdaptiveRateLimiter({ controller: 'aimd', probe: { holdTime: 60_000 } }),
    );
    expect(inCode.issues).toEqual([
      { path: 'probe.holdTime', message: 'must be <= maxHold (30000, its default)', received: 60_000 },
    ]);
    const inJson = configError(() =>
      parseConfig({
        limiters: { a: { origins: ['https://a.test'], controller: 'aimd', probe: { holdTime: '60s' } } },
      }),
    );
    expect(inJson.issues.map((i) => i.path)).toEqual(['limiters.a.probe.holdTime']);
    const budget = configError(
      () => new AdaptiveRateLimiter({ budgets: { tokens: { probe: { maxHold: 1 } } } }),
    );
    expect(budget.issues).toEqual([
      { path: 'budgets.tokens.probe.maxHold', message: 'must be >= holdTime (4000)', received: 1 },
    ]);
    const limiter = new AdaptiveRateLimiter({ controller: 'aimd', probe: { maxHold: 10_000 } });
    expect(configError(() => limiter.update({ probe: { maxHold: 1 } })).issues[0]?.path).toBe(
      'probe.maxHold',
    );
    limiter.close();
  });

  // The rule is on the block as the controller gets it: merged over the limiter's own probe on
  // update, and the first budget's (its fields are the limiter's own) over the limiter's.
  it('checks a block merged over an earlier one, as the controller gets it', () => {
    const long = { holdTime: 60_000, maxHold: 120_000 };
    const limiter = new AdaptiveRateLimiter({ probe: long });
    expect(() => limiter.update({ probe: { holdTime: 45_000 } })).not.toThrow();
    expect(configError(() => limiter.update({ probe: { holdTime: 200_000 } })).issues).toEqual([
      { path: 'probe.holdTime', message: 'must be <= maxHold (120000)', received: 200_000 },
    ]);
    limiter.close();
    const budgets = { requests: { probe: { holdTime: 45_000 } }, tokens: { probe: { holdTime: 45_000 } } };
    expect(
      configError(() => new AdaptiveRateLimiter({ probe: long, budgets })).issues.map((i) => i.path),
    ).toEqual(['budgets.tokens.probe.holdTime']);
    const json = (tokens: object) =>
      parseConfig({
        default: { probe: { maxHold: '2m' }, budgets: { requests: { probe: { holdTime: '45s' } }, tokens } },
      });
    expect(() => json({})).not.toThrow();
    expect(configError(() => json({ probe: { holdTime: '45s' } })).issues.map((i) => i.path)).toEqual([
      'default.budgets.tokens.probe.holdTime',
    ]);
  });

  it('leaves a bad holdTime to its own rule', () => {
    const error = configError(() => parseConfig({ default: { probe: { holdTime: 'soon', maxHold: 1 } } }));
    expect(error.issues.map((i) => i.path)).toEqual(['default.probe.holdTime']);
  });
});

describe("wrap's costs: the units per budget are checked by wrap(), and a costs callback's as its answer", () => {
  const twoBudgets = () => new AdaptiveRateLimiter({ budgets: { requests: {}, tokens: {} } });

  it('a static cost that is no finite number >= 0 is a ConfigError at costs.<budget> when wrap() is called', () => {
    const limiter = twoBudgets();
    const error = configError(() =>
      wrap(limiter, async () => 1, { costs: { tokens: -5, images: Number.NaN, 'a.b': '3' as never } }),
    );
    expect(error.issues).toEqual([
      { path: 'costs.tokens', message: 'must be a finite number >= 0', received: -5 },
      { path: 'costs.images', message: 'must be a finite number >= 0', received: Number.NaN },
      { path: 'costs."a.b"', message: 'must be a finite number >= 0', received: '3' },
    ]);
    limiter.close();
  });

  it('a costs callback that answers a bad number fails the call with InvalidCallbackValueError', async () => {
    const limiter = twoBudgets();
    const told: [unknown, string][] = [
      [-5, '-5'],
      [Number.NaN, 'NaN'],
      [Number.POSITIVE_INFINITY, 'Infinity'],
      ['5', '"5"'],
      [5n, '5n'],
    ];
    for (const [tokens, shown] of told) {
      const error = await wrap(limiter, async () => 1, { costs: () => ({ tokens }) as never })().catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(InvalidCallbackValueError);
      expect(error).toMatchObject({ callback: 'costs' });
      expect((error as Error).message).toBe(
        `costs returned tokens: ${shown}; it must return a finite number >= 0 for each budget`,
      );
    }
    // A value with no string form (no prototype): still the typed error, not a TypeError.
    const bare = await wrap(limiter, async () => 1, {
      costs: () => ({ tokens: Object.create(null) as number }),
    })().catch((e: unknown) => e);
    expect(bare).toBeInstanceOf(InvalidCallbackValueError);
    limiter.close();
  });

  it('an unknown budget name stays with acquire, which knows the budgets', async () => {
    const limiter = twoBudgets();
    expect(() => wrap(limiter, async () => 1, { costs: { tokns: 5 } })).not.toThrow();
    const error = await wrap(limiter, async () => 1, { costs: () => ({ tokns: 5 }) })().catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toContain('costs.tokns: no such budget');
    const ok = await wrap(limiter, async () => 'done', { costs: () => ({ tokens: 0 }) })();
    expect(ok).toBe('done');
    limiter.close();
  });
});

describe("an error's source names the API the user called", () => {
  it("an adapter's default.* errors name the adapter's options, not the registry it makes", () => {
    const interceptor = configError(() => adaptiveRateLimit({ default: { maxWiat: 5 } as never }));
    expect(interceptor.message).toMatch(
      /^invalid adaptiveRateLimit options:\n {2}- default\.maxWiat: unknown key/,
    );
    const fetchError = configError(() =>
      rateLimitedFetch({ default: { maxWait: -1 }, fetch: async () => new Response('') }),
    );
    expect(fetchError.message).toMatch(/^invalid rateLimitedFetch options:\n {2}- default\.maxWait: /);
  });

  it("update() and a controller's options name the rate limiter options", () => {
    const limiter = new AdaptiveRateLimiter({});
    for (const options of [
      { burst: 'second' as const },
      { clock: new ManualClock() },
      { budgets: { a: {} } },
    ]) {
      expect(configError(() => limiter.update(options)).message).toMatch(/^invalid rate limiter options:/);
    }
    expect(configError(() => limiter.update({ probe: { maxHold: 1 } })).message).toBe(
      'invalid rate limiter options:\n  - probe.maxHold: must be >= holdTime (4000) (received 1)',
    );
    limiter.close();
  });
});

describe('unknown keys: the keys expected', () => {
  it('an unknown key inside shared, through an adapter, is told the keys expected, as parseConfig tells it', () => {
    const error = configError(() =>
      adaptiveRateLimit({
        limiters: {
          a: { origins: ['https://a.test'], shared: { redis: 'redis://127.0.0.1:1', heartbeatIntervl: 1 } },
        },
      } as never),
    );
    expect(error.issues.map((i) => [i.path, i.message])).toEqual([
      [
        'limiters.a.shared.heartbeatIntervl',
        expect.stringMatching(/^unknown key \(did you mean "heartbeatInterval"\? expected one of: redis, /),
      ],
    ]);
  });
});

describe('an object value in an error tells what it is', () => {
  it('a class instance by its class, a plain object of methods by them', () => {
    const limiter = new AdaptiveRateLimiter({});
    expect(configError(() => limiter.update({ clock: new ManualClock() })).message).toContain(
      'clock: cannot change at run time (received a ManualClock)',
    );
    expect(configError(() => limiter.update({ clock: { now: () => 0 } as never })).message).toContain(
      '(received an object with now())',
    );
    expect(configError(() => new AdaptiveRateLimiter({ name: limiter as never })).message).toContain(
      '(received an AdaptiveRateLimiter)',
    );
    // What JSON tells stays JSON: plain data, a URL, an empty object.
    expect(configError(() => new AdaptiveRateLimiter({ aimd: { step: 1 } as never })).message).toContain(
      '(received 1)',
    );
    expect(configError(() => new AdaptiveRateLimiter({ name: {} as never })).message).toContain(
      '(received {})',
    );
    expect(
      configError(() => new AdaptiveRateLimiter({ name: new URL('https://a.test/x') as never })).message,
    ).toContain('(received "https://a.test/x")');
    limiter.close();
  });

  it('a value whose reading throws (a getter) is told without throwing', () => {
    const getter = Object.defineProperty({}, 'now', {
      enumerable: true,
      get() {
        throw new Error('no');
      },
    });
    const error = configError(() => new AdaptiveRateLimiter({ name: getter as never }));
    expect(error.message).toMatch(/^invalid rate limiter options:\n {2}- name: .* \(received .+\)$/);
  });
});

describe('name is fixed at creation', () => {
  it('update({ name }) with a new name is refused, as clock is; the same name is accepted', () => {
    const limiter = new AdaptiveRateLimiter({ name: 'orders' });
    const error = configError(() => limiter.update({ name: 'renamed' }));
    expect(error.issues).toEqual([
      {
        path: 'name',
        message:
          "cannot change at run time (its metrics and a registry's key follow the name it was made with)",
        received: 'renamed',
      },
    ]);
    expect(limiter.name).toBe('orders');
    limiter.update({ name: 'orders', maxWait: 5 });
    expect(limiter.name).toBe('orders');
    limiter.close();
  });

  it("a registry's limiter keeps the key it is found by", () => {
    const registry = new RateLimiterRegistry({
      limiters: { github: { origins: ['https://api.github.com'] } },
    });
    const github = registry.get('github');
    expect(() => github?.update({ name: 'gitlab' })).toThrow(ConfigError);
    expect(registry.get('github')?.name).toBe('github');
    registry.close();
  });
});
