import { describe, expect, it } from 'vitest';
import { ConfigError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { RateLimiterRegistry } from '../src/registry/index.js';

/** The issues of the ConfigError `run` throws, or what it threw (or made) instead. */
function issuesOf(run: () => unknown): { path: string; received: unknown }[] | string {
  try {
    run();
    return 'no error';
  } catch (error) {
    if (!(error instanceof ConfigError))
      return `${(error as Error).constructor.name}: ${(error as Error).message}`;
    return error.issues.map(({ path, received }) => ({ path, received }));
  }
}

// The registry takes the options of a config as the HTTP adapters and parseConfig do, and checks
// them the same way (docs/options.md: "Keys are checked the same way in JSON and in code"): each
// bad value is a ConfigError at its path, where the registry once threw a TypeError (`clock`),
// made no named limiter (`limiters: 5`), read `default: null` as {}, or dropped bad HTTP fields.

describe('RateLimiterRegistry checks its options as the adapters do', () => {
  it('refuses a clock that is not one with a ConfigError naming `clock` (not a bare TypeError)', () => {
    expect(issuesOf(() => new RateLimiterRegistry({ clock: {} as never }))).toEqual([
      { path: 'clock', received: {} },
    ]);
    expect(issuesOf(() => new RateLimiterRegistry({ clock: 5 as never }))).toEqual([
      { path: 'clock', received: 5 },
    ]);
    expect(() => new RateLimiterRegistry({ clock: {} as never })).toThrow(
      /clock: must be a Clock with now\(\), setTimeout\(\) and clearTimeout\(\)/,
    );
  });

  it('refuses `limiters` that is not an object of limiter configs, naming `limiters` once', () => {
    for (const limiters of [5, true, 'github', [{ origins: ['https://api.github.com'] }]]) {
      expect(issuesOf(() => new RateLimiterRegistry({ limiters: limiters as never }))).toEqual([
        { path: 'limiters', received: limiters },
      ]);
    }
  });

  it('refuses `default: null` (neither false nor a config) instead of reading it as {}', () => {
    expect(issuesOf(() => new RateLimiterRegistry({ default: null as never }))).toEqual([
      { path: 'default', received: null },
    ]);
    expect(() => new RateLimiterRegistry({ default: null as never })).toThrow(
      /default: must be false or an object/,
    );
  });

  it('says what `default` expects in the adapters\' error too (it said only "Invalid input")', () => {
    for (const make of [adaptiveRateLimit, rateLimitedFetch])
      for (const value of [null, true, 5])
        expect(() => make({ default: value as never })).toThrow(/default: must be false or an object/);
  });

  it('checks the HTTP fields of a config it takes as parseConfig does', () => {
    const issues = issuesOf(
      () =>
        new RateLimiterRegistry({
          maxAttempts: -5,
          throttleStatuses: 'x',
          rejection: 'bogus',
          maxReplayBodyBytes: Number.NaN,
        } as never),
    );
    expect(issues).toEqual([
      { path: 'maxAttempts', received: -5 },
      { path: 'throttleStatuses', received: 'x' },
      { path: 'maxReplayBodyBytes', received: Number.NaN },
      { path: 'rejection', received: 'bogus' },
    ]);
  });
});
