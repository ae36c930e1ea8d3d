import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import type { ConfigIssue } from '../src/errors.js';
import { InvalidArgumentError } from '../src/errors.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { issueMessage } from '../src/issue-message.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';
import { cli } from './helpers/simulate-cli.js';

// Zod's issues are told in the library's words ("must be ..."), as the controllers' checks tell
// theirs, never in zod's ("Too small: expected number to be >0", "Invalid input: expected number,
// received NaN"). A message a schema or a refinement sets itself is kept as it is.

/** The issues of the ConfigError `fn` throws, as `path: message`. */
function told(fn: () => unknown): string[] {
  return configError(fn).issues.map((i: ConfigIssue) => `${i.path}: ${i.message}`);
}

const limiter = (options: object) => told(() => new AdaptiveRateLimiter(options as never));
const config = (json: object) => told(() => parseConfig(json));

describe('numbers are told their range, as the controllers tell theirs', () => {
  it('a bound not met: the whole range, > or >= as the schema has it', () => {
    expect(limiter({ aimd: { increaseInterval: 0 } })).toEqual([
      'aimd.increaseInterval: must be a finite number > 0',
    ]);
    expect(limiter({ aimd: { decreaseFactor: 1 } })).toEqual([
      'aimd.decreaseFactor: must be a number > 0 and < 1',
    ]);
    expect(limiter({ maxWait: -1 })).toEqual(['maxWait: must be a finite number >= 0']);
    expect(limiter({ instanceCount: 0 })).toEqual(['instanceCount: must be an integer > 0']);
  });

  it('the same words as the controller that checks the field again when it is built', () => {
    // The schema refuses first; the probe controller's own rule says the same.
    const schema = limiter({ probe: { cruiseMargin: 0.5 } });
    expect(schema).toEqual(['probe.cruiseMargin: must be a number >= 0 and < 0.5']);
    expect(
      told(() => new AdaptiveRateLimiter({ controller: 'probe', probe: { cruiseMargin: -0.5 } })),
    ).toEqual(schema);
  });

  it("an integer past Number.MAX_SAFE_INTEGER is told that bound by its name (zod's .int())", () => {
    expect(limiter({ queueLimit: 1e20 })).toEqual([
      'queueLimit: must be an integer >= 0 and <= 9007199254740991 (Number.MAX_SAFE_INTEGER)',
    ]);
  });

  it('NaN, Infinity and a number in a string: a finite number, with its range', () => {
    expect(limiter({ maxWait: Number.NaN })).toEqual(['maxWait: must be a finite number >= 0']);
    expect(limiter({ minUnitsPerMinute: Number.POSITIVE_INFINITY })).toEqual([
      'minUnitsPerMinute: must be a finite number > 0',
    ]);
    expect(limiter({ decreaseCooldown: '1000' })).toEqual(['decreaseCooldown: must be a finite number >= 0']);
    expect(configError(() => new AdaptiveRateLimiter({ maxWait: Number.NaN })).message).toBe(
      'invalid rate limiter options:\n  - maxWait: must be a finite number >= 0 (received NaN)',
    );
  });

  it('a fraction where a whole number is wanted: an integer, with its range', () => {
    expect(limiter({ instanceCount: 1.5 })).toEqual(['instanceCount: must be an integer > 0']);
    expect(config({ throttleStatuses: [429, 200.5, 600] })).toEqual([
      'throttleStatuses.1: must be an integer >= 400 and <= 599',
      'throttleStatuses.2: must be an integer >= 400 and <= 599',
    ]);
  });

  it('the registry, the interceptor and a shared budget say it alike', () => {
    expect(told(() => new RateLimiterRegistry({ maxOriginLimiters: 0 }))).toEqual([
      'maxOriginLimiters: must be an integer >= 1',
    ]);
    expect(told(() => adaptiveRateLimit({ maxAttempts: 0 }))).toEqual([
      'maxAttempts: must be an integer >= 1',
    ]);
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    expect(told(() => createSharedBudget({ name: 'b', store, clock, floorFraction: 2 }))).toEqual([
      'floorFraction: must be a number >= 0 and <= 1',
    ]);
  });

  it("a fixed window's run-time argument is an InvalidArgumentError in the same words", () => {
    const clock = new ManualClock();
    expect(
      told(() => new FixedWindowRateLimiter({ limitForPeriod: 1, limitRefreshPeriod: 1000, clock } as never)),
    ).toEqual(['timeoutDuration: is required: a finite number >= 0']);
    const fixed = new FixedWindowRateLimiter({
      limitForPeriod: 1,
      limitRefreshPeriod: 1000,
      timeoutDuration: 0,
      clock,
    });
    let error: unknown;
    try {
      fixed.changeLimitForPeriod(0);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toBe(
      'changeLimitForPeriod(): limitForPeriod: must be an integer >= 1 (received 0)',
    );
  });

  it("the simulator names the flag, in the limiter's words", async () => {
    const { code, stderr } = await cli(['--queue-limit', '1e17', '--modes', 'aimd', '--minutes', '1']);
    expect(code).toBe(2);
    expect(stderr.split('\n')[1]).toBe(
      '  - --queue-limit "1e17" (queueLimit): must be an integer >= 0 and <= 9007199254740991 (Number.MAX_SAFE_INTEGER) (received 100000000000000000)',
    );
  });
});

describe('other types, values and forms', () => {
  it('a string, true or false, an object, an array: by name', () => {
    expect(limiter({ name: 5 })).toEqual(['name: must be a string']);
    expect(limiter({ aimd: 5 })).toEqual(['aimd: must be an object']);
    expect(config({ throttleStatuses: 429 })).toEqual(['throttleStatuses: must be an array']);
    expect(
      config({
        limiters: { a: { origins: ['https://a.test'], shared: { redis: 'redis://r', failClosed: 'yes' } } },
      }),
    ).toEqual(['limiters.a.shared.failClosed: must be true or false']);
  });

  it('an empty string is told it must not be empty, in a value and in a key', () => {
    // The one rule of a limiter's and a budget's name (white space alone is refused too).
    expect(limiter({ name: '' })).toEqual([
      'name: a limiter name must be a non-empty string, not white space alone',
    ]);
    expect(limiter({ budgets: { '': {} } })).toEqual([
      'budgets."": a budget name must be a non-empty string, not white space alone',
    ]);
  });

  it('a value not among the ones taken: each named', () => {
    expect(config({ rejection: 'throw' })).toEqual(["rejection: must be 'error' or 'response'"]);
    expect(config({ limiters: { a: { origins: ['https://a.test'], maxConcurrentPer: 'host' } } })).toEqual([
      "limiters.a.maxConcurrentPer: must be 'partition' or 'origin'",
    ]);
  });

  it('a union no member took: its members', () => {
    expect(told(() => adaptiveRateLimit({ origin: 5 as never }))).toEqual([
      'origin: must be a string or an instance of URL',
    ]);
  });
});

describe('the messages a schema or a refinement sets itself are kept', () => {
  it("a schema's own error, a refinement's own message, a cross-field rule's", () => {
    expect(limiter({ burst: 'all' })).toEqual(["burst: must be 'paced', 'second' or 'announced'"]);
    for (const slowStart of ['none', 0, 2.5, true]) {
      expect(limiter({ slowStart })).toEqual(['slowStart: must be a whole number of units >= 1, or false']);
    }
    expect(limiter({ clock: {} })[0]).toBe(
      'clock: must be a Clock with now(), setTimeout() and clearTimeout(); not a function here: now(), setTimeout(), clearTimeout()',
    );
    expect(limiter({ minUnitsPerMinute: 10, maxUnitsPerMinute: 5 })).toEqual([
      'minUnitsPerMinute: must not be above maxUnitsPerMinute (5)',
    ]);
    expect(config({ limiters: { a: { origins: ['https://a.test'], maxWait: '10 sec' } } })).toEqual([
      'limiters.a.maxWait: must be a duration such as 500, "500ms", "10s", "2m" or "00:00:10"',
    ]);
    expect(config({ limiters: { ' ': { origins: ['https://a.test'] } } })).toEqual([
      'limiters." ": a limiter name must be a non-empty string, not white space alone',
    ]);
  });
});

describe('issueMessage, for the kinds no schema of the library raises today', () => {
  const say = (schema: z.ZodType, value: unknown) =>
    schema.safeParse(value, { error: issueMessage }).error?.issues[0]?.message;

  it('a format, a multiple, a length, a set of values, an unknown refinement', () => {
    expect(say(z.string().regex(/^a/), 'b')).toBe('must match /^a/');
    expect(say(z.string().startsWith('x'), 'b')).toBe('must start with "x"');
    expect(say(z.email(), 'b')).toBe('must be an email address');
    expect(say(z.number().multipleOf(5), 7)).toBe('must be a multiple of 5');
    expect(say(z.string().max(3), 'abcd')).toBe('must be a string of at most 3 characters');
    expect(say(z.array(z.number()).length(2), [1])).toBe('must be an array of exactly 2 items');
    expect(say(z.enum(['a', 'b', 'c']), 'd')).toBe("must be one of 'a', 'b', 'c'");
    expect(
      say(
        z.number().refine(() => false),
        1,
      ),
    ).toBe('is not valid');
  });

  it("is asked only where a schema sets no message of its own (zod's order, which this relies on)", () => {
    expect(say(z.number().positive({ error: 'mine' }), 0)).toBe('mine');
    expect(say(z.number({ error: 'mine' }), 'x')).toBe('mine');
  });

  it('is given to every parse in src (a parse without it would speak zod)', () => {
    const files = readdirSync(join(__dirname, '../src'), { recursive: true, encoding: 'utf8' }).filter((f) =>
      f.endsWith('.ts'),
    );
    const bare = files.flatMap((file) =>
      readFileSync(join(__dirname, '../src', file), 'utf8')
        .split('\n')
        .filter(
          (line) =>
            /\.(safeParse|parse|safeParseAsync|parseAsync)\(/.test(line) && !/JSON\.parse\(/.test(line),
        )
        .filter((line) => !line.includes('{ error: issueMessage }') && !line.trimStart().startsWith('*'))
        .map((line) => `${file}: ${line.trim()}`),
    );
    expect(bare).toEqual([]);
  });
});
