import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, type Dispatcher, fetch, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { headerLookup, parseHttpDate, type ResponseHeaders } from '../src/headers.js';
import { parseRetryAfter, retryAfterFromHeaders } from '../src/http/retry-after.js';

/** Thursday 15 January 2026, 12:00:00 UTC: "now" for every date below. */
const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);
const DAY = 86_400_000;

describe('parseRetryAfter', () => {
  it.each([
    ['120', 120_000],
    ['0', 0],
    ['00', 0],
    ['1.5', 1500],
    ['2.0', 2000],
    ['1.1', 1100],
    ['0.493', 493],
    ['292.052427053', 292_053],
    ['0.0001', 1],
    ['999999999', 999_999_999_000],
    ['9'.repeat(30), Number.MAX_SAFE_INTEGER],
    [' 5 ', 5000],
    ['\t5\t', 5000],
  ])('reads delay-seconds %j as %d ms', (value, ms) => {
    expect(parseRetryAfter(value, NOW)).toBe(ms);
  });

  it.each([
    ['1e3', 'an exponent'],
    ['0x10', 'hex'],
    ['Infinity', 'Infinity'],
    ['NaN', 'NaN'],
    ['-1', 'a negative number'],
    ['-5', 'a negative number that Date.parse reads as 2001'],
    ['+5', 'a plus sign'],
    ['', 'an empty value'],
    ['   ', 'only spaces'],
    ['.5', 'a fraction without a whole part'],
    ['5.', 'a point without a fraction'],
    ['5 s', 'a unit'],
    ['1 000', 'a space inside'],
    ['٥', 'a non-ASCII digit'],
    ['\n5', 'a line break, which is not OWS'],
    ['soon', 'garbage'],
    ['2026-01-15T12:00:30Z', 'an ISO 8601 instant'],
  ])('ignores %j (%s)', (value) => {
    expect(parseRetryAfter(value, NOW)).toBeUndefined();
  });

  it.each([
    ['5, 7', 5000],
    ['soon, 7', 7000],
    [',7', 7000],
    [['30', '15'], 30_000],
    [['soon', '15'], 15_000],
    [['', ' 15 '], 15_000],
    ['Thu, 15 Jan 2026 12:00:30 GMT, Fri, 16 Jan 2026 12:00:00 GMT', 30_000],
    ['Thu, 15 Jan 2026 12:00:30 GMT, 60', 30_000],
    ['60, Thu, 15 Jan 2026 12:00:30 GMT', 60_000],
    ['soon, Thu, 15 Jan 2026 12:00:30 GMT', 30_000],
    ['Thursday, 15-Jan-26 12:00:30 GMT, 60', 30_000],
    [['Thu, 15 Jan 2026 12:00:30 GMT', '60'], 30_000],
  ])('takes the first valid one of the repeated values %j', (value, ms) => {
    expect(parseRetryAfter(value, NOW)).toBe(ms);
  });

  it('returns undefined for no header and for an empty list of field lines', () => {
    expect(parseRetryAfter(undefined, NOW)).toBeUndefined();
    expect(parseRetryAfter([], NOW)).toBeUndefined();
    expect(parseRetryAfter('soon, later', NOW)).toBeUndefined();
  });

  it.each([
    ['IMF-fixdate', 'Thu, 15 Jan 2026 12:00:30 GMT', 30_000],
    ['RFC 850', 'Thursday, 15-Jan-26 12:00:30 GMT', 30_000],
    ['asctime', 'Thu Jan 15 12:00:30 2026', 30_000],
    ['asctime with a one-digit day', 'Sun Feb  1 12:00:00 2026', 17 * DAY],
    ['asctime with a two-digit day under 10', 'Sun Feb 01 12:00:00 2026', 17 * DAY],
    ['IMF-fixdate next year', 'Fri, 15 Jan 2027 12:00:00 GMT', 365 * DAY],
    ['IMF-fixdate on a leap day', 'Tue, 29 Feb 2028 12:00:00 GMT', Date.UTC(2028, 1, 29, 12) - NOW],
    ['IMF-fixdate in a leap second', 'Thu, 15 Jan 2026 12:00:60 GMT', 60_000],
    ['IMF-fixdate with a weekday that disagrees (tolerated)', 'Mon, 15 Jan 2026 12:00:30 GMT', 30_000],
    ['IMF-fixdate with spaces around it', '  Thu, 15 Jan 2026 12:00:30 GMT ', 30_000],
    ['RFC 850 exactly 50 years ahead', 'Wednesday, 15-Jan-76 12:00:00 GMT', Date.UTC(2076, 0, 15, 12) - NOW],
  ])('reads an HTTP-date in %s form as UTC: %j', (_form, value, ms) => {
    expect(parseRetryAfter(value, NOW)).toBe(ms);
  });

  it.each([
    ['IMF-fixdate', 'Sun, 06 Nov 1994 08:49:37 GMT'],
    ['RFC 850 (94 is 1994, not 2094)', 'Sunday, 06-Nov-94 08:49:37 GMT'],
    ['RFC 850 more than 50 years ahead (77 is 1977)', 'Saturday, 15-Jan-77 12:00:00 GMT'],
    ['asctime', 'Sun Nov  6 08:49:37 1994'],
    ['IMF-fixdate one second ago', 'Thu, 15 Jan 2026 11:59:59 GMT'],
    ['IMF-fixdate now', 'Thu, 15 Jan 2026 12:00:00 GMT'],
    ['leap day of 2000', 'Tue, 29 Feb 2000 00:00:00 GMT'],
    ['year 0094, not 1994', 'Sat, 06 Nov 0094 08:49:37 GMT'],
  ])('reads a date in the past as 0: %s', (_what, value) => {
    expect(parseRetryAfter(value, NOW)).toBe(0);
  });

  it.each([
    ['a leap day in a common year', 'Mon, 29 Feb 2027 00:00:00 GMT'],
    ['a leap day in a century year', 'Mon, 29 Feb 2100 00:00:00 GMT'],
    ['31 April', 'Thu, 31 Apr 2026 00:00:00 GMT'],
    ['day 32', 'Thu, 32 Jan 2026 00:00:00 GMT'],
    ['day 0', 'Thu, 00 Jan 2026 00:00:00 GMT'],
    ['hour 24', 'Thu, 15 Jan 2026 24:00:00 GMT'],
    ['minute 60', 'Thu, 15 Jan 2026 12:60:00 GMT'],
    ['second 61', 'Thu, 15 Jan 2026 12:00:61 GMT'],
    ['an unknown day name', 'Thr, 15 Jan 2026 12:00:30 GMT'],
    ['a long day name in IMF-fixdate', 'Thursday, 15 Jan 2026 12:00:30 GMT'],
    ['a short day name in RFC 850', 'Thu, 15-Jan-26 12:00:30 GMT'],
    ['a lower-case day name (HTTP-date is case-sensitive)', 'thu, 15 Jan 2026 12:00:30 GMT'],
    ['no day name', '15 Jan 2026 12:00:30 GMT'],
    ['an unknown month', 'Thu, 15 Jen 2026 12:00:30 GMT'],
    ['a full month name', 'Thu, 15 January 2026 12:00:30 GMT'],
    ['a lower-case month', 'Thu, 15 jan 2026 12:00:30 GMT'],
    ['a numeric month', 'Thu, 15 01 2026 12:00:30 GMT'],
    ['UTC instead of GMT', 'Thu, 15 Jan 2026 12:00:30 UTC'],
    ['a numeric zone', 'Thu, 15 Jan 2026 12:00:30 +0000'],
    ['no zone', 'Thu, 15 Jan 2026 12:00:30'],
    ['a one-digit day in IMF-fixdate', 'Thu, 5 Jan 2026 12:00:30 GMT'],
    ['a two-digit year in IMF-fixdate', 'Thu, 15 Jan 26 12:00:30 GMT'],
    ['a four-digit year in RFC 850', 'Thursday, 15-Jan-2026 12:00:30 GMT'],
    ['a missing space after the comma', 'Thu,15 Jan 2026 12:00:30 GMT'],
    ['asctime with GMT', 'Thu Jan 15 12:00:30 2026 GMT'],
    ['asctime with one space before a one-digit day', 'Sun Feb 1 12:00:00 2026'],
    ['a one-digit hour', 'Thu, 15 Jan 2026 2:00:30 GMT'],
  ])('ignores an invalid date: %s', (_what, value) => {
    expect(parseRetryAfter(value, NOW)).toBeUndefined();
  });
});

