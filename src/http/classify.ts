import { InvalidCallbackValueError } from '../errors.js';
import { type HeaderLookup, type HeaderRecord, headerLookup, type ResponseHeaders } from '../headers.js';
import type { AnnouncedQuota, Outcome } from '../limiter/types.js';
import { answeredLater, promiseAnswer } from '../thenable.js';
import type { QuotaReader } from './quota-headers/index.js';
import { REFUSAL_HEADER } from './refusal.js';
import { rateLimitWait, serverWait } from './retry-after.js';

/** What an answer means for the limiter. */
export type ResponseVerdict = 'success' | 'throttled' | 'failed';

/**
 * What a `classify` callback returns: a verdict; or a throttled or failed verdict with the wait
 * the answer asks for in ms (`{ verdict: 'throttled', retryAfterMs }`, for a wait no standard
 * header carries, such as GitHub's `x-ratelimit-reset`); or `undefined` for the default rule.
 */
export type ClassifyResult =
  | ResponseVerdict
  | { verdict: 'throttled' | 'failed'; retryAfterMs?: number | undefined }
  | undefined;

/** How responses are judged; the resolved form of the interceptor's options. */
export interface ResponseRules {
  /** Statuses that mean "slow down". */
  readonly throttleStatuses: ReadonlySet<number>;
  /** The caller's verdict, or `undefined` for the default rule. */
  readonly classify?: ((status: number, headers: HeaderRecord) => ClassifyResult) | undefined;
  /** The units a successful request really cost, or `undefined` to keep the charge. */
  readonly responseUnits?: ((status: number, headers: HeaderRecord) => number | undefined) | undefined;
}

const SUCCESS: Outcome = { kind: 'success' };
const FAILED: Outcome = { kind: 'failed' };
const VERDICTS: ReadonlySet<unknown> = new Set(['success', 'throttled', 'failed']);

/**
 * The default rule (README, "HTTP answers"): a throttle status is throttled; any other status
 * below 500 (2xx, 3xx, 4xx: the server answered and was not overloaded) is a success; 5xx failed.
 */
function defaultVerdict(status: number, throttleStatuses: ReadonlySet<number>): ResponseVerdict {
  if (throttleStatuses.has(status)) return 'throttled';
  return status >= 500 ? 'failed' : 'success';
}

/**
 * Turns a response into the outcome that feeds its permit.
 *
 * - throttled: with the wait the response asks for (`retry-after-ms`, `Retry-After` in seconds or
 *   as an HTTP-date counted from the response's `Date` (else from the wall clock `Date.now()`), or
 *   an exhausted `ratelimit` policy);
 *   the limiter caps it by `maxPause`. A wait that is only an exhausted policy the route reads
 *   (in `quota`) is marked `quotaWait`: the limiter pauses as that policy's learned shape says.
 * - failed: a 5xx (or the caller's `'failed'`) neither raises nor cuts the rate; when it carries
 *   such a wait (a 503 with `Retry-After` that is not a throttle status, S3's or nginx's "come back
 *   later") the limiter pauses for it without cutting. So is a 429 this library made
 *   (`x-adaptive-rate-limit`, another adapter's `rejection: 'response'`), without its wait.
 * - success: charged `responseUnits(status, headers)` when that gives a number.
 *
 * Any of them carries the quotas the response announces (`quota`), read by `quotas` (the route's
 * `headers` profile and `quotaFromHeaders`), for the limiter's ceiling.
 *
 * @param headers the response headers in any shape {@link headerLookup} reads.
 * @param record the same headers as a {@link HeaderRecord}, built only when a callback needs it.
 * @throws {InvalidCallbackValueError} when `classify`, `responseUnits` or `quotaFromHeaders` returns
 * something else than documented.
 */
export function classifyResponse(
  status: number,
  headers: ResponseHeaders,
  rules: ResponseRules,
  record: () => HeaderRecord,
  quotas?: QuotaReader,
): Outcome {
  if (quotas === undefined) return judge(status, headers, rules, record, undefined, undefined);
  const lookup = headerLookup(headers);
  const quota = quotas(lookup, record, Date.now());
  const outcome = judge(status, headers, rules, record, lookup, quota);
  return quota === undefined ? outcome : withQuota(outcome, quota);
}

