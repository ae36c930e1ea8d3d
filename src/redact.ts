/**
 * The one redaction rule for everything the library echoes back: error messages and their
 * `received` values, warnings, events, diagnostics payloads, snapshots, metrics attributes and
 * `NODE_DEBUG` lines, and a limiter's name in each of them (an error's `limiter`, an event's, a
 * snapshot's `name`). What you hand the library and look things up by is kept as given: a
 * limiter's `name` property and a registry's keys (`get(name)`, its events' `name`).
 *
 * Masked with `***`:
 * - a URL's user name and password: `redis://user:pw@host:6379/0` -> `redis://***@host:6379/0`,
 *   also when the URL is malformed (`new URL` cannot parse it) or has no scheme (`user:pw@host`);
 * - the values of a query and of a fragment: `?key=abc&page=2` -> `?key=***&page=***`;
 * - an API key by its vendor's prefix (`sk-...`, `ghp_...`): `sk-***`;
 * - the values of credential headers ({@link CREDENTIAL_HEADERS}) and of credential-named fields
 *   (`password`, `token`, ...), in objects, in flat `[name, value, ...]` header lists and in text
 *   (`authorization: Bearer abc` -> `authorization: ***`), and `Bearer abc` / `Basic abc`.
 *
 * Ground floor: imports nothing of the library.
 */

/** What a secret is replaced with. */
export const MASK = '***';

/**
 * The request headers that carry an API's credential (lower case): `authorization` (bearer
 * tokens: GitHub, OpenAI, most APIs), `x-api-key` (Anthropic, many gateways), `api-key` (Azure
 * OpenAI). Masked here, and what a limiter partitions by by default.
 */
export const API_CREDENTIAL_HEADERS: readonly string[] = ['authorization', 'x-api-key', 'api-key'];

/**
 * The credential header a vendor's `headers` profile names, beyond {@link API_CREDENTIAL_HEADERS}
 * (lower case): masked here, and partitioned by with that profile.
 */
export const VENDOR_CREDENTIAL_HEADERS: Readonly<Record<string, string>> = {
  shopify: 'x-shopify-access-token',
};

/** Header names whose values are credentials (lower case). */
const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set([
  ...API_CREDENTIAL_HEADERS,
  ...Object.values(VENDOR_CREDENTIAL_HEADERS),
  'proxy-authorization',
  'cookie',
  'set-cookie',
]);

/** Field names (lower case) whose values are masked wherever they appear in an object. */
const CREDENTIAL_FIELDS: ReadonlySet<string> = new Set([
  ...CREDENTIAL_HEADERS,
  'password',
  'passwd',
  'secret',
  'token',
  'apikey',
  'api_key',
  'access_token',
  'refresh_token',
  'client_secret',
]);

/** Whether a field or header of this name holds a credential (case-insensitive). */
export function isCredentialName(name: string): boolean {
  return CREDENTIAL_FIELDS.has(name.toLowerCase());
}

/**
 * `value` with its secrets masked (see the module comment): a string is masked in place; arrays
 * and plain objects are copied where something changed (the same object is returned when
 * nothing did); a `URL` or `URLSearchParams` becomes its masked text, a `Headers` a masked plain
 * object; other objects (class instances, functions) are returned as they are. A value whose
 * reading throws (a getter, a proxy) becomes {@link UNREADABLE}: an error that reports a bad value
 * must not throw in its place.
 */
export function redact<T>(value: T): T {
  try {
    return redactValue(value, 0, new WeakMap()) as T;
  } catch {
    return UNREADABLE as T;
  }
}

/** What {@link redact} gives for a value whose reading throws. */
const UNREADABLE = '(a value that throws when read)';

/**
 * A `JSON.stringify` replacer with the same masking, for objects {@link redact} returns as they
 * are (class instances: an ioredis client's `options.password`).
 */
export function redactingReplacer(key: string, value: unknown): unknown {
  if (key !== '' && isCredentialName(key)) return maskWhole(value);
  return typeof value === 'string' ? redactText(value) : value;
}

