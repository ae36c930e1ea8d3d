import { type HeaderRecord, headerLookup, responseDate } from '../headers.js';
import type { ClassifyResult } from './classify.js';

/** The least pause on an exhausted primary limit (ms): GitHub's reset and `Date` are whole seconds. */
const MIN_RESET_WAIT_MS = 1_000;

const first = (value: string | string[] | undefined): string | undefined =>
  Array.isArray(value) ? value[0] : value;

/**
 * A `classify` for GitHub's REST API (api.github.com, GitHub Enterprise Server), whose limits
 * answer 403 as well as 429:
 *
 * - **primary limit**: a 403 or 429 with `x-ratelimit-remaining: 0` is throttled until
 *   `x-ratelimit-reset` (epoch seconds), read against the response's own `Date` so that a skewed
 *   local clock does not matter (the local clock when the answer has no valid `Date`); at least
 *   1 s. The limiter caps the pause by `maxPause` (GitHub's window is an hour), and a retry whose
 *   wait would pass `maxWait` ends with the 403 itself.
 * - **secondary limit**: a 403 with `Retry-After` is throttled for it (a 429 is throttled by
 *   default anyway).
 * - anything else: `undefined`, the default rule (a 403 without either is a permission error: a
 *   success for the limiter, since the server answered).
 *
 * ```ts
 * adaptiveRateLimit({ limiters: { github: { origins: ['https://api.github.com'] } }, classify: githubClassify });
 * ```
 *
 * The header profile `headers: 'github'` reads the same headers for another purpose: it paces
 * from them (a ceiling, a pause at remaining 0) so that the 403 rarely comes; this function makes
 * the 403 that does come a throttle (a cut) rather than a success. Use both. The profile counts
 * the reset of its ceiling from the middle of the `Date` second (an unbiased ceiling), and of its
 * pause at remaining 0 from the second's start, as this function does (a wait that never ends
 * before the reset); this function keeps its own reading.
 */
export function githubClassify(status: number, headers: HeaderRecord): ClassifyResult {
  if (status !== 403 && status !== 429) return undefined;
  const remaining = first(headers['x-ratelimit-remaining'])?.trim();
  if (remaining === '0') {
    const wait = resetWait(first(headers['x-ratelimit-reset']), headers);
    return wait === undefined ? 'throttled' : { verdict: 'throttled', retryAfterMs: wait };
  }
  if (status === 403 && headers['retry-after'] !== undefined) return 'throttled';
  return undefined;
}

/** ms from the response's `Date` (else now) until `reset` (epoch seconds), at least 1 s; `undefined` if `reset` is not one. */
function resetWait(reset: string | undefined, headers: HeaderRecord): number | undefined {
  if (reset === undefined || !/^\d{1,12}$/.test(reset.trim())) return undefined;
  const now = Date.now();
  const sentAt = responseDate(headerLookup(headers), now);
  return Math.max(MIN_RESET_WAIT_MS, Number(reset.trim()) * 1000 - (sentAt ?? now));
}
