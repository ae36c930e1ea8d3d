import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ConfigError, InvalidArgumentError, InvalidCallbackValueError } from '../src/errors.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { redact } from '../src/redact.js';
import { RateLimiterRegistry } from '../src/registry/index.js';

// A URL, URLSearchParams or Headers object given where a string or a header list belongs is kept
// in an error's `received`: `console.error(error)` (util.inspect) and `JSON.stringify(error)` print
// it whole. Its secrets must be masked there as in the message (they were printed as they are).

const SECRET = 'ZQXsecret-web-7f3a';

/** Everything a user's log shows of an error: its message, its inspection and its JSON. */
function printed(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    return `${(error as Error).message}\n${inspect(error, { depth: 10 })}\n${JSON.stringify(error)}`;
  }
  throw new Error('expected an error');
}

describe('redact: URL, URLSearchParams and Headers objects', () => {
  it("masks a URL object given as the interceptor's origin (ConfigError's received)", () => {
    const origin = new URL(`ftp://user:${SECRET}@api.example.com/?key=${SECRET}`);
    const text = printed(() => adaptiveRateLimit({ origin }));
    expect(text).toContain('ftp://***@api.example.com/?key=***');
    expect(text).not.toContain(SECRET);
    let error: unknown;
    try {
      adaptiveRateLimit({ origin });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).issues[0]?.received).toBe('ftp://***@api.example.com/?key=***');
  });

  it('masks a URL object in a list of origins and as a rate', () => {
    const url = new URL(`https://user:${SECRET}@api.example.com/?key=${SECRET}`);
    expect(printed(() => adaptiveRateLimit({ limiters: { a: { origins: [url as never] } } }))).not.toContain(
      SECRET,
    );
    expect(printed(() => adaptiveRateLimit({ default: { maxWait: url as never } }))).not.toContain(SECRET);
    const ftp = new URL(`ftp://user:${SECRET}@api.example.com/?key=${SECRET}`);
    expect(printed(() => new RateLimiterRegistry().limiterFor(ftp as never))).not.toContain(SECRET);
  });

  it('masks Headers and URLSearchParams objects in received (InvalidArgumentError, InvalidCallbackValueError)', () => {
    const headers = new Headers({ authorization: `Bearer ${SECRET}`, accept: 'application/json' });
    const error = new InvalidCallbackValueError('partition', 'partition returned a Headers', headers);
    expect(error.received).toEqual({ authorization: '***', accept: 'application/json' });
    expect(`${inspect(error)}${JSON.stringify(error)}`).not.toContain(SECRET);
    const query = new URLSearchParams({ key: SECRET, page: '2' });
    const argument = new InvalidArgumentError('acquire', 'units', 'must be a number', query);
    expect(argument.received).toBe('key=***&page=***');
    expect(`${argument.message}${inspect(argument)}${JSON.stringify(argument)}`).not.toContain(SECRET);
  });

  it('leaves other class instances and plain values as they are', () => {
    const date = new Date(0);
    expect(redact(date)).toBe(date);
    expect(redact(new URL('https://api.example.com/v1'))).toBe('https://api.example.com/v1');
    expect(redact({ origin: 'https://api.example.com' })).toEqual({ origin: 'https://api.example.com' });
  });
});
