/**
 * Response header fields as the library reads them: the shapes undici and fetch hand over, one
 * lookup over all of them, the text of a field, and HTTP-dates. A leaf: it imports nothing.
 */

/** Response headers as the library's callbacks see them: lower-case names, repeated fields as arrays. */
export type HeaderRecord = Readonly<Record<string, string | string[] | undefined>>;

/**
 * Any header shape undici or fetch accepts, as a {@link HeaderRecord}: names in lower case,
 * repeated names as arrays. Takes a plain object, a flat `[name, value, ...]` array (strings or
 * Buffers), an iterable of `[name, value]` pairs (`Map`, WHATWG `Headers`, an array of pairs), or
 * nothing.
 */
export function headerRecord(headers: unknown): HeaderRecord {
  const out: Record<string, string | string[]> = {};
  const add = (name: unknown, value: unknown) => {
    if (value === undefined || value === null) return;
    const key = String(name).toLowerCase();
    const values = Array.isArray(value) ? value.map(String) : [String(value)];
    // Own keys only, each defined rather than assigned: a header named `constructor` or
    // `__proto__` (a hostile server's) is a header like any other.
    const had = Object.hasOwn(out, key) ? out[key] : undefined;
    const next =
      had === undefined
        ? values.length === 1
          ? (values[0] as string)
          : values
        : [...(Array.isArray(had) ? had : [had]), ...values];
    Object.defineProperty(out, key, { value: next, enumerable: true, writable: true, configurable: true });
  };
  if (headers == null || typeof headers !== 'object') return out;
  if (Array.isArray(headers) && !isPairList(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) add(headers[i], headers[i + 1]);
  } else if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    for (const pair of headers as Iterable<unknown>) {
      if (Array.isArray(pair)) add(pair[0], pair[1]);
    }
  } else {
    for (const [name, value] of Object.entries(headers)) add(name, value);
  }
  return out;
}

/**
 * Reads one response header by name, case-insensitively; repeated field lines may come back as
 * an array or joined with ", " (as WHATWG `Headers.get` does). Names are asked in lower case.
 */
export type HeaderLookup = (name: string) => string | string[] | undefined;

/**
 * `[name, value]` pairs, as `fetch` and `new Headers()` accept them: `[['retry-after', '2'], ...]`
 * (undici's `request()` and `dispatch()` take a flat array only, and throw on pairs).
 */
type HeaderPairs = readonly (readonly [string, string | readonly string[] | undefined])[];

/**
 * The response header shapes this library meets:
 * - undici's `onResponseStart(controller, status, headers, statusMessage)` object: lower-case
 *   keys, `string | string[]` values (any key case is accepted);
 * - a raw headers array, alternating name and value, each a `Buffer` (undici's legacy `onHeaders`
 *   and `controller.rawHeaders`) or a string (Node's `IncomingMessage.rawHeaders`);
 * - a WHATWG `Headers` (fetch's `Response.headers`), or anything with a case-insensitive `get`;
 * - a `Map` or an array of `[name, value]` pairs (an SDK error's `headers`, a caller's own), any
 *   name case.
 */
export type ResponseHeaders =
  | Readonly<Record<string, string | readonly string[] | undefined>>
  | readonly (Uint8Array | string)[]
  | HeaderPairs
  | ReadonlyMap<string, string | readonly string[] | undefined>
  | { get(name: string): string | null }
  | null
  | undefined;

/**
 * Whether a header array is a list of `[name, value]` pairs rather than a flat `[name, value,
 * ...]` one: its first entry is an array (a flat one's is a string or a `Buffer`).
 */
function isPairList(headers: readonly unknown[]): boolean {
  return Array.isArray(headers[0]);
}

/**
 * Builds a {@link HeaderLookup} over any {@link ResponseHeaders} shape, reading it only when asked.
 * Names are read case-insensitively in every shape. A name given more than once (in a raw array,
 * a list of pairs, a `Map` in two cases: `Retry-After` and `retry-after`) comes back as the list of
 * its values, in order, as a record's array value does: {@link fieldText} joins them with ", ", as
 * `Headers.get` does, and {@link singleText} takes the first.
 */
export function headerLookup(headers: ResponseHeaders): HeaderLookup {
  if (headers == null) return () => undefined;
  if (Array.isArray(headers))
    return isPairList(headers)
      ? pairsLookup(headers)
      : rawHeadersLookup(headers as readonly (Uint8Array | string)[]);
  // A Map's `get` is case-sensitive: a `Retry-After` key is missed by `get('retry-after')`.
  if (headers instanceof Map) return pairsLookup(headers);
  if (typeof (headers as { get?: unknown }).get === 'function') {
    const fetchHeaders = headers as { get(name: string): unknown };
    return (name) => fieldValue(fetchHeaders.get(name));
  }
  return objectHeadersLookup(headers as Readonly<Record<string, unknown>>);
}

