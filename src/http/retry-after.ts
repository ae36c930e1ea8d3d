import { fieldText, fromCache } from './quota-headers/fields.js';
import { parseRateLimit } from './quota-headers/ietf.js';

/**
 * How long a server asks us to wait: `Retry-After` (RFC 9110 §10.2.3) and its companions.
 *
 * Every result is milliseconds from the moment the response arrived, finite and >= 0. Nothing
 * here caps a value (`Retry-After: 999999999` is 31 years): capping is the limiter's `maxPause`.
 */

/**
 * Reads one response header by name, case-insensitively; repeated field lines may come back as
 * an array or joined with ", " (as WHATWG `Headers.get` does). Names are asked in lower case.
 */
export type HeaderLookup = (name: string) => string | string[] | undefined;

/**
 * The response header shapes this library meets:
 * - undici's `onResponseStart(controller, status, headers, statusMessage)` object: lower-case
 *   keys, `string | string[]` values (any key case is accepted);
 * - a raw headers array, alternating name and value, each a `Buffer` (undici's legacy `onHeaders`
 *   and `controller.rawHeaders`) or a string (Node's `IncomingMessage.rawHeaders`);
 * - a WHATWG `Headers` (fetch's `Response.headers`), or anything with a case-insensitive `get`.
 */
export type ResponseHeaders =
  | Readonly<Record<string, string | readonly string[] | undefined>>
  | readonly (Uint8Array | string)[]
  | { get(name: string): string | null }
  | null
  | undefined;

/** Builds a {@link HeaderLookup} over any {@link ResponseHeaders} shape, reading it only when asked. */
export function headerLookup(headers: ResponseHeaders): HeaderLookup {
  if (headers == null) return () => undefined;
  if (Array.isArray(headers)) return rawHeadersLookup(headers);
  if (typeof (headers as { get?: unknown }).get === 'function') {
    const fetchHeaders = headers as { get(name: string): string | null };
    return (name) => fetchHeaders.get(name) ?? undefined;
  }
  return objectHeadersLookup(headers as Readonly<Record<string, string | readonly string[] | undefined>>);
}

/** Over undici's `onResponseStart` headers object. */
function objectHeadersLookup(
  headers: Readonly<Record<string, string | readonly string[] | undefined>>,
): HeaderLookup {
  // undici's keys are lower case; a caller-built object may spell them otherwise. Checked once,
  // on the first miss; a map is built only for an object with mixed-case names.
  let mixedCase: Map<string, string | string[]> | false | undefined;
  return (name) => {
    const key = name.toLowerCase();
    if (Object.hasOwn(headers, key)) return headers[key] as string | string[] | undefined;
    if (mixedCase === undefined) {
      const keys = Object.keys(headers);
      mixedCase =
        keys.some((k) => k !== k.toLowerCase()) &&
        new Map(keys.map((k) => [k.toLowerCase(), headers[k] as string | string[]]));
    }
    return mixedCase === false ? undefined : (mixedCase.get(key) ?? undefined);
  };
}

/** Over a raw `[name, value, name, value, ...]` array; indexed on the first lookup. */
function rawHeadersLookup(raw: readonly (Uint8Array | string)[]): HeaderLookup {
  let index: Map<string, string[]> | undefined;
  return (name) => {
    if (index === undefined) {
      index = new Map();
      for (let i = 0; i + 1 < raw.length; i += 2) {
        const key = text(raw[i]).toLowerCase();
        const values = index.get(key);
        if (values) values.push(text(raw[i + 1]));
        else index.set(key, [text(raw[i + 1])]);
      }
    }
    const values = index.get(name.toLowerCase());
    return values?.length === 1 ? values[0] : values;
  };
}

const latin1 = new TextDecoder('latin1');

function text(chunk: Uint8Array | string | undefined): string {
  if (chunk === undefined) return '';
  return typeof chunk === 'string' ? chunk : latin1.decode(chunk);
}

/**
 * The wait a response asks for, in milliseconds, or `undefined` when it asks for none we can read.
 * Read in this order, the first valid one wins:
 *
 * 1. `retry-after-ms`, then `x-ms-retry-after-ms`: milliseconds as a non-negative decimal (OpenAI,
 *    Azure). Finer than `retry-after`, which the same servers send rounded up.
 * 2. `retry-after`: see {@link parseRetryAfter}.
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
 * @param nowMs wall-clock time (`Date.now()`) when the response arrived, for HTTP-dates.
 */