/** The same masking for one string (a message, a URL, a path). */
export function redactText(text: string): string {
  if (!MAYBE_SECRET.test(text)) return text;
  const whole = wholeUrlMasked(text);
  if (whole !== undefined) text = whole;
  // A URL's user info first, across the quotes, backticks and angle brackets a password may hold
  // (a URL parser takes them: `redis://u:s3cr"et@host`), which end a token below.
  let out = text.replace(USERINFO_IN_TEXT, (_m, scheme: string) => `${scheme}${MASK}@`);
  out = out.replace(HEADER_IN_TEXT, (_m, name: string, sep: string) => `${name}${sep}${MASK}`);
  out = out.replace(KEY_IN_TEXT, (_m, prefix: string) => `${prefix}${MASK}`);
  out = out.replace(AUTH_SCHEME, (_m, scheme: string) => `${scheme} ${MASK}`);
  return out.replace(TOKEN, redactToken);
}

/**
 * An error a transport threw, with the secrets of its message and stack masked (and of its
 * `cause`'s, a few deep): Node's fetch puts the whole URL in its message ("Request cannot be
 * constructed from a URL that includes credentials: https://user:pw@host/", "Failed to parse URL
 * from ..."), which `console.error` prints. An error with nothing to mask is returned as it is;
 * else a copy of the same class (`instanceof`, `name`, `code`, every own field kept), so its kind
 * stays readable. The transport's own error object is never changed.
 */
export function redactError<T>(error: T, depth = 0): T {
  if (!(error instanceof Error) || depth > 3) return error;
  const fields = error as unknown as Record<PropertyKey, unknown>;
  // The message, the stack and each text field (`input`: the URL a URL error names), and `cause`.
  const masked = new Map<PropertyKey, unknown>();
  for (const key of ['message', 'stack', ...Reflect.ownKeys(error)]) {
    const value = fields[key];
    const out =
      key === 'cause' ? redactError(value, depth + 1) : typeof value === 'string' ? redactText(value) : value;
    if (out !== value) masked.set(key, out);
  }
  return masked.size === 0 ? error : (copyWith(error, masked) as T);
}

/**
 * A copy of `error` (same prototype, so `instanceof` and `name` hold; every own field with its
 * descriptor) with the fields of `replaced` set to their new values, for the errors the library
 * masks: `redactError` here, and the Redis client's errors (`withoutCredentials`). A replaced
 * field keeps its own enumerability; one the error did not have as its own is enumerable, but
 * `message` and `stack` (which an `Error` keeps out of `JSON.stringify`). Private fields (`#x`)
 * cannot be copied: a class that reads them from its methods should not be passed here.
 */
export function copyWith(error: object, replaced: ReadonlyMap<PropertyKey, unknown>): object {
  const copy = Object.create(Object.getPrototypeOf(error)) as object;
  for (const key of Reflect.ownKeys(error)) {
    Object.defineProperty(copy, key, Object.getOwnPropertyDescriptor(error, key) as PropertyDescriptor);
  }
  for (const [key, value] of replaced) {
    const own = Object.getOwnPropertyDescriptor(error, key);
    Object.defineProperty(copy, key, {
      value,
      enumerable: own?.enumerable ?? !(key === 'message' || key === 'stack'),
      writable: true,
      configurable: true,
    });
  }
  return copy;
}

const MAX_DEPTH = 8;

