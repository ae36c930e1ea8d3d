import { describe, expect, it } from 'vitest';
import { InvalidCallbackValueError } from '../src/errors.js';
import { headerLookup } from '../src/headers.js';
import { readAnthropic } from '../src/http/quota-headers/anthropic.js';
import { readGithub } from '../src/http/quota-headers/github.js';
import { readIetf } from '../src/http/quota-headers/ietf.js';
import { parseGoDuration, quotaReader } from '../src/http/quota-headers/index.js';
import { readOpenai } from '../src/http/quota-headers/openai.js';
import { readShopify } from '../src/http/quota-headers/shopify.js';

const h = (headers: Record<string, string | string[]>) => headerLookup(headers);

describe('IETF RateLimit fields (structured-headers)', () => {
  it('joins draft-10 policies and their current values by name', () => {
    const quotas = readIetf(
      h({
        'ratelimit-policy': '"burst";q=100;w=60,"daily";q=1000;w=86400',
        ratelimit: '"burst";r=50;t=30, "daily";r=900;t=3600',
      }),
    );
    expect(quotas).toEqual([
      { policy: 'burst', limit: 100, windowMs: 60_000, remaining: 50, resetMs: 30_000 },
      { policy: 'daily', limit: 1000, windowMs: 86_400_000, remaining: 900, resetMs: 3_600_000 },
    ]);
  });

  it('reads RateLimit alone, and a policy alone', () => {
    expect(readIetf(h({ ratelimit: '"default";r=50;t=30' }))).toEqual([
      { policy: 'default', remaining: 50, resetMs: 30_000 },
    ]);
    expect(readIetf(h({ 'ratelimit-policy': '"default";q=600;w=60' }))).toEqual([
      { policy: 'default', limit: 600, windowMs: 60_000 },
    ]);
  });

  it('accepts pk, qu="requests", spaces after ";" and several field lines', () => {
    const quotas = readIetf(
      h({
        'ratelimit-policy': ['"a"; q=10; w=1; qu="requests"; pk=:cHJvamVjdA==:', '"b";q=5;w=2'],
        ratelimit: '"a"; r=3; t=1; pk=:cHJvamVjdA==:',
      }),
    );
    expect(quotas?.map((q) => q.policy)).toEqual(['a', 'b']);
    expect(quotas?.[0]?.remaining).toBe(3);
  });

  it('skips a policy counted in content-bytes or concurrent-requests, with its current value', () => {
    const quotas = readIetf(
      h({
        'ratelimit-policy': '"bytes";q=65535;qu="content-bytes";w=10,"req";q=10;w=1',
        ratelimit: '"bytes";r=100;t=5,"req";r=9;t=1',
      }),
    );
    expect(quotas?.map((q) => q.policy)).toEqual(['req']);
  });

  it('reads the draft-07 Dictionary with the window of the policy whose quota is its limit', () => {
    expect(
      readIetf(h({ ratelimit: 'limit=100, remaining=50, reset=5', 'ratelimit-policy': '10;w=1, 100;w=60' })),
    ).toEqual([{ policy: 'default', remaining: 50, resetMs: 5_000, limit: 100, windowMs: 60_000 }]);
  });

  it.each([
    ['a negative r', { ratelimit: '"a";r=-1;t=30' }],
    ['a decimal t', { ratelimit: '"a";r=1;t=1.5' }],
    // Regression: the parser gives a Decimal as a number, and 5.0 passed as the Integer 5.
    ['a decimal r that is whole', { ratelimit: '"a";r=5.0;t=30' }],
    ['a decimal t that is whole', { ratelimit: '"a";r=5;t=1.0' }],
    ['a decimal q that is whole', { 'ratelimit-policy': '"a";q=100.0;w=60' }],
    ['a decimal w that is whole', { 'ratelimit-policy': '"a";q=100;w=60.0' }],
    ['a draft-07 decimal that is whole', { ratelimit: 'limit=100, remaining=50.0, reset=5' }],
    ['a string r', { ratelimit: '"a";r="5";t=30' }],
    ['a token name', { ratelimit: 'a;r=5;t=30' }],
    ['no r', { ratelimit: '"a";t=30' }],
    ['upper-case keys', { ratelimit: '"a";R=5;T=30' }],
    ['a trailing comma', { ratelimit: '"a";r=5;t=30,' }],
    ['garbage', { ratelimit: 'fifty, please' }],
    ['a zero window', { 'ratelimit-policy': '"a";q=5;w=0' }],
    ['a policy without q', { 'ratelimit-policy': '"a";w=60' }],
    ['a pk that is no byte sequence', { ratelimit: '"a";r=5;pk="x"' }],
    ['a cached response', { ratelimit: '"a";r=5;t=30', age: '3' }],
    ['the draft-06 fields', { 'ratelimit-remaining': '5', 'ratelimit-reset': '30', 'ratelimit-limit': '10' }],
  ])('ignores a field with %s', (_name, headers) => {
    expect(readIetf(h(headers))).toBeUndefined();
  });

  it('reads a field whose Strings, or a parameter the draft does not define, hold a Decimal', () => {
    expect(readIetf(h({ ratelimit: '"v1.5";r=5;t=30;x=0.5' }))).toEqual([
      { policy: 'v1.5', remaining: 5, resetMs: 30_000 },
    ]);
  });

  it('takes no draft-07 window from a policy whose quota is a Decimal', () => {
    expect(
      readIetf(h({ ratelimit: 'limit=100, remaining=50, reset=5', 'ratelimit-policy': '100.0;w=60' })),
    ).toEqual([{ policy: 'default', remaining: 50, resetMs: 5_000, limit: 100, windowMs: undefined }]);
  });

  it('keeps the well-formed field when the other one is malformed', () => {
    expect(readIetf(h({ ratelimit: '"a";r=5;t=30', 'ratelimit-policy': '"a";q=-1' }))).toEqual([
      { policy: 'a', remaining: 5, resetMs: 30_000 },
    ]);
  });
});

