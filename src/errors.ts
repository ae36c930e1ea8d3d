import type { ZodError } from 'zod';
import { isCredentialName, MASK, redact, redactingReplacer, redactText } from './redact.js';

/**
 * The base of every error this library throws; `code` is stable across versions. Its message has
 * its secrets masked (`redactText`: URL passwords, query values, credential headers).
 */
export class AdaptiveRateLimitError extends Error {
  readonly code: string;

  constructor(code: string, message: string, options?: ErrorOptions) {
    super(redactText(message), options);
    this.name = 'AdaptiveRateLimitError';
    this.code = code;
  }
}

/** Why a limiter refused a request without sending it. */
export type RejectionReason = 'queue-full' | 'max-wait' | 'timeout' | 'closed';

/** A request the limiter did not send: its queue was full, its wait too long, or it was closed. */
export class RateLimitRejectedError extends AdaptiveRateLimitError {
  readonly reason: RejectionReason;
  /**
   * The name of the limiter that refused, its secrets masked (`redactText`) as in the message: a
   * name may hold a key (a partition named after a customer's), and an error is logged.
   */
  readonly limiter: string;
  /**
   * The wait the limiter predicted when it refused (ms, >= 0), when it knows one: how long the
   * request would have waited (max-wait, queue-full, timeout). `undefined` once closed.
   */
  readonly retryAfterMs: number | undefined;

  constructor(reason: RejectionReason, limiter: string, detail: string, retryAfterMs?: number) {
    super(`ERR_RATE_LIMIT_${reason.toUpperCase().replace('-', '_')}`, `rate limiter "${limiter}": ${detail}`);
    this.name = 'RateLimitRejectedError';
    this.reason = reason;
    this.limiter = redactText(limiter);
    this.retryAfterMs =
      retryAfterMs !== undefined && retryAfterMs >= 0 && Number.isFinite(retryAfterMs)
        ? retryAfterMs
        : undefined;
  }
}

/**
 * `code` of `SharedBudgetUnavailableError` (adaptive-rate-limit/redis), defined here so that code
 * which must not load the Redis modules (the attempt loop) can tell it.
 * @internal
 */
export const SHARED_BUDGET_UNAVAILABLE = 'ERR_SHARED_BUDGET_UNAVAILABLE';

/**
 * Whether `error` is a limiter's refusal of an acquire, no request sent: a
 * `RateLimitRejectedError` (queue full, wait past maxWait, closed), or a fail-closed shared
 * budget's `SharedBudgetUnavailableError` (Redis unreachable).
 * @internal
 */
export function isLimiterRefusal(error: unknown): boolean {
  return (
    error instanceof RateLimitRejectedError ||
    (error instanceof AdaptiveRateLimitError && error.code === SHARED_BUDGET_UNAVAILABLE)
  );
}

/**
 * The API refused a call because a spend cap or the account's quota is used up (Anthropic's
 * `enforced_spend_limit_reached`, OpenAI's `insufficient_quota`): no retry can succeed until the
 * cap is raised or the period ends, so the call ends at once, is not retried and cuts no rate.
 * `response` is the API's answer (status 429, its headers; its body was read to tell).
 */
export class QuotaExhaustedError extends AdaptiveRateLimitError {
  /** The name of the limiter the call went through, its secrets masked (`redactText`). */
  readonly limiter: string;
  /** The API's error code: `insufficient_quota` or `enforced_spend_limit_reached`. */
  readonly reason: string;
  readonly status: number;
  readonly response: Response | undefined;

  constructor(limiter: string, reason: string, status: number, response?: Response) {
    super(
      'ERR_QUOTA_EXHAUSTED',
      `rate limiter "${limiter}": the API refused the call for its spend cap or quota (${reason}, status ${status}); not retried`,
    );
    this.name = 'QuotaExhaustedError';
    this.limiter = redactText(limiter);
    this.reason = reason;
    this.status = status;
    this.response = response;
  }
}

