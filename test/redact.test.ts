import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/schema.js';
import { HEADER_PROFILES } from '../src/config/types.js';
import { ConfigError } from '../src/errors.js';
import { defaultPartitionHeaders, PARTITION_HEADERS } from '../src/http/partition.js';
import { redact, redactText } from '../src/redact.js';
import { configError } from './helpers/config-error.js';

describe('redactText', () => {
  it.each([
    // URLs that parse
    ['redis://user:pw@127.0.0.1:6379/0', 'redis://***@127.0.0.1:6379/0'],
    ['rediss://:pw@cache.example.com:6380', 'rediss://***@cache.example.com:6380'],
    ['https://user@api.example.com/v1', 'https://***@api.example.com/v1'],
    ['https://api.example.com/v1?key=abc&page=2', 'https://api.example.com/v1?key=***&page=***'],
    ['https://api.example.com/?abc123', 'https://api.example.com/?***'],
    ['https://example.com/cb#access_token=abc&state=x', 'https://example.com/cb#access_token=***&state=***'],
    ['https://u:p@example.com/a?b=c#d=e', 'https://***@example.com/a?b=***#d=***'],
    ['https://u:p@ss@example.com/', 'https://***@example.com/'],
    // URLs that `new URL` refuses
    ['redis://user:pw@127.0.0.1:notaport/0', 'redis://***@127.0.0.1:notaport/0'],
    ['redis://:a/b+c=@host:6379', 'redis://***@host:6379'],
    ['http://user:pw@[::1:6379', 'http://***@[::1:6379'],
    ['https://exa mple.com/?key=abc', 'https://exa mple.com/?key=***'],
    // no scheme
    ['user:pw@127.0.0.1:6379', '***@127.0.0.1:6379'],
    ['//user:pw@host/x', '//***@host/x'],
    ['/v1/items?key=abc', '/v1/items?key=***'],
    ['key=abc&sig=def', 'key=***&sig=***'],
    // in sentences and JSON
    [
      'units(GET https://api.example.com/v1?key=abc) returned 0',
      'units(GET https://api.example.com/v1?key=*** returned 0',
    ],
    ['(received "redis://u:pw@h:x/0")', '(received "redis://***@h:x/0")'],
    [
      '["https://u:pw@a.example.com","https://b.example.com/?k=v"]',
      '["https://***@a.example.com","https://b.example.com/?k=***"]',
    ],
    ['authorization: Bearer abc.def', 'authorization: ***'],
    ['{"Authorization":"Basic dXNlcjpwdw=="}', '{"Authorization":"***"}'],
    ['x-api-key=abc', 'x-api-key=***'],
    ['X-Shopify-Access-Token: shpat_abc123', 'X-Shopify-Access-Token: ***'],
    ['sent with Bearer abc.def', 'sent with Bearer ***'],
    ['cookie: a=b; c=d', 'cookie: ***'],
  ])('%s', (input, expected) => {
    expect(redactText(input)).toBe(expected);
  });

  it.each([
    'rate limiter "github": queue full: 1000 of 1000 waiting',
    'maxAttempts: must be an integer >= 1',
    'unknown key (did you mean "origin"? expected one of: limiters, default)',
    'https://api.example.com',
    'https://api.example.com/docs#top',
    'redis://127.0.0.1:6379/0',
    'write to bob@example.com',
    'a=b',
    '',
  ])('leaves %j as it is', (text) => {
    expect(redactText(text)).toBe(text);
  });

  it('masks a password holding a quote, a backtick, an angle bracket or a space (a URL parser takes them)', () => {
    for (const password of ["s3cr'et", 's3cr"et', 's3cr`et', 's3cr<et', 's3cr>et']) {
      const text = redactText(`connect failed: redis://default:${password}@redis.internal:6379/0`);
      expect(text).toBe('connect failed: redis://***@redis.internal:6379/0');
    }
    expect(redactText('redis://default:s3cr et@redis.internal:6379/abc')).toBe(
      'redis://***@redis.internal:6379/abc',
    );
    const error = configError(() =>
      parseConfig({
        limiters: {
          x: { origins: ['https://a.test'], shared: { redis: 'redis://u:s3cr"et@redis.internal:6379/abc' } },
        },
      }),
    );
    expect(`${error.message} ${JSON.stringify(error.issues)}`).not.toContain('s3cr');
  });

  it('masks an API key by its prefix wherever it stands (a key given as `api` is echoed as received)', () => {
    expect(redactText('expected openai (received "sk-proj-AbCdEf0123456789SECRET")')).toBe(
      'expected openai (received "sk-proj-***")',
    );
    expect(redactText('ghp_0123456789abcdefABCDEF and sk-ant-api03-xyzxyzxyz')).toBe(
      'ghp_*** and sk-ant-***',
    );
    const error = configError(() => parseConfig({ default: { api: 'sk-proj-AbCdEf0123456789SECRET' } }));
    expect(error.message).not.toContain('SECRET');
  });

  it('masks what it masked again the same way (idempotent)', () => {
    const once = redactText('https://u:p@h.example.com/?a=b authorization: Bearer x');
    expect(redactText(once)).toBe(once);
  });
});