export function retryAfterFromHeaders(headers: HeaderLookup, nowMs: number): number | undefined {
  return (
    parseRetryAfterMs(headers('retry-after-ms')) ??
    parseRetryAfterMs(headers('x-ms-retry-after-ms')) ??
    parseRetryAfter(headers('retry-after'), nowMs) ??
    rateLimitWait(headers)
  );
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

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const LONG_DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const DAY = DAYS.join('|');
const MONTH = MONTHS.join('|');
const TIME = '(?<hh>\\d{2}):(?<mm>\\d{2}):(?<ss>\\d{2})';

/** The three HTTP-date forms (RFC 9110 §5.6.7). HTTP-date is case-sensitive. */
const DATE_FORMS = [
  // IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`
  new RegExp(`^(?:${DAY}), (?<day>\\d{2}) (?<month>${MONTH}) (?<year>\\d{4}) ${TIME} GMT$`),
  // obsolete RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`
  new RegExp(`^(?:${LONG_DAYS.join('|')}), (?<day>\\d{2})-(?<month>${MONTH})-(?<yy>\\d{2}) ${TIME} GMT$`),
  // obsolete asctime: `Sun Nov  6 08:49:37 1994` (the day is two digits or a space and one)
  new RegExp(`^(?:${DAY}) (?<month>${MONTH}) (?<day>\\d{2}| \\d) ${TIME} (?<year>\\d{4})$`),
];
/** A list member that is only a day name: the first half of a date the comma split apart. */
const DAY_NAME_ONLY = new RegExp(`^[ \\t]*(?:${DAY}|${LONG_DAYS.join('|')})$`);

/**
 * The instant an HTTP-date names, in ms since the epoch (UTC), or `undefined` if `value` is not
 * one in any of the three forms or names no real instant (31 Apr, 29 Feb 2023, 25:00:00). The
 * day name is only checked to be one; a weekday that disagrees with the date is tolerated, as
 * most HTTP stacks do. A leap second (`:60`) reads as the next second.
 *
 * @param nowMs wall-clock time, to place an RFC 850 two-digit year.
 */
export function parseHttpDate(value: string, nowMs: number): number | undefined {
  const groups = DATE_FORMS.map((form) => form.exec(value)?.groups).find((g) => g !== undefined);
  if (groups === undefined) return undefined;
  const { day = '', month = '', year: fullYear, yy, hh = '', mm = '', ss = '' } = groups;
  let year = Number(fullYear);
  if (yy !== undefined) {
    // A two-digit year "more than 50 years in the future" is the most recent past year with
    // those digits, so the year lands within 49 years back and 50 ahead.
    const nowYear = new Date(nowMs).getUTCFullYear();
    year = nowYear - (nowYear % 100) + Number(yy);
    if (year > nowYear + 50) year -= 100;
    else if (year <= nowYear - 50) year += 100;
  }
  const monthIndex = MONTHS.indexOf(month);
  const date = Number(day);
  const leapYear = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const lastDay = monthIndex === 1 ? (leapYear ? 29 : 28) : DAYS_IN_MONTH[monthIndex];
  if (lastDay === undefined || date < 1 || date > lastDay) return undefined;
  if (Number(hh) > 23 || Number(mm) > 59 || Number(ss) > 60) return undefined;
  // Not Date.UTC, which reads years 0-99 as 1900-1999.
  const instant = new Date(0);
  instant.setUTCFullYear(year, monthIndex, date);
  instant.setUTCHours(Number(hh), Number(mm), Number(ss));
  return instant.getTime();
}

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

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
 *   year, asctime), read as UTC; a date in the past → 0. Validated by strict patterns first, never
 *   `Date.parse`, which reads `-5` as 2001 and asctime in local time.
 * - Ignored: a sign (`-1`, `+5`), exponent (`1e3`), hex (`0x10`), `Infinity`, an empty value.
 *   Spaces and tabs around a value are not part of it.
 * - Repeated values (an array of field lines, or one line joined with commas as `Headers.get`
 *   does): the first valid one. A comma after a day name is taken as part of an HTTP-date.
 *
 * @param nowMs wall-clock time (`Date.now()`) when the response arrived, for HTTP-dates.
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
    if (next !== undefined && DAY_NAME_ONLY.test(candidate)) {
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
function rateLimitWait(headers: HeaderLookup): number | undefined {
  const field = fieldText(headers, 'ratelimit');
  if (field === undefined || fromCache(headers)) return undefined;
  let wait: number | undefined;
  for (const { r, t } of parseRateLimit(field) ?? []) {
    if (r === 0 && t !== undefined) wait = Math.max(wait ?? 0, t * 1000);
  }
  return wait;
}