/**
 * The body of a throttled answer held while its retry waited was longer than the held-body cap
 * (64 KiB): it was cut there and its connection closed. When no retry is sent after all, the
 * caller gets that answer (status and headers as sent), and its body ends with this error after
 * the kept bytes.
 */
export class ThrottledBodyTooLongError extends AdaptiveRateLimitError {
  /** The status of the throttled answer. */
  readonly status: number;
  /** The bytes kept: the cap. */
  readonly maxBytes: number;

  constructor(status: number, maxBytes: number) {
    super(
      'ERR_THROTTLED_BODY_TOO_LONG',
      `the body of the throttled answer (${status}) held for a retry was longer than ${maxBytes} bytes: cut there, its connection closed`,
    );
    this.name = 'ThrottledBodyTooLongError';
    this.status = status;
    this.maxBytes = maxBytes;
  }
}

/**
 * The body of a 429 an LLM API's limiter (`api`) reads before it judges it (a spend cap says so
 * only in its body) did not end within the read's time limit (5 s from the response's start: a
 * proxy or gateway that sent the headers, then stalled): it was cut there and its connection
 * closed, and the 429 judged on its status and headers alone (a rate limit, retried per its
 * `Retry-After`). When no retry is sent after all, the caller gets that answer (status and headers
 * as sent), and its body ends with this error after the bytes received in time, as a body cut at
 * the held-body cap ends with {@link ThrottledBodyTooLongError}. Also the end of any held throttled
 * answer's body still coming 1 s after its retry had its units (`HELD_BODY_DRAIN_MS`), when that
 * retry is then not sent after all (a one-shot request body that could no longer be replayed).
 */
export class ThrottledBodyTimeoutError extends AdaptiveRateLimitError {
  /** The status of the throttled answer. */
  readonly status: number;
  /** How long its body was read (ms). */
  readonly timeoutMs: number;

