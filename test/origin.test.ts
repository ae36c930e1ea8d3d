import { describe, expect, it } from 'vitest';
import { ConfigError } from '../src/errors.js';
import { normalizeOrigin, originMatcher } from '../src/origin.js';
import { redactText } from '../src/redact.js';

describe('normalizeOrigin', () => {
  it.each([
    ['https://API.Example.COM', 'https://api.example.com'],
    ['HTTPS://api.example.com', 'https://api.example.com'],
    ['https://api.example.com/', 'https://api.example.com'],
    ['https://api.example.com:443', 'https://api.example.com'],
    ['http://api.example.com:80', 'http://api.example.com'],
    ['http://api.example.com:443', 'http://api.example.com:443'],
    ['https://api.example.com:80', 'https://api.example.com:80'],
    ['https://api.example.com:8443/v1/users?page=2#top', 'https://api.example.com:8443'],
    ['https://user:secret@api.example.com', 'https://api.example.com'],
    ['http://127.0.0.1:8080', 'http://127.0.0.1:8080'],
    ['http://[::1]:3000/', 'http://[::1]:3000'],
    ['http://[0:0:0:0:0:0:0:1]:80', 'http://[::1]'],
    ['https://[2001:DB8::1]', 'https://[2001:db8::1]'],
    ['https://bücher.de', 'https://xn--bcher-kva.de'],
    ['  https://api.example.com  ', 'https://api.example.com'],
  ])('normalizes %s to %s', (input, origin) => {
    expect(normalizeOrigin(input)).toBe(origin);
  });

  it('takes a URL object, as undici passes in opts.origin', () => {
    expect(normalizeOrigin(new URL('https://api.example.com:443/'))).toBe('https://api.example.com');
  });

  it.each([
    'api.example.com',
    'localhost:8080',
    '',
    'not a url',
    'ftp://example.com',
    'file:///etc/passwd',
    'ws://example.com',
    'http://',
    'https://exa mple.com',
    '//api.example.com',
  ])('refuses %j with a ConfigError at path origin', (input) => {
    let error: unknown;
    try {
      normalizeOrigin(input);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).issues).toEqual([
      { path: 'origin', message: expect.stringContaining('http or https origin'), received: input },
    ]);
  });

  it('names the field it was given in the error', () => {
    expect(() => normalizeOrigin('nope', 'limiters.github.origins.0')).toThrow(
      /limiters\.github\.origins\.0/,
    );
  });
});

describe('originMatcher', () => {
  const cases: [pattern: string, origin: string, matches: boolean][] = [
    ['https://api.example.com', 'https://api.example.com', true],
    ['https://API.example.com/', 'https://api.example.com', true],
    ['https://api.example.com', 'https://API.example.com:443/', true],
    ['https://api.example.com:443', 'https://api.example.com', true],
    ['https://api.example.com', 'http://api.example.com', false],
    ['https://api.example.com', 'https://api.example.com:8443', false],
    ['https://api.example.com', 'https://eu.api.example.com', false],
    ['http://[::1]:3000', 'http://[0::1]:3000', true],
    ['*.example.com', 'https://a.example.com', true],
    ['*.example.com', 'http://a.b.example.com:8080', true],
    ['*.example.com', 'https://example.com', false],
    ['*.example.com', 'https://badexample.com', false],
    ['*.example.com', 'https://a.example.com.evil.net', false],
    ['*.example.com', 'https://a-example.com', false],
    ['*.EXAMPLE.com', 'https://A.example.COM', true],
    ['https://*.example.com', 'https://a.example.com', true],
    ['https://*.example.com', 'https://a.example.com:443', true],
    ['https://*.example.com', 'http://a.example.com', false],
    ['https://*.example.com', 'https://a.example.com:8443', false],
    ['HTTPS://*.example.com/', 'https://a.example.com', true],
    ['http://*.example.com:8080', 'http://a.example.com:8080', true],
    ['*.example.com:8443', 'https://a.example.com:8443', true],
    ['*.example.com:8443', 'http://a.example.com:8443', true],
    ['*.example.com:8443', 'https://a.example.com', false],
    ['*.example.com:443', 'https://a.example.com', true],
    ['*.bücher.de', 'https://shop.xn--bcher-kva.de', true],
    ['*.example.com', 'not an origin', false],
    ['*.example.com', 'ftp://a.example.com', false],
  ];

  it.each(cases)('pattern %s against %s: %s', (pattern, origin, matches) => {
    expect(originMatcher([pattern])(origin)).toBe(matches);
  });

  it('matches when any pattern of the list does', () => {
    const matches = originMatcher(['https://api.github.com', '*.githubusercontent.com']);
    expect(
      ['https://api.github.com', 'https://raw.githubusercontent.com', 'https://github.com'].map(matches),
    ).toEqual([true, true, false]);
  });

  it('matches nothing for an empty list', () => {
    expect(originMatcher([])('https://api.example.com')).toBe(false);
  });

  it.each([
    ['*', 'must be an origin'],
    ['', 'must be an origin'],
    ['example.com', 'must be an origin'],
    ['api.example.com:443', 'must be an origin'],
    ['*example.com', 'must be an origin'],
    ['**.example.com', 'must be an origin'],
    ['a.*.example.com', 'must be an origin'],
    ['*.*.example.com', 'must be an origin'],
    ['*.', 'must be an origin'],
    ['*.exa mple.com', 'must be an origin'],
    ['*.user@example.com', 'must be an origin'],
    ['*.example.com:99999', 'must be an origin'],
    ['https://*.example.com/v1', 'no path'],
    ['https://api.example.com/v1', 'no path'],
    ['https://api.example.com?key=1', 'no path'],
    ['https://api.example.com#top', 'no path'],
    ['https://user:secret@api.example.com', 'no user name or password'],
    ['ftp://*.example.com', 'not ftp'],
    ['ws://api.example.com', 'not ws'],
  ])('refuses the pattern %j, saying %s', (pattern, message) => {
    let error: unknown;
    try {
      originMatcher(['https://ok.example.com', pattern]);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    // The value received is echoed with its secrets masked (see test/redact.test.ts).
    expect((error as ConfigError).issues).toEqual([
      { path: 'origins.1', message: expect.stringContaining(message), received: redactText(pattern) },
    ]);
    expect((error as Error).message).toContain(JSON.stringify(redactText(pattern)));
  });

  it('reports every bad pattern at once, under the path it was given', () => {
    let error: unknown;
    try {
      originMatcher(['example.com', 'https://ok.example.com', '*'], 'limiters.github.origins');
    } catch (e) {
      error = e;
    }
    expect((error as ConfigError).issues.map((i) => i.path)).toEqual([
      'limiters.github.origins.0',
      'limiters.github.origins.2',
    ]);
  });

  it('refuses a pattern that is not a string', () => {
    expect(() => originMatcher([42 as unknown as string])).toThrow(ConfigError);
  });
});
