import {
  fieldText,
  fromCache,
  type HeaderLookup,
  isDayName,
  parseHttpDate,
  responseDate,
} from '../headers.js';
import { parseRateLimit } from './quota-headers/ietf.js';

/**
 * How long a server asks us to wait: `Retry-After` (RFC 9110 §10.2.3) and its companions.
 *
 * Every result is milliseconds from the moment the response arrived, finite and >= 0 (an HTTP-date
 * is counted from the response's `Date`, the server's clock, not from the local one). Nothing
 * here caps a value (`Retry-After: 999999999` is 31 years): capping is the limiter's `maxPause`.
 */

/**
 * The wait a response asks for, in milliseconds, or `undefined` when it asks for none we can read.
 * Read in this order, the first valid one wins:
 *
 * 1. `retry-after-ms`, then `x-ms-retry-after-ms`: milliseconds as a non-negative decimal (OpenAI,
 *    Azure). Finer than `retry-after`, which the same servers send rounded up.
 * 2. `retry-after`: see {@link parseRetryAfter}. An HTTP-date names an instant on the server's
 *    clock (RFC 9110 §10.2.3): the wait is that date minus the response's own `Date`
 *    ({@link responseDate}), so a local clock that is off by an hour neither waits an hour too long
 *    (up to `maxPause`) nor retries at once. Without a valid `Date`, the date minus `nowMs`.
 * 3. The IETF RateLimit draft's `ratelimit` field (-08 and later, the List form Cloudflare and
 *    express-rate-limit send: `"default";r=0;t=30`): when a policy has no quota left (`r=0`), its
 *    `t` seconds; with several exhausted policies, the longest. The draft lets a client use it
 *    (`t` is delay-seconds, so no clock skew) and says Retry-After takes precedence, hence last.
 *    The field is parsed strictly (RFC 9651, with `structured-headers`): a malformed field is
 *    ignored whole, as the draft requires, and so is a field on a cached response (`age` > 0),
 *    whose window has moved on. The rest of what the RateLimit fields say (what is left, the
 *    quota) feeds the limiter's ceiling: see `quota-headers/`.
 *
 * Not read here, on purpose (a vendor profile, `headers: 'github'`, reads some of them as that
 * vendor documents them):
 * - `x-ratelimit-reset` (and `x-rate-limit-reset`, `ratelimit-reset`): its value means seconds
 *   to wait (Envoy), epoch seconds (GitHub, X, GitLab's `ratelimit-reset`), fractional epoch
 *   seconds (Discord), milliseconds, an HTTP-date or an RFC 3339 instant, depending on the server,
 *   with nothing in the response to tell which. A misread means waiting 55 years or not at all.
 * - the draft-07 Dictionary `ratelimit: limit=100, remaining=0, reset=5` and the draft-06
 *   `ratelimit-remaining`/`ratelimit-reset` pair: GitLab sends the same names with epoch values,
 *   and servers that send them (express-rate-limit) also send Retry-After on a 429.
 * Such servers' waits can be fed to `permit.throttled(ms)` by a caller who knows the API.
 *
 * On a response that is not throttled, a `ratelimit` with `r=0` still yields its `t`: the next
 * request would be throttled. The caller decides whether to act on it.
 *
 * @param nowMs wall-clock time (`Date.now()`) when the response arrived, for an HTTP-date on a
 * response without a valid `Date`.
 */
export function retryAfterFromHeaders(headers: HeaderLookup, nowMs: number): number | undefined {
  return serverWait(headers, nowMs) ?? rateLimitWait(headers);
}

/**
 * The wait a response asks for in so many words (`retry-after-ms`, `x-ms-retry-after-ms`,
 * `Retry-After`), without the exhausted `ratelimit` policy {@link retryAfterFromHeaders} reads last.
 * @internal
 */
export function serverWait(headers: HeaderLookup, nowMs: number): number | undefined {
  return (
    parseRetryAfterMs(headers('retry-after-ms')) ??
    parseRetryAfterMs(headers('x-ms-retry-after-ms')) ??
    retryAfterField(headers, nowMs)
  );
}

/** `Retry-After`, an HTTP-date counted from the response's `Date` (read only when the field is there). */
function retryAfterField(headers: HeaderLookup, nowMs: number): number | undefined {
  const value = headers('retry-after');
  return value === undefined ? undefined : parseRetryAfter(value, responseDate(headers, nowMs) ?? nowMs);
}

/** OWS (RFC 9110 §5.6.3): spaces and tabs only, unlike `String.prototype.trim`. */
function trimOws(value: string): string {
  return value.replace(/^[ \t]+|[ \t]+$/g, '');
}