describe('redact', () => {
  it('masks credential headers and fields in objects, copying only what changed', () => {
    const input = {
      origin: 'https://api.example.com',
      headers: { Authorization: 'Bearer abc', 'x-api-key': 'k', accept: 'application/json', cookie: ['a=b'] },
      redis: { password: 'pw', host: 'h' },
      url: 'https://api.example.com/?key=abc',
    };
    const out = redact(input);
    expect(out).toEqual({
      origin: 'https://api.example.com',
      headers: { Authorization: '***', 'x-api-key': '***', accept: 'application/json', cookie: ['***'] },
      redis: { password: '***', host: 'h' },
      url: 'https://api.example.com/?key=***',
    });
    expect(input.headers.Authorization).toBe('Bearer abc');
    const clean = { a: 1, b: ['x', { c: 'd' }] };
    expect(redact(clean)).toBe(clean);
  });

  it('masks a class instance in an error message, and keeps it as it is in received', () => {
    class Client {
      options = { host: 'h', password: 'pw-of-the-client' };
    }
    const client = new Client();
    const error = new ConfigError([{ path: 'redis', message: 'must be a Redis URL', received: client }]);
    expect(error.message).not.toContain('pw-of-the-client');
    expect(error.message).toContain('"password":"***"');
    expect(error.issues[0]?.received).toBe(client);
  });

  it("masks every header a limiter partitions by by default, a vendor profile's included", () => {
    const names = [...PARTITION_HEADERS, ...HEADER_PROFILES.flatMap((p) => defaultPartitionHeaders(p))];
    expect(names).toContain('x-shopify-access-token');
    for (const name of new Set(names)) {
      expect(redact({ [name]: 'secret-value' })).toEqual({ [name]: '***' });
      expect(redact([name.toUpperCase(), 'secret-value'])).toEqual([name.toUpperCase(), '***']);
      expect(redactText(`${name}: secret-value`)).toBe(`${name}: ***`);
    }
  });

  it('masks the value after a credential name in a flat header list', () => {
    expect(
      redact(['accept', '*/*', 'authorization', 'Bearer abc', 'proxy-authorization', 'Basic x']),
    ).toEqual(['accept', '*/*', 'authorization', '***', 'proxy-authorization', '***']);
  });

  it('returns numbers, functions, class instances and cycles as they are', () => {
    const f = () => 1;
    class Client {
      password = 'pw';
    }
    const client = new Client();
    const cyclic: Record<string, unknown> = { a: 'x' };
    cyclic.self = cyclic;
    expect(redact(3)).toBe(3);
    const withNaN = { resetMs: Number.NaN, list: [Number.NaN] };
    expect(redact(withNaN)).toBe(withNaN);
    expect(redact(f)).toBe(f);
    expect(redact(client)).toBe(client);
    expect(redact(cyclic)).toBe(cyclic);
    expect(redact(undefined)).toBe(undefined);
  });
});
