import type { HeaderLookup } from '../../headers.js';
import { nonNegativeInteger, responseDate, serverNow, singleText } from '../../headers.js';
import type { ReadQuota } from '../../limiter/types.js';

/**
 * The windows GitHub documents for its primary rate limits, by `x-ratelimit-resource`: an hour
 * (5,000 requests per user token), and a minute for search. A resource not listed is read
 * without a window (its reset is then capped by `maxPause`).
 */
const WINDOWS: Readonly<Record<string, number>> = {
  core: 3_600_000,
  graphql: 3_600_000,
  search: 60_000,
  code_search: 60_000,
};

/**
 * GitHub's secondary limits: at most 900 points a minute per REST endpoint (a GET is one point),
 * 2,000 for GraphQL. A fixed window with budget left is spent at up to this rate.
 */
const BURST_PER_MINUTE = 900;
const GRAPHQL_BURST_PER_MINUTE = 2_000;

/**
 * GitHub's REST API (profile `'github'`): `x-ratelimit-limit` (the quota), `x-ratelimit-remaining`
 * (or `limit - x-ratelimit-used`), `x-ratelimit-reset` (the window's end in UTC epoch seconds,
 * counted from the response's `Date`, so a skewed local clock does not move it: from the middle of
 * its second, or, with nothing left, from its start, so the pause never ends before the reset) and
 * `x-ratelimit-resource` (the policy: `core`, `search`, ...). Values that are not non-negative
 * integers are ignored. The documented secondary limit rides along as the burst of a fixed window.
 */
export function readGithub(headers: HeaderLookup, nowMs: number): ReadQuota[] | undefined {
  const limit = nonNegativeInteger(singleText(headers, 'x-ratelimit-limit'));
  const used = nonNegativeInteger(singleText(headers, 'x-ratelimit-used'));
  let remaining = nonNegativeInteger(singleText(headers, 'x-ratelimit-remaining'));
  if (remaining === undefined && limit !== undefined && used !== undefined && used <= limit) {
    remaining = limit - used;
  }
  const reset = nonNegativeInteger(singleText(headers, 'x-ratelimit-reset'));
  if (remaining === undefined && limit === undefined) return undefined;
  const resource = singleText(headers, 'x-ratelimit-resource')?.trim() || 'core';
  // With nothing left the reset is a pause, counted from the start of the `Date` second (as
  // githubClassify counts it): from its middle, the pause ended up to a second before the reset
  // and the next call met the exhausted window. With some left, the middle: an unbiased ceiling.
  const from = remaining === 0 ? (responseDate(headers, nowMs) ?? nowMs) : serverNow(headers, nowMs);
  const resetMs = reset === undefined ? undefined : Math.max(0, reset * 1000 - from);
  const burstPerMinute = resource === 'graphql' ? GRAPHQL_BURST_PER_MINUTE : BURST_PER_MINUTE;
  return [
    {
      policy: `github:${resource}`,
      remaining,
      resetMs,
      limit,
      windowMs: Object.hasOwn(WINDOWS, resource) ? WINDOWS[resource] : undefined,
      burstPerMinute,
    },
  ];
}