  constructor(status: number, timeoutMs: number) {
    super(
      'ERR_THROTTLED_BODY_TIMEOUT',
      `the body of the throttled answer (${status}) did not end within ${timeoutMs} ms of its read: cut there, its connection closed`,
    );
    this.name = 'ThrottledBodyTimeoutError';
    this.status = status;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * A bad argument to a method called at run time (`acquire(0)`, `setRate(-1)`,
 * `changeLimitForPeriod(0)`): names the method, the argument and the value received.
 */
export class InvalidArgumentError extends AdaptiveRateLimitError {
  /** The method called, such as `acquire`. */
  readonly method: string;
  /** The argument's name, such as `units`. */
  readonly argument: string;
  /** The value received, its secrets masked (see `redact`). */
  readonly received: unknown;

  constructor(method: string, argument: string, expected: string, received: unknown) {
    const safe = redactReceived(argument, received);
    super('ERR_INVALID_ARGUMENT', `${method}(): ${argument}: ${expected} (received ${describe(safe)})`);
    this.name = 'InvalidArgumentError';
    this.method = method;
    this.argument = argument;
    this.received = safe;
  }
}

/**
 * A callback given in the options (`classify`, `units`, `responseUnits`) returned a value outside
 * its contract; the request it was called for fails with this error.
 */
export class InvalidCallbackValueError extends AdaptiveRateLimitError {
  /** The option the callback was given as, such as `classify`. */
  readonly callback: string;
  /** The value it returned, its secrets masked (see `redact`). */
  readonly received: unknown;

  constructor(callback: string, message: string, received: unknown) {
    super('ERR_INVALID_CALLBACK_VALUE', message);
    this.name = 'InvalidCallbackValueError';
    this.callback = callback;
    this.received = redact(received);
  }
}

/** What a `ConfigError` about a limiter's options names: its constructor's, `update()`'s and a controller's alike. */
export const LIMITER_SOURCE = 'rate limiter options';

/** One bad field of an options object or a config file. */
export interface ConfigIssue {
  /** Dotted path of the field, such as `limiters.github.maxWait`. */
  path: string;
  message: string;
  /** The value received, its secrets masked (see `redact`). */
  received: unknown;
}

/**
 * Options or a config file that do not validate; `issues` lists every bad field. The values
 * received are kept with their secrets masked: a URL's user and password, query values, and the
 * values of credential headers and fields (see `redact`).
 */
export class ConfigError extends AdaptiveRateLimitError {
  readonly issues: readonly ConfigIssue[];

  constructor(found: readonly ConfigIssue[], source = 'options') {
    const issues = found.map((i) => ({
      path: redactText(i.path),
      message: redactText(i.message),
      received: redactReceived(i.path, i.received),
    }));
    const lines = issues.map(
      (i) => `  - ${i.path || '(root)'}: ${i.message} (received ${describe(i.received)})`,
    );
    super('ERR_INVALID_CONFIG', `invalid ${source}:\n${lines.join('\n')}`);
    this.name = 'ConfigError';
    this.issues = issues;
  }
}

/** `received` masked; whole when the field it was given as names a credential (`headers.cookie`). */
function redactReceived(path: string, received: unknown): unknown {
  const field = path.slice(path.lastIndexOf('.') + 1);
  if (field !== '' && isCredentialName(field) && received !== undefined && received !== '') return MASK;
  return redact(received);
}

/**
 * A value received, as errors print it: JSON (the secrets of an object's credential fields masked;
 * a string as given: callers mask it first, see `redact`), cut at 80 characters; an object
 * without telling JSON by what it is; never throws (a getter or a proxy that throws, a bigint).
 * @internal
 */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'bigint') return `${value}n`;
  let kind: string | undefined;
  try {
    kind = objectKind(value);
  } catch {}
  let json: string | undefined;
  try {
    json = JSON.stringify(value, redactingReplacer);
  } catch {}
  // A symbol, a bigint, a cycle: no JSON.
  if (typeof json !== 'string') {
    if (kind !== undefined) return kind;
    try {
      return Object.prototype.toString.call(value);
    } catch {
      return 'an object';
    }
  }
  // An object whose JSON tells nothing (`{}`: a class instance, a clock) is told by what it is.
  if (kind !== undefined) json = json === '{}' ? kind : `${kind} ${json}`;
  return json.length > 80 ? `${json.slice(0, 77)}...` : json;
}

/**
 * What an object is beside its JSON: an instance of a class without `toJSON` by its class (`an
 * AdaptiveRateLimiter`, `a Map`), a plain object of methods alone (a clock) by them (`an object
 * with now(), setTimeout()`); `undefined` for the others (plain data, a `URL`, a `Date`).
 */
function objectKind(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return undefined;
    const name = (proto as { constructor?: { name?: unknown } }).constructor?.name;
    const kind = typeof name === 'string' && name !== '' ? name : 'object';
    return `${/^[aeiou]/i.test(kind) ? 'an' : 'a'} ${kind}`;
  }
  const keys = Object.keys(value);
  const fields = value as Record<string, unknown>;
  if (keys.length === 0 || !keys.every((key) => typeof fields[key] === 'function')) return undefined;
  return `an object with ${keys.map((key) => `${key}()`).join(', ')}`;
}

/**
 * A config path as errors print it: its keys joined by dots, a key that is empty or holds a dot,
 * white space or a quote written as a JSON string (a limiter named `""` is at `limiters.""`, one
 * named `a.b` at `limiters."a.b"`, so that `limiters."a.b".maxWait` is not read as a limiter `a`).
 */
export function configPath(keys: readonly PropertyKey[]): string {
  return keys.map((key) => (typeof key === 'string' && PLAIN_KEY.test(key) ? key : keyText(key))).join('.');
}

