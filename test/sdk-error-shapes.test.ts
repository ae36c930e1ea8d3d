import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { HeaderProfile } from '../src/config/types.js';
import { fieldText, headerLookup, headerRecord } from '../src/headers.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { classifyThrown, statusOfError } from '../src/wrap/sdk-errors.js';
import { wrap } from '../src/wrap/wrap.js';
import { drive } from './helpers/drive.js';

// The shapes an SDK's thrown error carries its answer in, beyond a `Headers` or a record:
// `headers` a `Map` (read with its case-sensitive `get`: a `Retry-After` key was missed),
// an array of `[name, value]` pairs (read as a flat raw array: no header at all), and a status as
// its text (`status: '429'`, a deserialized error's: not read, so a 429 was a failure without a
// retry). The headers are read by the one lookup `classifyThrown` and `wrap`'s `headers` share,
// the status by `statusOfError`, which `classifyThrown` reads it with.

const error429 = (headers: unknown) => Object.assign(new Error('429'), { status: 429, headers });

/** The same header fields as a record, a Map and an array of pairs, their names as written. */
function shapes(fields: Record<string, string>) {
  const pairs = Object.entries(fields);
  return { record: fields, map: new Map(pairs), pairs };
}

/** Headers each profile reads a ceiling from, names in the case a server may send them. */
const PROFILE_HEADERS: [HeaderProfile, Record<string, string>, number][] = [
  [
    'openai',
    {
      'X-RateLimit-Limit-Requests': '60',
      'X-RateLimit-Remaining-Requests': '0',
      'X-RateLimit-Reset-Requests': '1s',
    },
    60,
  ],
  [
    'anthropic',
    {
      Date: 'Tue, 01 Dec 2026 12:00:00 GMT',
      'Anthropic-RateLimit-Requests-Limit': '50',
      'Anthropic-RateLimit-Requests-Remaining': '0',
      'Anthropic-RateLimit-Requests-Reset': '2026-12-01T12:00:01Z',
    },
    50,
  ],
  [
    'github',
    {
      Date: 'Tue, 01 Dec 2026 12:00:00 GMT',
      'X-RateLimit-Limit': '60',
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': String(Date.UTC(2026, 11, 1, 12, 30) / 1000),
      'X-RateLimit-Resource': 'search',
    },
    60,
  ],
];

/** The limiter (on a manual clock) after one call of `wrap` that throws `error`. */
async function afterThrow(error: unknown, headers?: HeaderProfile) {
  const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
  const call = wrap(
    limiter,
    async () => {
      throw error;
    },
    { headers, maxAttempts: 1 },
  );
  await expect(call()).rejects.toBe(error);
  const seen = limiter.snapshot();
  limiter.close();
  return seen;
}

describe('an SDK error whose headers are a Map: names read case-insensitively', () => {
  it("reads a Map's Retry-After (the wait of a 429), as a record's", () => {
    const { map, record } = shapes({ 'Retry-After': '2' });
    expect(classifyThrown(error429(map))).toEqual({ kind: 'throttled', retryAfterMs: 2_000 });
    expect(classifyThrown(error429(map))).toEqual(classifyThrown(error429(record)));
  });

  it('reads a Map in response.headers and $response.headers too', () => {
    const response = { status: 429, headers: new Map([['Retry-After-Ms', '250']]) };
    expect(classifyThrown({ response })).toEqual({ kind: 'throttled', retryAfterMs: 250 });
    const aws = {
      name: 'ThrottlingException',
      $metadata: { httpStatusCode: 400 },
      $response: { statusCode: 400, headers: new Map([['Retry-After', '3']]) },
    };
    expect(classifyThrown(aws)).toEqual({ kind: 'throttled', retryAfterMs: 3_000 });
  });

  it("knows the library's own refusal in a Map (X-Adaptive-Rate-Limit): not the server's 429", () => {
    const map = new Map([['X-Adaptive-Rate-Limit', 'rejected']]);
    expect(classifyThrown(error429(map))).toEqual({ kind: 'failed' });
  });

  it.each(PROFILE_HEADERS)(
    "wrap's headers '%s' reads the quota of a Map with names in capitals, as of a record",
    async (profile, fields, limit) => {
      const { map, record } = shapes(fields);
      const fromMap = await afterThrow(error429(map), profile);
      expect(fromMap.announcedRate).toBe(limit);
      expect(fromMap).toEqual(await afterThrow(error429(record), profile));
    },
  );
});

/** Pairs that give one name twice, in two cases. */
const REPEATED: [string, string][] = [
  ['RateLimit-Policy', '"a";q=10;w=1'],
  ['x-other', '1'],
  ['ratelimit-policy', '"b";q=60;w=60'],
];

