import { describe, expect, it } from 'vitest';
import { headerLookup } from '../src/headers.js';
import { retryAfterFromHeaders } from '../src/http/retry-after.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';
import { answerAt, pauseFrom } from './helpers/server-clock.js';

// An HTTP-date Retry-After names an instant on the server's clock (RFC 9110 §10.2.3, §6.6.1):
// the wait is that date minus the answer's own Date, whatever the local clock says. The servers
// below are real node:http servers whose clock is an hour off ours; the limiters run on a manual
// clock, so the pause they take is read from their state, never timed.

const HOUR = 3_600_000;

/** A 429 whose Date is `skewMs` off the real clock, asking for a wait of 30 s as an HTTP-date. */
const skewedRetryAfter = (skewMs: number) =>
  answerAt(
    429,
    (now) => ({ date: new Date(now).toUTCString(), 'retry-after': new Date(now + 30_000).toUTCString() }),
    skewMs,
  );

describe('an HTTP-date Retry-After is counted from the answer’s Date', () => {
  it.each([
    ['an hour ahead of ours (it waited maxPause)', HOUR],
    ['an hour behind ours (it retried at once)', -HOUR],
  ])('pauses 30 s through the interceptor when the server clock is %s', async (_, skew) => {
    expect(await pauseFrom(skewedRetryAfter(skew))).toEqual({ status: 429, pausedUntil: 30_000 });
  });

  it("pauses 30 s through the fetch wrapper over Node's fetch when the server clock is ahead", async () => {
    expect(await pauseFrom(skewedRetryAfter(HOUR), 'fetch wrapper')).toEqual({
      status: 429,
      pausedUntil: 30_000,
    });
  });

  it("reads an SDK error's headers the same way (wrap's classifyThrown)", () => {
    const serverNow = Date.UTC(2026, 0, 15, 12, 0, 0) + HOUR;
    const error = Object.assign(new Error('slow down'), {
      status: 429,
      headers: {
        date: new Date(serverNow).toUTCString(),
        'retry-after': new Date(serverNow + 30_000).toUTCString(),
      },
    });
    expect(classifyThrown(error)).toEqual({ kind: 'throttled', retryAfterMs: 30_000 });
  });

  const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);
  const from = (headers: Record<string, string>) => retryAfterFromHeaders(headerLookup(headers), NOW);

  it.each<[string, Record<string, string>, number]>([
    [
      'the date minus Date, Date an hour ahead',
      { date: 'Thu, 15 Jan 2026 13:00:00 GMT', 'retry-after': 'Thu, 15 Jan 2026 13:00:30 GMT' },
      30_000,
    ],
    [
      'the date minus Date, Date an hour behind',
      { date: 'Thu, 15 Jan 2026 11:00:00 GMT', 'retry-after': 'Thu, 15 Jan 2026 11:00:30 GMT' },
      30_000,
    ],
    [
      '0 for a date before Date',
      { date: 'Thu, 15 Jan 2026 11:00:00 GMT', 'retry-after': 'Thu, 15 Jan 2026 10:59:30 GMT' },
      0,
    ],
    [
      'the local clock without a valid Date',
      { date: 'yesterday', 'retry-after': 'Thu, 15 Jan 2026 12:00:30 GMT' },
      30_000,
    ],
    [
      'delay-seconds as they are, whatever Date says',
      { date: 'Thu, 15 Jan 2026 13:00:00 GMT', 'retry-after': '30' },
      30_000,
    ],
    [
      'an RFC 850 date against an obsolete-form Date',
      { date: 'Thursday, 15-Jan-26 13:00:00 GMT', 'retry-after': 'Thursday, 15-Jan-26 13:00:30 GMT' },
      30_000,
    ],
  ])('reads %s', (_, headers, ms) => {
    expect(from(headers)).toBe(ms);
  });
});