/**
 * Over undici's `onResponseStart` headers object, or one a caller built (an SDK error's
 * `headers`, deserialized): a number is read as its text (`'retry-after': 5`), any other value
 * that is not a string (`null`, an object) as no field.
 */
function objectHeadersLookup(headers: Readonly<Record<string, unknown>>): HeaderLookup {
  // undici's keys are lower case; a caller-built object may spell them otherwise. Checked once,
  // on the first miss; a map is built only for an object with mixed-case names.
  let mixedCase: Map<string, unknown> | false | undefined;
  return (name) => {
    const key = name.toLowerCase();
    if (Object.hasOwn(headers, key)) return fieldValue(headers[key]);
    if (mixedCase === undefined) {
      const keys = Object.keys(headers);
      mixedCase =
        keys.some((k) => k !== k.toLowerCase()) && new Map(keys.map((k) => [k.toLowerCase(), headers[k]]));
    }
    return mixedCase === false ? undefined : fieldValue(mixedCase.get(key));
  };
}

/**
 * A header value as the readers take it: a string or a list of strings as given; a number as its
 * text; in a list, the strings and numbers only; anything else `undefined` (no such field).
 */
function fieldValue(value: unknown): string | string[] | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return String(value);
  if (!Array.isArray(value)) return undefined;
  if (value.every((v) => typeof v === 'string')) return value;
  const texts = value.flatMap((v) =>
    typeof v === 'string' ? [v] : typeof v === 'number' ? [String(v)] : [],
  );
  return texts.length === 0 ? undefined : texts;
}

/** Over a raw `[name, value, name, value, ...]` array; indexed on the first lookup. */
function rawHeadersLookup(raw: readonly (Uint8Array | string)[]): HeaderLookup {
  return indexedLookup((add) => {
    for (let i = 0; i + 1 < raw.length; i += 2) add(text(raw[i]), text(raw[i + 1]));
  });
}

/**
 * Over `[name, value]` pairs (a `Map`, an array of pairs; an entry that is not a pair is skipped);
 * each value read as a record's is ({@link fieldValue}); indexed on the first lookup.
 */
function pairsLookup(pairs: Iterable<unknown>): HeaderLookup {
  return indexedLookup((add) => {
    for (const pair of pairs) if (Array.isArray(pair)) add(String(pair[0]), pair[1]);
  });
}

/**
 * Over the fields `fill` adds, indexed by lower-case name on the first lookup: a name added once
 * gives its value, one added again the list of all its values, in order.
 */
function indexedLookup(fill: (add: (name: string, value: unknown) => void) => void): HeaderLookup {
  let index: Map<string, unknown[]> | undefined;
  return (name) => {
    if (index === undefined) {
      const built = new Map<string, unknown[]>();
      fill((key, value) => {
        const lower = key.toLowerCase();
        const values = built.get(lower);
        if (values) values.push(value);
        else built.set(lower, [value]);
      });
      index = built;
    }
    const values = index.get(name.toLowerCase());
    if (values === undefined) return undefined;
    return fieldValue(values.length === 1 ? values[0] : values.flat());
  };
}

const latin1 = new TextDecoder('latin1');

function text(chunk: Uint8Array | string | undefined): string {
  if (chunk === undefined) return '';
  return typeof chunk === 'string' ? chunk : latin1.decode(chunk);
}

/** One header's text: repeated field lines joined with ", " (a List's lines make one List). */
export function fieldText(headers: HeaderLookup, name: string): string | undefined {
  const value = headers(name);
  return value === undefined ? undefined : typeof value === 'string' ? value : value.join(', ');
}

/** The first line of a header that is a single value (`x-ratelimit-remaining`). */
export function singleText(headers: HeaderLookup, name: string): string | undefined {
  const value = headers(name);
  return value === undefined ? undefined : typeof value === 'string' ? value : value[0];
}

/**
 * A non-negative decimal integer as written (`0`, `4999`), spaces and tabs around allowed; a sign,
 * a fraction, an exponent, hex or garbage gives `undefined`.
 */
export function nonNegativeInteger(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const trimmed = text.replace(/^[ \t]+|[ \t]+$/g, '');
  if (!/^\d{1,15}$/.test(trimmed)) return undefined;
  return Number(trimmed);
}

/** Whether the response came from a cache (`Age` > 0): its quota fields describe a moment long gone. */
export function fromCache(headers: HeaderLookup): boolean {
  const age = nonNegativeInteger(singleText(headers, 'age'));
  return age !== undefined && age > 0;
}