describe('GitHub profile', () => {
  const now = Date.UTC(2026, 0, 15, 12, 0, 0);
  const base = {
    'x-ratelimit-limit': '5000',
    'x-ratelimit-remaining': '4999',
    'x-ratelimit-used': '1',
    'x-ratelimit-resource': 'core',
  };

  it('reads limit, remaining, resource and the epoch reset against the response Date', () => {
    // The local clock is 2 minutes ahead of the server's: the reset counts from the server's Date.
    const serverDate = 'Thu, 15 Jan 2026 11:58:00 GMT';
    const reset = String(Date.UTC(2026, 0, 15, 12, 28, 0) / 1000);
    expect(readGithub(h({ ...base, 'x-ratelimit-reset': reset, date: serverDate }), now)).toEqual([
      // Date has whole seconds: the answer was made during 11:58:00, counted from its middle.
      {
        policy: 'github:core',
        remaining: 4999,
        resetMs: 30 * 60_000 - 500,
        limit: 5000,
        windowMs: 3_600_000,
        burstPerMinute: 900,
      },
    ]);
  });

  it('counts from the local clock without a valid Date, and never below zero', () => {
    const reset = String(now / 1000 + 60);
    expect(readGithub(h({ ...base, 'x-ratelimit-reset': reset, date: 'soon' }), now)?.[0]?.resetMs).toBe(
      60_000,
    );
    const past = String(now / 1000 - 60);
    expect(readGithub(h({ ...base, 'x-ratelimit-reset': past }), now)?.[0]?.resetMs).toBe(0);
  });

  it('takes remaining from limit - used, and a minute window for search', () => {
    const quota = readGithub(
      h({ 'x-ratelimit-limit': '30', 'x-ratelimit-used': '12', 'x-ratelimit-resource': 'search' }),
      now,
    );
    expect(quota).toEqual([
      {
        policy: 'github:search',
        remaining: 18,
        resetMs: undefined,
        limit: 30,
        windowMs: 60_000,
        burstPerMinute: 900,
      },
    ]);
  });

  it('ignores negative and garbage numbers', () => {
    const quota = readGithub(
      h({ 'x-ratelimit-remaining': '-1', 'x-ratelimit-limit': 'lots', 'x-ratelimit-reset': '1e9' }),
      now,
    );
    expect(quota).toBeUndefined();
  });
});