const PLAIN_KEY = /^[^.\s"]+$/;

function keyText(key: PropertyKey): string {
  return typeof key === 'string' ? JSON.stringify(key) : String(key);
}

/**
 * The keys of the object `schema` (a zod schema; optional, nullable and default wrappers looked
 * through) expects at `path`, walking objects by key and records by their values; `undefined`
 * where there is no such object.
 */
function keysAt(schema: unknown, path: readonly PropertyKey[]): readonly string[] | undefined {
  type Def = { innerType?: unknown; shape?: Record<string, unknown>; valueType?: unknown };
  const defOf = (s: unknown) => (s as { _zod?: { def?: Def } } | undefined)?._zod?.def;
  const unwrap = (s: unknown) => {
    for (let i = 0; i < 8 && defOf(s)?.innerType !== undefined; i++) s = defOf(s)?.innerType;
    return s;
  };
  let s = unwrap(schema);
  for (const key of path) {
    const def = defOf(s);
    if (def?.shape !== undefined && typeof key === 'string' && Object.hasOwn(def.shape, key))
      s = def.shape[key];
    else if (def?.valueType !== undefined) s = def.valueType;
    else return undefined;
    s = unwrap(s);
  }
  const shape = defOf(s)?.shape;
  return shape === undefined ? undefined : Object.keys(shape);
}

/**
 * A {@link ConfigError} for each issue of `error`. `error` comes from a parse given the library's
 * words (`schema.safeParse(input, { error: issueMessage })`, see `issueMessage`): its messages are
 * kept as they are. `schema`: the schema that made it; an unknown key is then told the keys
 * expected there, and the one meant when it is a near miss.
 */
export function configErrorFrom(
  error: ZodError,
  input: unknown,
  source: string,
  prefix = '',
  schema?: unknown,
): ConfigError {
  // `prefix` is a path as printed already (`limiters."a.b".maxConcurrent`).
  const join = (path: readonly PropertyKey[]) =>
    prefix === '' ? configPath(path) : path.length === 0 ? prefix : `${prefix}.${configPath(path)}`;
  return new ConfigError(
    error.issues.flatMap((issue) =>
      // An unknown key is an issue at that key (a misspelled field names itself), not at its object.
      issue.code === 'unrecognized_keys'
        ? issue.keys.map((key) => ({
            path: join([...issue.path, key]),
            message: unknownKeyAt(schema, issue.path, key),
            received: valueAt(input, [...issue.path, key]),
          }))
        : [
            {
              path: join(issue.path),
              message:
                issue.code === 'invalid_key' ? (issue.issues[0]?.message ?? issue.message) : issue.message,
              // A record's refused key is what was received, not the value under it.
              received: issue.code === 'invalid_key' ? issue.path.at(-1) : valueAt(input, issue.path),
            },
          ],
    ),
    source,
  );
}

function unknownKeyAt(schema: unknown, path: readonly PropertyKey[], key: PropertyKey): string {
  const known = schema === undefined ? undefined : keysAt(schema, path);
  return known === undefined || typeof key !== 'string' ? 'unknown key' : unknownKeyMessage(key, known);
}

/** The known key `key` is a near miss of (a typo, another case), if any. */
export function nearMiss(key: string, known: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  return known.find((k) => distance(k.toLowerCase(), lower) <= (lower.length > 4 ? 2 : 1));
}

/** `unknown key (expected one of: ...)`, with the known key meant when it is a near miss. */
export function unknownKeyMessage(key: string, known: readonly string[]): string {
  const meant = nearMiss(key, known);
  const hint = meant === undefined ? '' : `did you mean "${meant}"? `;
  return `unknown key (${hint}expected one of: ${known.join(', ')})`;
}

/** Edit distance (insertions, deletions, substitutions) between two short strings. */
function distance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      next[j] = Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, (row[j - 1] ?? 0) + cost);
    }
    row = next;
  }
  return row[b.length] ?? 0;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v = input;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}