/**
 * `outcome` carrying `quota`, built field by field: V8 copies an object spread (`{ ...outcome }`)
 * through a slow path that cost ~5 µs a response here.
 */
export function withQuota(outcome: Outcome, quota: readonly AnnouncedQuota[]): Outcome {
  if (outcome.kind === 'success') {
    return outcome.units === undefined
      ? { kind: 'success', quota }
      : { kind: 'success', units: outcome.units, quota };
  }
  if (outcome.kind === 'throttled' && outcome.quotaWait === true) {
    return { kind: 'throttled', retryAfterMs: outcome.retryAfterMs, quota, quotaWait: true };
  }
  return { kind: outcome.kind, retryAfterMs: outcome.retryAfterMs, quota };
}

function judge(
  status: number,
  headers: ResponseHeaders,
  rules: ResponseRules,
  record: () => HeaderRecord,
  lookup: HeaderLookup | undefined,
  quota: readonly AnnouncedQuota[] | undefined,
): Outcome {
  let verdict: ResponseVerdict | undefined;
  let waitMs: number | undefined;
  if (rules.classify !== undefined) {
    const result = rules.classify(status, record());
    // A promise (an `async` classify) was read as no verdict, and its rejection went unhandled.
    if (answeredLater(result)) throw asyncCallback('classify', status);
    if (typeof result === 'object' && result !== null) {
      verdict = result.verdict;
      waitMs = result.retryAfterMs;
      if (waitMs !== undefined && !(typeof waitMs === 'number' && waitMs >= 0 && Number.isFinite(waitMs))) {
        throw new InvalidCallbackValueError(
          'classify',
          `classify(${status}) returned retryAfterMs ${String(waitMs)}; it must return a finite number >= 0 for retryAfterMs`,
          result,
        );
      }
    } else verdict = result;
    if (
      verdict !== undefined &&
      (!VERDICTS.has(verdict) || (waitMs !== undefined && verdict === 'success'))
    ) {
      throw new InvalidCallbackValueError(
        'classify',
        `classify(${status}) returned ${JSON.stringify(result)}; it must return 'success', 'throttled', 'failed', { verdict: 'throttled' | 'failed', retryAfterMs } or undefined`,
        result,
      );
    }
  }
  if (verdict === undefined) {
    verdict = defaultVerdict(status, rules.throttleStatuses);
    // A 429 this library made (another adapter's `rejection: 'response'`, inside this one) was
    // never sent: no server said it. Failed, without its wait: no cut, no pause, no retry.
    if (verdict === 'throttled' && (lookup ?? headerLookup(headers))(REFUSAL_HEADER) !== undefined) {
      return FAILED;
    }
  }
  if (verdict === 'success') {
    if (rules.responseUnits === undefined) return SUCCESS;
    const units = rules.responseUnits(status, record());
    if (units === undefined) return SUCCESS;
    if (answeredLater(units)) throw asyncCallback('responseUnits', status);
    if (typeof units !== 'number' || !(units >= 0) || !Number.isFinite(units)) {
      throw new InvalidCallbackValueError(
        'responseUnits',
        `responseUnits(${status}) returned ${String(units)}; it must return a finite number >= 0 or undefined`,
        units,
      );
    }
    return { kind: 'success', units };
  }
  const found = lookup ?? headerLookup(headers);
  const asked = waitMs ?? serverWait(found, Date.now());
  const retryAfterMs = asked ?? rateLimitWait(found);
  if (verdict === 'throttled') {
    if (retryAfterMs === undefined) return { kind: 'throttled' };
    // Only an exhausted RateLimit asks for the wait, and the route read that policy (`quota`): the
    // limiter pauses as the policy's learned shape says (a refilling bucket: one unit), as it does
    // for the same reading on a success. `headers: false` reads no quota: the wait stands.
    if (onlyQuotaReset(asked, retryAfterMs, quota)) {
      return { kind: 'throttled', retryAfterMs, quotaWait: true };
    }
    return { kind: 'throttled', retryAfterMs };
  }
  return retryAfterMs === undefined ? FAILED : { kind: 'failed', retryAfterMs };
}

/**
 * Whether a throttle's wait `retryAfterMs` is only the reset of an exhausted policy that `quota`
 * holds (`remaining` 0): no wait was asked for in so many words (`asked`: `retry-after-ms`,
 * `Retry-After`, a `classify` callback's). Such a throttle is marked `quotaWait`, by the HTTP
 * adapters and by `wrap` alike.
 */