describe('OpenAI profile', () => {
  it.each([
    ['6m0s', 360_000],
    ['1s', 1_000],
    ['12ms', 12],
    ['1h2m3.5s', 3_723_500],
    ['0s', 0],
    ['-1s', undefined],
    ['1', undefined],
    ['1x', undefined],
    ['', undefined],
  ])('reads the duration %j as %s ms', (text, ms) => {
    expect(parseGoDuration(text)).toBe(ms);
  });

  it('reads each budget per minute in its own units, never the tokens in requests', () => {
    const quotas = readOpenai(
      h({
        'x-ratelimit-limit-requests': '60',
        'x-ratelimit-remaining-requests': '50',
        'x-ratelimit-reset-requests': '10s',
        'x-ratelimit-limit-tokens': '150000',
        'x-ratelimit-remaining-tokens': '140000',
        'x-ratelimit-reset-tokens': '4s',
      }),
    );
    // The requests refill one each 10 s / 10 missing; the tokens one each 4 s / 10,000 missing.
    expect(quotas).toEqual([
      {
        policy: 'openai:requests',
        budget: 'requests',
        remaining: 50,
        resetMs: 1_000,
        limit: 60,
        windowMs: 60_000,
        asAnnounced: true,
      },
      {
        policy: 'openai:tokens',
        budget: 'tokens',
        remaining: 140_000,
        resetMs: 0.4,
        limit: 150_000,
        windowMs: 60_000,
        asAnnounced: true,
      },
    ]);
  });

  it("reads Azure OpenAI's integer-second resets as seconds", () => {
    const quotas = readOpenai(
      h({
        'x-ratelimit-limit-tokens': '1000',
        'x-ratelimit-remaining-tokens': '900',
        'x-ratelimit-reset-tokens': '6',
      }),
    );
    expect(quotas).toEqual([
      {
        policy: 'openai:tokens',
        budget: 'tokens',
        remaining: 900,
        resetMs: 60,
        limit: 1_000,
        windowMs: 60_000,
        asAnnounced: true,
      },
    ]);
  });

  it('pauses for one request to refill when none is left, not for the whole reset', () => {
    const quotas = readOpenai(
      h({
        'x-ratelimit-limit-requests': '60',
        'x-ratelimit-remaining-requests': '0',
        'x-ratelimit-reset-requests': '1m0s',
      }),
    );
    expect(quotas?.[0]).toMatchObject({ remaining: 0, resetMs: 1_000 });
  });

  it('ignores garbage', () => {
    expect(
      readOpenai(h({ 'x-ratelimit-limit-requests': '60', 'x-ratelimit-remaining-requests': '-3' })),
    ).toBeUndefined();
    // A limit sent but not a number is garbage, not a limit left out.
    expect(
      readOpenai(h({ 'x-ratelimit-limit-tokens': 'x', 'x-ratelimit-remaining-tokens': '900' })),
    ).toBeUndefined();
  });

  it("reads Azure OpenAI's remaining without a limit as a lower bound of the limit", () => {
    const quotas = readOpenai(
      h({ 'x-ratelimit-remaining-requests': '59', 'x-ratelimit-remaining-tokens': '0' }),
    );
    expect(quotas).toEqual([
      {
        policy: 'openai:requests',
        budget: 'requests',
        remaining: 59,
        limit: 59,
        windowMs: 60_000,
        asAnnounced: true,
        limitIsLowerBound: true,
      },
      {
        policy: 'openai:tokens',
        budget: 'tokens',
        remaining: 0,
        limit: 0,
        windowMs: 60_000,
        asAnnounced: true,
        limitIsLowerBound: true,
      },
    ]);
  });
});

describe('Anthropic profile', () => {
  it('reads requests, input and output tokens, each in its own units, resets against Date', () => {
    const date = 'Tue, 01 Dec 2026 12:00:00 GMT';
    const quotas = readAnthropic(
      h({
        date,
        'anthropic-ratelimit-requests-limit': '50',
        'anthropic-ratelimit-requests-remaining': '49',
        'anthropic-ratelimit-requests-reset': '2026-12-01T12:00:01.500Z',
        'anthropic-ratelimit-input-tokens-limit': '40000',
        'anthropic-ratelimit-input-tokens-remaining': '38000',
        'anthropic-ratelimit-input-tokens-reset': '2026-12-01T12:00:03.500Z',
        'anthropic-ratelimit-output-tokens-limit': '8000',
        'anthropic-ratelimit-output-tokens-remaining': '8000',
        'anthropic-ratelimit-output-tokens-reset': '2026-12-01T12:00:00Z',
        'anthropic-ratelimit-tokens-limit': '8000',
      }),
      0,
    );
    // Date's second is read at its middle: 12:00:00.5.
    expect(quotas).toEqual([
      {
        policy: 'anthropic:requests',
        budget: 'requests',
        remaining: 49,
        resetMs: 1_000,
        limit: 50,
        windowMs: 60_000,
        asAnnounced: true,
      },
      {
        policy: 'anthropic:input_tokens',
        budget: 'input_tokens',
        remaining: 38_000,
        resetMs: 1.5,
        limit: 40_000,
        windowMs: 60_000,
        asAnnounced: true,
      },
      {
        policy: 'anthropic:output_tokens',
        budget: 'output_tokens',
        remaining: 8_000,
        resetMs: 7.5,
        limit: 8_000,
        windowMs: 60_000,
        asAnnounced: true,
      },
    ]);
  });

  it('ignores garbage', () => {
    expect(
      readAnthropic(
        h({ 'anthropic-ratelimit-requests-limit': 'x', 'anthropic-ratelimit-requests-remaining': '1' }),
        0,
      ),
    ).toBeUndefined();
  });
});