/**
 * The server's clock when the answer arrived, in ms since the epoch, or `undefined` without a
 * valid `Date`: the instant its `Date` names (RFC 9110 §6.6.1: when the origin made the answer, on
 * its own clock) plus its `Age` (RFC 9111 §5.1: the seconds a cache held it since). The one reading
 * of the server's clock: every absolute time an answer carries (an HTTP-date `Retry-After`, an
 * epoch or RFC 3339 reset) is counted from it, so a skewed local clock moves no wait, and a 429
 * a cache kept 50 s does not make its sender wait those 50 s again.
 *
 * `Date` is a singleton field: an answer with more than one `Date` line has none we can trust (the
 * interceptor sees the lines as an array, `fetch` joins them with a comma, which is no date
 * either), so both read it alike: no `Date`, the local clock.
 *
 * @param nowMs wall-clock time, to place an RFC 850 two-digit year.
 */
export function responseDate(headers: HeaderLookup, nowMs: number): number | undefined {
  const date = headers('date');
  if (date === undefined || (typeof date !== 'string' && date.length !== 1)) return undefined;
  const text = typeof date === 'string' ? date : (date[0] as string);
  const instant = parseHttpDate(text.replace(/^[ \t]+|[ \t]+$/g, ''), nowMs);
  if (instant === undefined) return undefined;
  return instant + (nonNegativeInteger(singleText(headers, 'age')) ?? 0) * 1000;
}

/**
 * The server's wall-clock time when it answered, for quota resets: {@link responseDate}, or
 * `nowMs` without a valid one. `Date` has whole seconds: the answer was made during that second,
 * so its middle is taken (the second's start would read every reset up to a second long, 1.7 % of
 * a one-minute window).
 */
export function serverNow(headers: HeaderLookup, nowMs: number): number {
  const instant = responseDate(headers, nowMs);
  return instant === undefined ? nowMs : instant + 500;
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
  if (!isDayOfMonth(year, monthIndex, date)) return undefined;
  if (Number(hh) > 23 || Number(mm) > 59 || Number(ss) > 60) return undefined;
  // Not Date.UTC, which reads years 0-99 as 1900-1999.
  const instant = new Date(0);
  instant.setUTCFullYear(year, monthIndex, date);
  instant.setUTCHours(Number(hh), Number(mm), Number(ss));
  return instant.getTime();
}

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Whether `date` (1-31) is a day of month `monthIndex` (0-11) of `year`, by the Gregorian calendar. */
function isDayOfMonth(year: number, monthIndex: number, date: number): boolean {
  const leapYear = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const lastDay = monthIndex === 1 ? (leapYear ? 29 : 28) : DAYS_IN_MONTH[monthIndex];
  return lastDay !== undefined && date >= 1 && date <= lastDay;
}

/** RFC 3339's `date-time`: its `T` and `Z` in either case, or a space for the `T` (section 5.6). */
const RFC_3339 =
  /^(?<year>\d{4})-(?<month>\d{2})-(?<day>\d{2})[Tt ](?<hh>\d{2}):(?<mm>\d{2}):(?<ss>\d{2})(?<frac>\.\d+)?(?:[Zz]|(?<sign>[+-])(?<oh>\d{2}):(?<om>\d{2}))$/;

/**
 * An RFC 3339 instant (`2025-02-24T22:26:00Z`, `…T23:26:00.5+01:00`) as ms since the epoch, or
 * `undefined` for anything else (never `Date.parse`, which reads `-5` as 2001 and a time with no
 * offset in the machine's zone). Surrounding whitespace is ignored; a leap second (`:60`) is read
 * as the last ms of its minute.
 */
export function parseRfc3339(text: string): number | undefined {
  const groups = RFC_3339.exec(text.trim())?.groups;
  if (groups === undefined) return undefined;
  const {
    year = '',
    month = '',
    day = '',
    hh = '',
    mm = '',
    ss = '',
    frac,
    sign,
    oh = '0',
    om = '0',
  } = groups;
  const y = Number(year);
  const monthIndex = Number(month) - 1;
  const date = Number(day);
  if (!isDayOfMonth(y, monthIndex, date)) return undefined;
  if (Number(hh) > 23 || Number(mm) > 59 || Number(ss) > 60 || Number(oh) > 23 || Number(om) > 59)
    return undefined;
  const instant = new Date(0);
  instant.setUTCFullYear(y, monthIndex, date);
  instant.setUTCHours(Number(hh), Number(mm), Math.min(59, Number(ss)));
  const ms = Number(ss) === 60 ? 999 : Math.floor(Number(`0${frac ?? ''}`) * 1000);
  const offset = sign === undefined ? 0 : (sign === '-' ? -1 : 1) * (Number(oh) * 60 + Number(om)) * 60_000;
  return instant.getTime() + ms - offset;
}

/** Whether a list member is only a day name: the first half of an HTTP-date that a comma split apart. */
export function isDayName(member: string): boolean {
  return DAY_NAME_ONLY.test(member);
}

const DAY_NAME_ONLY = new RegExp(`^[ \\t]*(?:${DAY}|${LONG_DAYS.join('|')})$`);