describe('parseHttpDate', () => {
  it('gives the same instant for the three forms of the RFC example', () => {
    const instant = Date.UTC(1994, 10, 6, 8, 49, 37);
    expect(parseHttpDate('Sun, 06 Nov 1994 08:49:37 GMT', NOW)).toBe(instant);
    expect(parseHttpDate('Sunday, 06-Nov-94 08:49:37 GMT', NOW)).toBe(instant);
    expect(parseHttpDate('Sun Nov  6 08:49:37 1994', NOW)).toBe(instant);
  });

  it('places an RFC 850 year within 49 years back and 50 ahead of now', () => {
    const late = Date.UTC(2099, 0, 1);
    expect(parseHttpDate('Friday, 01-Jan-01 00:00:00 GMT', late)).toBe(Date.UTC(2101, 0, 1));
    expect(parseHttpDate('Thursday, 01-Jan-50 00:00:00 GMT', late)).toBe(Date.UTC(2050, 0, 1));
    expect(parseHttpDate('Thursday, 01-Jan-49 00:00:00 GMT', late)).toBe(Date.UTC(2149, 0, 1));
  });

  it('rolls a leap second at the end of the year into the next year', () => {
    expect(parseHttpDate('Thu, 31 Dec 2026 23:59:60 GMT', NOW)).toBe(Date.UTC(2027, 0, 1));
  });
});