describe('Shopify profile', () => {
  it('reads the leaky bucket: the leak rate as the ceiling, one marble as the wait', () => {
    expect(readShopify(h({ 'x-shopify-shop-api-call-limit': '32/40' }))).toEqual([
      { policy: 'shopify', remaining: 8, resetMs: 500, limit: 40, windowMs: 20_000, asAnnounced: true },
    ]);
  });

  it.each(['41/40', '-1/40', '3/0', 'full', '32 of 40'])('ignores %j', (value) => {
    expect(readShopify(h({ 'x-shopify-shop-api-call-limit': value }))).toBeUndefined();
  });
});

describe('quotaReader', () => {
  const github = { 'x-ratelimit-limit': '60', 'x-ratelimit-remaining': '10', 'x-ratelimit-reset': '1' };

  it('reads the standard fields by default, and never guesses a vendor form', () => {
    const read = quotaReader(undefined, undefined);
    expect(read?.(h({ ...github, ratelimit: '"d";r=5;t=1' }), () => ({}), 0)).toEqual([
      { policy: 'd', remaining: 5, resetMs: 1_000 },
    ]);
    expect(read?.(h(github), () => ({}), 0)).toBeUndefined();
  });

  it('adds the chosen vendor profile and the user function', () => {
    const read = quotaReader('github', () => ({ policy: 'mine', remaining: 1, resetMs: 5 }));
    const quotas = read?.(h(github), () => ({}), 0);
    expect(quotas?.map((q) => q.policy)).toEqual(['github:core', 'mine']);
  });

  it('reads nothing with headers: false and no function', () => {
    expect(quotaReader(false, undefined)).toBeUndefined();
  });

  it.each([
    [Number.NaN, /returned NaN/],
    [Number.POSITIVE_INFINITY, /returned Infinity/],
    [-1, /returned -1/],
    ['soon', /returned "soon"/],
    [null, /returned null/],
    [[{ remaining: 1 }, 5], /5 is not an object/],
    [{ remaining: -1 }, /remaining -1 is not a finite number >= 0/],
    [{ resetMs: Number.NaN }, /resetMs NaN/],
    [{ limit: 0 }, /limit 0 is not a finite number > 0/],
    [{ windowMs: Number.POSITIVE_INFINITY }, /windowMs Infinity/],
    [{ limit: '5' }, /limit "5"/],
    [{ policy: 7 }, /policy is not a string/],
  ])('rejects quotaFromHeaders returning %j with InvalidCallbackValueError', (value, message) => {
    const read = quotaReader(false, () => value as never);
    let error: unknown;
    try {
      read?.(h({}), () => ({}), 0);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidCallbackValueError);
    expect(error).toMatchObject({ code: 'ERR_INVALID_CALLBACK_VALUE', callback: 'quotaFromHeaders' });
    expect((error as InvalidCallbackValueError).received).toBe(value);
    expect((error as Error).message).toMatch(message);
  });

  it('takes a quota, a list of them and undefined from quotaFromHeaders', () => {
    const quota = { policy: 'p', remaining: 0, resetMs: 0, limit: 5, windowMs: 1_000 };
    expect(quotaReader(false, () => quota)?.(h({}), () => ({}), 0)).toEqual([quota]);
    expect(quotaReader(false, () => [quota, {}])?.(h({}), () => ({}), 0)).toEqual([quota, {}]);
    expect(quotaReader(false, () => undefined)?.(h({}), () => ({}), 0)).toBeUndefined();
  });
});