// Anything to mask has one of these; the common message (no URL, no header) is returned at once.
const MAYBE_SECRET =
  /[@?=#]|bearer|basic|authori[sz]ation|cookie|api-?key|access-token|sk-|sk_|ghp_|gh[ous]_|github_pat_|xox[abprs]-/i;

// An API key by its vendor's prefix, wherever it stands (a key given as `api`, or as a header
// list, is echoed as the value received): OpenAI's and Anthropic's `sk-`, Stripe's `sk_live_`,
// GitHub's tokens, Slack's. The prefix is kept, the rest masked.
const KEY_IN_TEXT =
  /\b(sk-(?:ant-|proj-)?|sk_(?:live|test)_|rk_(?:live|test)_|ghp_|gh[ous]_|github_pat_|xox[abprs]-)[A-Za-z0-9_-]{8,}/g;

// `authorization: Bearer abc`, `"cookie":"a=b"`, `x-api-key=abc`: the value up to a quote, a
// comma, a closing brace or the line's end.
// The names longest first, so that `set-cookie` is not read as `cookie`.
const HEADER_IN_TEXT = new RegExp(
  `\\b(${[...CREDENTIAL_HEADERS].sort((a, b) => b.length - a.length).join('|')})(["']?\\s*[:=]\\s*["']?)(?!\\*\\*\\*|\\s)[^"'\\r\\n,}]+`,
  'gi',
);

const AUTH_SCHEME = /\b(Bearer|Basic)\s+(?!\*\*\*)[A-Za-z0-9\-._~+/]+=*/gi;

/**
 * `text` when it is one URL with user info (a config's `redis` value), that info masked by the
 * URL parser: it reads a password with white space in it (`redis://u:pa ss@host`, which the
 * parser takes), which no rule on text can tell from a sentence. `undefined` otherwise.
 */
function wholeUrlMasked(text: string): string | undefined {
  if (!/^[a-z][a-z0-9+.-]*:\/\/\S/i.test(text) || !text.includes('@')) return undefined;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  if (url.username === '' && url.password === '') return undefined;
  url.username = MASK;
  url.password = '';
  return url.href;
}

// A scheme and the user info after it up to its last `@` before the host: no white space, `/`,
// `?`, `#` or `\\` (what ends an authority), and not `***` already.
const USERINFO_IN_TEXT = /\b([a-z][a-z0-9+.-]*:\/\/)(?!\*\*\*@)[^\s/?#\\]*@/gi;

// A run of characters that may be a URL or part of one: quotes, white space, angle brackets and
// backticks end it (a URL in a JSON string or in a sentence).
const TOKEN = /[^\s"'`<>]+/g;

const SCHEME = /^([^:/?#@]*?)([a-z][a-z0-9+.-]*:\/\/)/i;

function redactToken(token: string): string {
  if (!/[@?#=]/.test(token)) return token;
  const scheme = SCHEME.exec(token);
  let head: string;
  let rest: string;
  if (scheme !== null) {
    head = token.slice(0, scheme[0].length);
    rest = maskUserinfo(token.slice(scheme[0].length), () => parses(token.slice(scheme[1]?.length ?? 0)));
  } else {
    head = '';
    rest = token.startsWith('//')
      ? `//${maskUserinfo(token.slice(2), () => false)}`
      : maskBareUserinfo(token);
  }
  return head + maskParameters(rest, scheme !== null);
}

/**
 * The authority is what precedes the first `/`, `?`, `#` or `\`; its user info what precedes its
 * last `@` (as the WHATWG parser reads it). A URL the parser refuses may hide a password with a
 * `/` in it (`redis://:a/b@host`): then everything before the last `@` ahead of the query goes.
 */
function maskUserinfo(rest: string, valid: () => boolean): string {
  const end = firstOf(rest, '/?#\\');
  const at = rest.lastIndexOf('@', end - 1);
  if (at >= 0) return `${MASK}${rest.slice(at)}`;
  if (valid()) return rest;
  const beforeQuery = firstOf(rest, '?#');
  const lastAt = rest.lastIndexOf('@', beforeQuery - 1);
  return lastAt >= 0 ? `${MASK}${rest.slice(lastAt)}` : rest;
}

/** `user:pw@host` with no scheme: a `:` before the last `@` (ahead of the query) marks it. */
function maskBareUserinfo(token: string): string {
  const beforeQuery = firstOf(token, '?#');
  const at = token.lastIndexOf('@', beforeQuery - 1);
  if (at <= 0) return token;
  const info = token.slice(0, at);
  const colon = info.indexOf(':');
  if (colon < 0) return token;
  // Keep the punctuation a sentence put before it: `(user:pw@host)`.
  const lead = /^[([{,;=]*/.exec(info)?.[0] ?? '';
  return `${lead}${MASK}${token.slice(at)}`;
}

/**
 * Every `name=value` after a `?`, `&`, `;` or `#` becomes `name=***`; in a URL, a query of one
 * part with no `=` (`?abc123`) is masked whole.
 */
function maskParameters(text: string, isUrl: boolean): string {
  const start = firstOf(text, '?#');
  if (start === text.length) {
    // A query string on its own (`a=b&c=d`); one `a=b` alone is left (`>=` in a sentence).
    if (!text.includes('&')) return text;
    return text.replace(/(^|[&;])([^=&;]+)=([^&;]*)/g, (m, sep: string, name: string, v: string) =>
      v === '' || v === MASK ? m : `${sep}${name}=${MASK}`,
    );
  }
  const base = text.slice(0, start);
  const params = text.slice(start);
  return (
    base +
    params.replace(/([?#&;])([^?#&;]*)/g, (m, sep: string, part: string) => {
      if (part === '') return m;
      const eq = part.indexOf('=');
      // `?abc123` may be a key; `#top` is a place in the page.
      if (eq < 0) return isUrl && sep === '?' && part !== MASK ? `${sep}${MASK}` : m;
      return part.slice(eq + 1) === MASK ? m : `${sep}${part.slice(0, eq)}=${MASK}`;
    })
  );
}

function firstOf(text: string, chars: string): number {
  for (let i = 0; i < text.length; i++) if (chars.includes(text[i] as string)) return i;
  return text.length;
}

function parses(url: string): boolean {
  try {
    new URL(url);
    return true;
  } catch {
    return false;
  }
}

function redactValue(value: unknown, depth: number, seen: WeakMap<object, unknown>): unknown {
  if (typeof value === 'string') return redactText(value);
  if (typeof value !== 'object' || value === null || depth > MAX_DEPTH) return value;
  const done = seen.get(value);
  if (done !== undefined) return done;
  seen.set(value, value);
  let out: unknown = value;
  if (Array.isArray(value)) out = redactArray(value, depth, seen);
  else {
    const proto = Object.getPrototypeOf(value);
    if (proto === Object.prototype || proto === null) out = redactObject(value as object, depth, seen);
    else out = redactInstance(value, depth, seen);
  }
  seen.set(value, out);
  return out;
}

/**
 * The WHATWG objects a user hands over where a string or a header list belongs (`origin: new
 * URL(...)`, `headers: new Headers(...)`), which `util.inspect` and `JSON.stringify` print whole:
 * a `URL` as its text, `URLSearchParams` as its text, `Headers` as a plain object, each masked.
 * Other instances are returned as they are.
 */
function redactInstance(value: object, depth: number, seen: WeakMap<object, unknown>): unknown {
  if (typeof URL === 'function' && value instanceof URL) return redactText(value.href);
  if (typeof URLSearchParams === 'function' && value instanceof URLSearchParams) {
    return redactText(`?${value.toString()}`).slice(1);
  }
  if (typeof Headers === 'function' && value instanceof Headers) {
    return redactObject(Object.fromEntries(value.entries()), depth, seen);
  }
  return value;
}

function redactArray(value: readonly unknown[], depth: number, seen: WeakMap<object, unknown>): unknown[] {
  let copy: unknown[] | undefined;
  for (let i = 0; i < value.length; i++) {
    const item = value[i];
    // A flat header list: `['authorization', 'Bearer abc', ...]`.
    const previous = value[i - 1];
    const masked =
      i % 2 === 1 && typeof previous === 'string' && isCredentialName(previous)
        ? maskWhole(item)
        : redactValue(item, depth + 1, seen);
    if (!Object.is(masked, item)) {
      copy ??= value.slice();
      copy[i] = masked;
    }
  }
  return copy ?? (value as unknown[]);
}

function redactObject(value: object, depth: number, seen: WeakMap<object, unknown>): object {
  let copy: Record<string, unknown> | undefined;
  for (const key of Object.keys(value)) {
    const item = (value as Record<string, unknown>)[key];
    const masked = isCredentialName(key) ? maskWhole(item) : redactValue(item, depth + 1, seen);
    const newKey = redactText(key);
    if (!Object.is(masked, item) || newKey !== key) {
      if (copy === undefined) {
        copy = Object.create(Object.getPrototypeOf(value)) as Record<string, unknown>;
        for (const k of Object.keys(value)) {
          Object.defineProperty(copy, k, {
            value: (value as Record<string, unknown>)[k],
            enumerable: true,
            writable: true,
            configurable: true,
          });
        }
      }
      if (newKey !== key) delete copy[key];
      Object.defineProperty(copy, newKey, {
        value: masked,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }
  return copy ?? value;
}

/** A credential's value: a non-empty string (or each string of a list) becomes `***`. */
function maskWhole(value: unknown): unknown {
  if (typeof value === 'string') return value === '' || value === MASK ? value : MASK;
  if (Array.isArray(value)) {
    const masked = value.map(maskWhole);
    return masked.some((v, i) => !Object.is(v, value[i])) ? masked : value;
  }
  if (typeof value === 'number' || typeof value === 'bigint') return MASK;
  return value;
}