/** `(1.5)`: a non-negative decimal without sign, exponent or hex. */
const DECIMAL = /^(\d+)(?:\.(\d+))?$/;

/**
 * A non-negative decimal times 1000 (`scale` 1000) or times 1 (`scale` 1), rounded up to whole
 * milliseconds: a server's "wait 0.0001 s" must not become a retry before it. Exact decimal
 * arithmetic, so "1.1" gives 1100, not 1101. Clamped to `Number.MAX_SAFE_INTEGER`.
 */
function decimalToMs(value: string, scale: 1 | 1000): number | undefined {
  const match = DECIMAL.exec(value);
  if (!match) return undefined;
  const [, whole = '', fraction = ''] = match;
  const digits = scale === 1000 ? 3 : 0;
  const ms = Number(whole) * scale + Number(fraction.slice(0, digits).padEnd(digits, '0'));
  const roundUp = /[1-9]/.test(fraction.slice(digits)) ? 1 : 0;
  return Math.min(ms + roundUp, Number.MAX_SAFE_INTEGER);
}

/** Splits a field into list members; a string is split on commas, an array is taken as it is. */
function members(value: string | readonly string[]): string[] {
  return (typeof value === 'string' ? [value] : value).flatMap((line) => line.split(','));
}

function parseRetryAfterMs(value: string | readonly string[] | undefined): number | undefined {
  if (value === undefined) return undefined;
  for (const member of members(value)) {
    const ms = decimalToMs(trimOws(member), 1);
    if (ms !== undefined) return ms;
  }
  return undefined;
}

/** One `Retry-After` value: delay-seconds or an HTTP-date, already trimmed. */
function parseOne(value: string, nowMs: number): number | undefined {
  const seconds = decimalToMs(value, 1000);
  if (seconds !== undefined) return seconds;
  const instant = parseHttpDate(value, nowMs);
  return instant === undefined ? undefined : Math.max(0, instant - nowMs);
}

/**
 * Milliseconds to wait from a `Retry-After` value, or `undefined` when there is no valid one.
 *
 * - delay-seconds: `120` → 120000. Fractions are accepted although the RFC has none (Shopify
 *   sends `2.0`, Microsoft Graph `2.542`): `1.5` → 1500, rounded up to whole milliseconds.
 * - HTTP-date in the three forms a recipient must accept (IMF-fixdate, RFC 850 with a two-digit
 *   year, asctime), read as UTC, minus `nowMs`; a date before `nowMs` → 0. Validated by strict patterns first, never
 *   `Date.parse`, which reads `-5` as 2001 and asctime in local time.
 * - Ignored: a sign (`-1`, `+5`), exponent (`1e3`), hex (`0x10`), `Infinity`, an empty value.
 *   Spaces and tabs around a value are not part of it.
 * - Repeated values (an array of field lines, or one line joined with commas as `Headers.get`
 *   does): the first valid one. A comma after a day name is taken as part of an HTTP-date.
 *
 * @param nowMs the instant an HTTP-date is counted from: the server's clock when it answered, that
 * is the response's `Date` when it has a valid one (RFC 9110 §10.2.3; `retryAfterFromHeaders` reads
 * it so), else the local wall clock (`Date.now()`) when the response arrived.
 */
export function parseRetryAfter(
  value: string | readonly string[] | undefined,
  nowMs: number,
): number | undefined {
  if (value === undefined) return undefined;
  const parts = members(value);
  for (let i = 0; i < parts.length; i++) {
    let candidate = parts[i] ?? '';
    const next = parts[i + 1];
    if (next !== undefined && isDayName(candidate)) {
      candidate = `${candidate},${next}`;
      i++;
    }
    const ms = parseOne(trimOws(candidate), nowMs);
    if (ms !== undefined) return ms;
  }
  return undefined;
}

/**
 * The wait from an IETF `ratelimit` field: the longest `t` among policies with `r=0`, in ms.
 * `undefined` if no policy is exhausted, an exhausted one has no `t`, the field is malformed, or
 * the response came from a cache.
 */
export function rateLimitWait(headers: HeaderLookup): number | undefined {
  const field = fieldText(headers, 'ratelimit');
  if (field === undefined || fromCache(headers)) return undefined;
  let wait: number | undefined;
  for (const { r, t } of parseRateLimit(field) ?? []) {
    if (r === 0 && t !== undefined) wait = Math.max(wait ?? 0, t * 1000);
  }
  return wait;
}