describe('an SDK error whose headers are an array of [name, value] pairs', () => {
  it('reads the wait of a 429 from one pair, and from several', () => {
    expect(classifyThrown(error429([['retry-after', '2']]))).toEqual({
      kind: 'throttled',
      retryAfterMs: 2_000,
    });
    const several = [
      ['content-type', 'application/json'],
      ['Retry-After', '5'],
    ];
    expect(classifyThrown(error429(several))).toEqual({ kind: 'throttled', retryAfterMs: 5_000 });
  });

  it.each(PROFILE_HEADERS)(
    "wrap's headers '%s' reads the quota of the pairs, as of a record",
    async (profile, fields, limit) => {
      const { pairs, record } = shapes(fields);
      const fromPairs = await afterThrow(error429(pairs), profile);
      expect(fromPairs.announcedRate).toBe(limit);
      expect(fromPairs).toEqual(await afterThrow(error429(record), profile));
    },
  );

  it('a repeated name is a list of its values, read as the Headers class reads it', () => {
    const pairs = REPEATED;
    const lookup = headerLookup(pairs);
    expect(lookup('ratelimit-policy')).toEqual(['"a";q=10;w=1', '"b";q=60;w=60']);
    expect(fieldText(lookup, 'ratelimit-policy')).toBe(new Headers(pairs).get('ratelimit-policy'));
    // A Map holds one name in two cases: the same list.
    expect(headerLookup(new Map(pairs))('ratelimit-policy')).toEqual(lookup('ratelimit-policy'));
  });

  it('makes the record of a list of pairs as of a Map of them, not as of a flat array', () => {
    const pairs = REPEATED;
    expect(headerRecord(pairs)).toEqual({
      'ratelimit-policy': ['"a";q=10;w=1', '"b";q=60;w=60'],
      'x-other': '1',
    });
    expect(headerRecord(pairs)).toEqual(headerRecord(new Map(pairs)));
  });
});

describe('an SDK error whose status is its text', () => {
  it.each([
    ['status', { status: '429' }],
    ['statusCode', { statusCode: '429' }],
    ['response.status', { response: { status: '429' } }],
    ['response.statusCode', { response: { statusCode: '429' } }],
    ['$metadata.httpStatusCode', { $metadata: { httpStatusCode: '429' } }],
    ['$response.statusCode', { $response: { statusCode: '429' } }],
  ])("reads %s '429' as a 429, with its wait", (_, fields) => {
    const error = Object.assign(new Error('Too Many Requests'), fields, {
      headers: { 'retry-after': '1' },
    });
    expect(classifyThrown(error)).toEqual({ kind: 'throttled', retryAfterMs: 1_000 });
  });

  it("reads '404' as an answer the server processed, '503' as a failure", () => {
    expect(classifyThrown({ status: '404' })).toEqual({ kind: 'success' });
    expect(classifyThrown({ statusCode: '503', headers: { 'retry-after': '4' } })).toEqual({
      kind: 'failed',
      retryAfterMs: 4_000,
    });
  });

  it('reads exactly three digits from 100 to 599: no part of a longer text, no other number', () => {
    const read = (status: string) => statusOfError({ status });
    expect(['100', '429', '599'].map(read)).toEqual([100, 429, 599]);
    for (const text of ['429abc', '429 ', ' 429', '+429', '0429', '42', '099', '600', '4.29e2', '0x1ad', ''])
      expect(read(text), text).toBeUndefined();
    // A text that is no status leaves the next field to be read.
    expect(statusOfError({ status: '429abc', statusCode: 503 })).toBe(503);
  });

  it('wrap retries a call whose error says 429 in text, and the limiter counts a throttle', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock });
    let calls = 0;
    const call = wrap(
      limiter,
      async () => {
        calls++;
        if (calls === 1) throw Object.assign(new Error('Too Many Requests'), { statusCode: '429' });
        return 'ok';
      },
      { maxAttempts: 2 },
    );
    // The retry waits for the limiter after the cut: its manual clock moves until the call ends.
    await expect(drive(clock, call())).resolves.toBe('ok');
    expect(calls).toBe(2);
    expect(limiter.snapshot().throttles).toBe(1);
    limiter.close();
  });
});

describe('an SDK error with an empty headers holder beside one that has the answer', () => {
  it.each([
    ['a record', {}],
    ['a Map', new Map()],
    ['an array', []],
    ['a Headers', new Headers()],
  ])("passes over %s in error.headers for response.headers' Retry-After", (_, empty) => {
    const error = { status: 429, headers: empty, response: { status: 429, headers: { 'retry-after': '2' } } };
    expect(classifyThrown(error)).toEqual({ kind: 'throttled', retryAfterMs: 2_000 });
  });

  it('reads the quota a profile announces in response.headers past an empty error.headers', async () => {
    const [profile, fields, limit] = PROFILE_HEADERS[0] as (typeof PROFILE_HEADERS)[number];
    const error = Object.assign(new Error('429'), {
      status: 429,
      headers: {},
      response: { headers: fields },
    });
    expect((await afterThrow(error, profile)).announcedRate).toBe(limit);
  });
});
