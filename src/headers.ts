/**
 * Response header fields as the library reads them: the shapes undici and fetch hand over, one
 * lookup over all of them, the text of a field, and HTTP-dates. A leaf: it imports nothing.
 */

/** Response headers as the library's callbacks see them: lower-case names, repeated fields as arrays. */
export type HeaderRecord = Readonly<Record<string, string | string[] | undefined>>;

/**
 * Any header shape undici or fetch accepts, as a {@link HeaderRecord}: names in lower case, each
 * value by the rule of {@link fieldValue} (the one {@link headerLookup} reads by too), a name given
 * more than once as the list of all its values, in order. Takes every {@link ResponseHeaders}
 * shape, or nothing.
 */
export function headerRecord(headers: unknown): HeaderRecord {
  const out: Record<string, string | string[]> = {};
  eachField(headers, (name, value) => {
    const field = fieldValue(value);
    if (field === undefined) return;
    const key = name.toLowerCase();
    // Own keys only, each defined rather than assigned: a header named `constructor` or
    // `__proto__` (a hostile server's) is a header like any other.
    const had = Object.hasOwn(out, key) ? out[key] : undefined;
    const next =
      had === undefined
        ? field
        : [...(Array.isArray(had) ? had : [had]), ...(Array.isArray(field) ? field : [field])];
    Object.defineProperty(out, key, { value: next, enumerable: true, writable: true, configurable: true });
  });
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
 * - a WHATWG `Headers` (fetch's `Response.headers`), or any object with a `get` (an SDK's own
 *   class, axios' `AxiosHeaders`), whose `get` may be case-sensitive;
 * - a `Map` or an array of `[name, value]` pairs (an SDK error's `headers`, a caller's own), any
 *   name case.
 */
export type ResponseHeaders =
  | Readonly<Record<string, string | readonly string[] | undefined>>
  | readonly (Uint8Array | string)[]
  | HeaderPairs
  | ReadonlyMap<string, string | readonly string[] | undefined>
  | { get(name: string): unknown }
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
 * Names are read case-insensitively in every shape, and values by the rule of {@link fieldValue},
 * so that it reads what {@link headerRecord} gives. A name given more than once (in a raw array,
 * a list of pairs, a `Map` in two cases: `Retry-After` and `retry-after`) comes back as the list of
 * its values, in order, as a record's array value does: {@link fieldText} joins them with ", ", as
 * `Headers.get` does, and {@link singleText} takes the first.
 *
 * An object with a `get` that is no WHATWG `Headers` is not trusted to be case-insensitive (an
 * SDK's own class may keep `Retry-After` as given): it is asked the lower-case name, and on a miss
 * its fields are listed once ({@link eachField}) and read in any case.
 */
export function headerLookup(headers: ResponseHeaders): HeaderLookup {
  if (headers == null) return () => undefined;
  if (Array.isArray(headers) || headers instanceof Map) return indexedLookup(headers);
  // A WHATWG `Headers` first, asked the name as given: its `get` ignores case itself, and lowering
  // each name here (and the wrapper around it) cost fetch's answers 2.2 µs for 8 lookups, not 1.4.
  if (isFetchHeaders(headers)) {
    const fetchHeaders = headers as Headers;
    return (name) => fieldValue(fetchHeaders.get(name));
  }
  if (typeof (headers as { get?: unknown }).get === 'function') {
    const withGet = headers as { get(name: string): unknown };
    const asked = (name: string) => fieldValue(withGet.get(name.toLowerCase()));
    const listed = indexedLookup(headers);
    // A listing that throws (an `entries()` of its own that fails) lists nothing: what its `get`
    // answers is still read (a 429's Retry-After: 7 was lost to the miss of another name).
    let unlisted = false;
    return (name) => {
      const found = asked(name);
      if (found !== undefined || unlisted) return found;
      try {
        return listed(name);
      } catch {
        unlisted = true;
        return undefined;
      }
    };
  }
  return objectHeadersLookup(headers as Readonly<Record<string, unknown>>);
}

/** Whether `headers` is this runtime's WHATWG `Headers`, whose `get` ignores case. */
function isFetchHeaders(headers: object): boolean {
  return typeof Headers === 'function' && headers instanceof Headers;
}

/**
 * Over undici's `onResponseStart` headers object, or one a caller built (an SDK error's
 * `headers`, deserialized): its lower-case keys read as they are; an object with a name in
 * another case read through an index of its names ({@link indexedLookup}), made on the first lookup.
 */
function objectHeadersLookup(headers: Readonly<Record<string, unknown>>): HeaderLookup {
  // undici's keys are lower case; a caller-built object may spell them otherwise. Checked once,
  // on the first lookup; a record is built only for an object with mixed-case names.
  let mixedCase: HeaderLookup | false | undefined;
  return (name) => {
    if (mixedCase === undefined) {
      mixedCase = Object.keys(headers).some((k) => k !== k.toLowerCase()) && indexedLookup(headers);
    }
    if (mixedCase !== false) return mixedCase(name);
    const key = name.toLowerCase();
    return Object.hasOwn(headers, key) ? fieldValue(headers[key]) : undefined;
  };
}

/**
 * The one rule by which both readers ({@link headerRecord}, {@link headerLookup}) take a header's
 * value, whatever the shape holds it:
 * - a string as it is; a number as its text (`'retry-after': 5` is `'5'`);
 * - a list (a field's lines: undici gives a repeated field so) as its strings and numbers, each as
 *   its text, in order: the readers join them with ", " as HTTP does ({@link fieldText}); a list of
 *   one is its one value, a list with none is no field;
 * - a `Buffer` (a raw array's) as its latin1 text;
 * - anything else (`true`, an object, `null`) as no field.
 */
function fieldValue(value: unknown): string | string[] | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return String(value);
  if (value instanceof Uint8Array) return text(value);
  if (!Array.isArray(value)) return undefined;
  const texts = value.flatMap((v) =>
    typeof v === 'string'
      ? [v]
      : typeof v === 'number'
        ? [String(v)]
        : v instanceof Uint8Array
          ? [text(v)]
          : [],
  );
  return texts.length === 0 ? undefined : texts.length === 1 ? (texts[0] as string) : texts;
}

/**
 * Calls `add` with each field of any header shape, names and values as held (a `Buffer` name as
 * its latin1 text): a flat `[name, value, ...]` array, `[name, value]` pairs (an array of them, a
 * `Map`, a `Headers`, anything iterable; an entry that is not a pair is skipped), an object's own
 * `entries()`, `forEach((value, name))` or `keys()` (each read through its `get`), or else its own
 * enumerable keys.
 */
function eachField(headers: unknown, add: (name: string, value: unknown) => void): void {
  if (headers == null || typeof headers !== 'object') return;
  const h = headers as {
    [Symbol.iterator]?: unknown;
    entries?: unknown;
    forEach?: unknown;
    keys?: unknown;
    get?: unknown;
  };
  if (Array.isArray(headers) && !isPairList(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) add(nameText(headers[i]), headers[i + 1]);
  } else if (typeof h[Symbol.iterator] === 'function') {
    addPairs(headers as Iterable<unknown>, add);
  } else if (typeof h.entries === 'function') {
    addPairs((h.entries as () => Iterable<unknown>).call(headers), add);
  } else if (typeof h.forEach === 'function') {
    (h.forEach as (each: (value: unknown, name: unknown) => void) => void).call(headers, (value, name) =>
      add(nameText(name), value),
    );
  } else if (typeof h.keys === 'function' && typeof h.get === 'function') {
    const get = h.get as (name: string) => unknown;
    for (const name of (h.keys as () => Iterable<unknown>).call(headers)) {
      const key = nameText(name);
      add(key, get.call(headers, key));
    }
  } else {
    for (const [name, value] of Object.entries(headers)) add(name, value);
  }
}

function addPairs(pairs: Iterable<unknown>, add: (name: string, value: unknown) => void): void {
  for (const pair of pairs) if (Array.isArray(pair)) add(nameText(pair[0]), pair[1]);
}

function nameText(name: unknown): string {
  return name instanceof Uint8Array ? text(name) : String(name);
}

/**
 * Over any shape {@link eachField} lists (a raw array, a list of pairs, a `Map`, a holder's own
 * listing, a record with mixed-case names): an index of each lower-case name to the values it was
 * given, in order, made on the first lookup; a value is taken by {@link fieldValue} only when its
 * name is asked (a raw array's `Buffer` values decoded then). It answers what the field's
 * {@link headerRecord} holds (each value by the rule, a name given more than once the list of what
 * they give, in order), without building that record: its `defineProperty` per field cost a raw
 * array or a `Map` about 3 µs a response more than this index.
 */
function indexedLookup(headers: unknown): HeaderLookup {
  let index: Map<string, unknown[]> | undefined;
  return (name) => {
    if (index === undefined) {
      const built = new Map<string, unknown[]>();
      eachField(headers, (field, value) => {
        const key = field.toLowerCase();
        const values = built.get(key);
        if (values === undefined) built.set(key, [value]);
        else values.push(value);
      });
      index = built;
    }
    const values = index.get(name.toLowerCase());
    if (values === undefined) return undefined;
    // A list's members are one level of values: the rule reads `[[1, 2], '3']` as the record's
    // merge of `[1, 2]` and `'3'` does.
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