export function onlyQuotaReset(
  asked: number | undefined,
  retryAfterMs: number,
  quota: readonly AnnouncedQuota[] | undefined,
): boolean {
  if (asked !== undefined || quota === undefined) return false;
  return quota.some((q) => q.remaining === 0 && q.resetMs === retryAfterMs);
}

/**
 * The error codes of a request that never reached the server: its connection was refused, timed
 * out or had no route, or its host name did not resolve. A reset or a socket error after the
 * connection may come after the request was sent, and is not among them; nor is a closed or
 * destroyed dispatcher's (see {@link errorOutcome}).
 */
const NEVER_SENT_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/**
 * Whether `error` says the request never reached the server (see {@link NEVER_SENT_CODES}): its
 * own `code`, its `cause`'s (fetch's `TypeError: fetch failed`), or every one of an
 * `AggregateError`'s (the addresses a connection tried).
 */
export function neverSent(error: unknown): boolean {
  return hasCode(error, NEVER_SENT_CODES, 0);
}

/**
 * undici's codes for a dispatcher closed (`ClientClosedError`) or destroyed
 * (`ClientDestroyedError`) when a request came to it.
 */
const CLOSED_CODES: ReadonlySet<string> = new Set(['UND_ERR_CLOSED', 'UND_ERR_DESTROYED']);

/**
 * Whether `error` says the dispatcher was closed or destroyed (an Agent closed while a retry
 * waited in the limiter), found as {@link neverSent} finds its codes.
 */
export function dispatcherClosed(error: unknown): boolean {
  return hasCode(error, CLOSED_CODES, 0);
}

/** Whether `error`, its `cause` chain, or every one of an `AggregateError`'s has one of `codes`. */
function hasCode(error: unknown, codes: ReadonlySet<string>, depth: number): boolean {
  if (typeof error !== 'object' || error === null || depth > 4) return false;
  const { code, cause, errors } = error as { code?: unknown; cause?: unknown; errors?: unknown };
  if (typeof code === 'string' && codes.has(code)) return true;
  if (Array.isArray(errors) && errors.length > 0) return errors.every((e) => hasCode(e, codes, depth + 1));
  return cause !== undefined && hasCode(cause, codes, depth + 1);
}

/**
 * undici's codes for a request it refused as given (`InvalidArgumentError`: a `transfer-encoding`
 * or `content-length` header it will not send; `NotSupportedError`: `expect: 100-continue`).
 */
const REFUSED_CODES: ReadonlySet<string> = new Set(['UND_ERR_INVALID_ARG', 'UND_ERR_NOT_SUPPORTED']);

const NOT_SENT: Outcome = { kind: 'failed', notSent: true };
const NO_ANSWER: Outcome = { kind: 'failed', noAnswer: true };

/**
 * The outcome of a request whose attempt ended in `error` before any answer: failed (no cut; no
 * answer, so none that left an announced policy out), and for one that never reached the server (see {@link neverSent}) its LLM token draws given back.
 * `unstarted`: undici never started the attempt (no `onRequestStart`), so a closed or destroyed
 * dispatcher's error (see {@link dispatcherClosed}) refused it before any write too, as did an
 * error for a request undici will not send as given (`REFUSED_CODES`). Without that
 * knowledge (the fetch wrapper) such an error is an answer-less failure: undici gives it also to a
 * request it had written (destroyed in flight), or to a redirect's or retry's second dispatch
 * after the first was written.
 */
export function errorOutcome(error: unknown, unstarted = false): Outcome {
  try {
    return neverSent(error) || (unstarted && (dispatcherClosed(error) || hasCode(error, REFUSED_CODES, 0)))
      ? NOT_SENT
      : NO_ANSWER;
  } catch {
    // An error whose fields throw when read (a Proxy): the caller gets it as it is, not the read's.
    return NO_ANSWER;
  }
}

/** The refusal of a promise an `async` callback returned for an answer of `status` (see `answeredLater`). */
function asyncCallback(callback: 'classify' | 'responseUnits', status: number): InvalidCallbackValueError {
  return new InvalidCallbackValueError(
    callback,
    `${callback}(${status}) returned ${promiseAnswer(callback)}`,
    'Promise',
  );
}