describe('retryAfterFromHeaders', () => {
  const from = (headers: Record<string, string | string[]>) =>
    retryAfterFromHeaders(headerLookup(headers), NOW);

  it.each<[string, Record<string, string | string[]>, number | undefined]>([
    ['nothing without headers', {}, undefined],
    ['Retry-After seconds', { 'retry-after': '3' }, 3000],
    ['Retry-After as a date', { 'retry-after': 'Thu, 15 Jan 2026 12:00:30 GMT' }, 30_000],
    ['retry-after-ms before Retry-After', { 'retry-after-ms': '1500', 'retry-after': '2' }, 1500],
    ['retry-after-ms as a decimal, rounded up', { 'retry-after-ms': '1500.2' }, 1501],
    ['Retry-After when retry-after-ms is invalid', { 'retry-after-ms': '-1', 'retry-after': '2' }, 2000],
    ['Retry-After when retry-after-ms is a date', { 'retry-after-ms': 'soon', 'retry-after': '2' }, 2000],
    ['x-ms-retry-after-ms', { 'x-ms-retry-after-ms': '250', 'retry-after': '1' }, 250],
    [
      'retry-after-ms before x-ms-retry-after-ms',
      { 'retry-after-ms': '100', 'x-ms-retry-after-ms': '250' },
      100,
    ],
    ['RateLimit t when r=0', { ratelimit: '"default";r=0;t=30' }, 30_000],
    ['RateLimit with spaces after ";" (express-rate-limit)', { ratelimit: '"default"; r=0; t=30' }, 30_000],
    ['nothing from RateLimit while quota remains', { ratelimit: '"default";r=5;t=30' }, undefined],
    ['nothing from RateLimit r=0 without t', { ratelimit: '"default";r=0' }, undefined],
    ['RateLimit t=0 as 0', { ratelimit: '"default";r=0;t=0' }, 0],
    [
      'the longest t of the exhausted policies',
      { ratelimit: '"burst";r=0;t=10, "daily";r=0;t=3600' },
      3_600_000,
    ],
    ['only exhausted policies', { ratelimit: '"burst";r=0;t=10, "daily";r=100;t=3600' }, 10_000],
    ['RateLimit over several field lines', { ratelimit: ['"burst";r=1;t=5', '"daily";r=0;t=7'] }, 7000],
    [
      'RateLimit with other parameters',
      { ratelimit: '"a";r=0;t=30;pk=:cHJvamVjdDEyMw==:;x-vendor;w=?1' },
      30_000,
    ],
    ['Retry-After before RateLimit', { 'retry-after': '20', ratelimit: '"dynamic";r=0;t=40' }, 20_000],
    ['RateLimit when Retry-After is invalid', { 'retry-after': 'soon', ratelimit: '"d";r=0;t=40' }, 40_000],
    ['nothing from a cached RateLimit (age > 0)', { ratelimit: '"default";r=0;t=30', age: '5' }, undefined],
    ['RateLimit from a fresh response (age 0)', { ratelimit: '"default";r=0;t=30', age: '0' }, 30_000],
    ['nothing from a RateLimit with a token item', { ratelimit: 'default;r=0;t=30' }, undefined],
    ['nothing from a RateLimit without r', { ratelimit: '"default";t=30' }, undefined],
    ['nothing from a RateLimit with r=-1', { ratelimit: '"default";r=-1;t=30' }, undefined],
    ['nothing from a RateLimit with a decimal t', { ratelimit: '"default";r=0;t=1.5' }, undefined],
    ['nothing from a RateLimit with a string t', { ratelimit: '"default";r=0;t="30"' }, undefined],
    ['nothing from a RateLimit with a trailing comma', { ratelimit: '"default";r=0;t=30,' }, undefined],
    ['nothing from a RateLimit with one bad member', { ratelimit: '"a";r=0;t=30, b!' }, undefined],
    ['nothing from a RateLimit with an unclosed string', { ratelimit: '"a;r=0;t=30' }, undefined],
    ['nothing from a RateLimit with upper-case keys', { ratelimit: '"a";R=0;T=30' }, undefined],
    ['nothing from the draft-07 Dictionary', { ratelimit: 'limit=100, remaining=0, reset=5' }, undefined],
    ['nothing from draft-06 fields', { 'ratelimit-remaining': '0', 'ratelimit-reset': '5' }, undefined],
    [
      'nothing from x-ratelimit-reset',
      { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1768478430' },
      undefined,
    ],
  ])('reads %s', (_what, headers, ms) => {
    expect(from(headers)).toBe(ms);
  });
});

describe('headerLookup', () => {
  const shapes: [string, ResponseHeaders][] = [
    ['an undici headers object', { 'retry-after': ['5', '7'], 'content-type': 'text/plain' }],
    ['an object with mixed-case names', { 'Retry-After': ['5', '7'], 'Content-Type': 'text/plain' }],
    [
      'a raw headers array of Buffers',
      ['Retry-After', '5', 'Content-Type', 'text/plain', 'retry-after', '7'].map((s) => Buffer.from(s)),
    ],
    [
      'a raw headers array of strings',
      ['Retry-After', '5', 'Content-Type', 'text/plain', 'retry-after', '7'],
    ],
    [
      'a WHATWG Headers',
      new Headers([
        ['Retry-After', '5'],
        ['Content-Type', 'text/plain'],
        ['Retry-After', '7'],
      ]),
    ],
  ];

  it.each(shapes)('reads names case-insensitively from %s', (_shape, headers) => {
    const lookup = headerLookup(headers);
    expect(lookup('content-type')).toBe('text/plain');
    expect(lookup('Content-Type')).toBe('text/plain');
    expect(lookup('x-missing')).toBeUndefined();
    expect(parseRetryAfter(lookup('retry-after'), NOW)).toBe(5000);
  });

  it('returns every value of a repeated raw header, in order', () => {
    expect(headerLookup(['a', '1', 'b', '2', 'A', '3'])('a')).toEqual(['1', '3']);
  });

  it('decodes raw Buffers as latin1', () => {
    expect(headerLookup([Buffer.from('x-name'), Buffer.from('caf\xe9', 'latin1')])('x-name')).toBe('café');
  });

  it('ignores a dangling name at the end of an odd raw array', () => {
    expect(headerLookup(['a', '1', 'b'])('b')).toBeUndefined();
  });

  it('does not read inherited properties of an object as headers', () => {
    expect(headerLookup({})('constructor')).toBeUndefined();
    expect(headerLookup({})('tostring')).toBeUndefined();
  });

  it.each([null, undefined])('finds nothing in %s', (headers) => {
    expect(headerLookup(headers)('retry-after')).toBeUndefined();
  });
});

describe('with real undici responses', () => {
  // Two Retry-After field lines, the first a date: the comma inside it and the ", " of
  // Headers.get meet here.
  // The server's clock says NOW (its Date), so the date asks for 30 s.
  const date = 'Thu, 15 Jan 2026 12:00:30 GMT';
  const server = createServer((_req, res) => {
    res.setHeader('Date', new Date(NOW).toUTCString());
    res.setHeader('Retry-After', [date, '60']);
    res.setHeader('RateLimit', '"default";r=0;t=90');
    res.writeHead(429).end('slow down');
  });
  let url: string;
  const agent = new Agent();

  beforeAll(async () => {
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });

  afterAll(async () => {
    await agent.close();
    server.close();
    await once(server, 'close');
  });

  it('reads the onResponseStart headers object and the controller raw headers alike', async () => {
    const seen: { headers?: ResponseHeaders; raw?: ResponseHeaders } = {};
    const capture: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) =>
      dispatch(opts, {
        onRequestStart: (controller, context) => handler.onRequestStart?.(controller, context),
        onResponseStart(controller, statusCode, headers, statusMessage) {
          seen.headers = headers as ResponseHeaders;
          seen.raw = (controller as unknown as { rawHeaders: Buffer[] }).rawHeaders;
          handler.onResponseStart?.(controller, statusCode, headers, statusMessage);
        },
        onResponseData: (controller, chunk) => handler.onResponseData?.(controller, chunk),
        onResponseEnd: (controller, trailers) => handler.onResponseEnd?.(controller, trailers),
        onResponseError: (controller, error) => handler.onResponseError?.(controller, error),
      });
    const response = await request(url, { dispatcher: agent.compose(capture) });
    await response.body.dump();

    expect(response.statusCode).toBe(429);
    expect(seen.headers).toMatchObject({ 'retry-after': [date, '60'] });
    expect(retryAfterFromHeaders(headerLookup(seen.headers), NOW)).toBe(30_000);
    expect(Array.isArray(seen.raw)).toBe(true);
    expect(retryAfterFromHeaders(headerLookup(seen.raw), NOW)).toBe(30_000);
  });

  it('reads fetch Response headers, where Headers.get joins the two lines with a comma', async () => {
    const response = await fetch(url, { dispatcher: agent });
    await response.arrayBuffer();

    expect(response.headers.get('retry-after')).toBe(`${date}, 60`);
    expect(retryAfterFromHeaders(headerLookup(response.headers), NOW)).toBe(30_000);
  });
});
