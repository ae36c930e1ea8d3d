import { DEFAULT_MAX_ATTEMPTS, runAttempts } from '../attempt-loop.js';
import { HEADERS_MESSAGE, headerProfile, unknownKeyMessage } from '../config/rules.js';
import type { HeaderProfile } from '../config/types.js';
import { ConfigError, type ConfigIssue, configPath, describe, InvalidCallbackValueError } from '../errors.js';
import { issueMessage } from '../issue-message.js';
import { quotaProblem } from '../limiter/permit.js';
import type { Outcome, RateLimiter } from '../limiter/types.js';
import { redact } from '../redact.js';
import { answeredLater, isThenable, promiseAnswer } from '../thenable.js';
import { errorQuota } from './error-quota.js';
import { classifyThrown, readingHeadersOnce } from './sdk-errors.js';

const success: Outcome = { kind: 'success' };
const FAILED: Outcome = { kind: 'failed' };

/**
 * How {@link wrap} meters and judges a call. Any other key is refused (a `ConfigError` at its
 * path, with the key meant when it is a near miss). `R` is the wrapped function's result, `A` its
 * arguments, which `units`, `costs` and `signal` take typed (`(request) => request.max_tokens`).
 */
// biome-ignore lint/suspicious/noExplicitAny: an options object typed apart from its `wrap` call (`WrapOptions<R>`) fits any function's arguments, as before `A` typed them.
export interface WrapOptions<R, A extends unknown[] = any[]> {
  /** The cost of a call in units, or a function of its arguments (the call's request body among them). @default 1 */
  units?: number | ((...args: A) => number);
  /**
   * What a call draws from the limiter's other budgets (see `AdaptiveLimiterOptions.budgets`), by
   * name, or a function of its arguments: `(request) => ({ tokens: request.max_tokens })`. A
   * limiter without budgets ignores it. @default {}
   */
  costs?: Readonly<Record<string, number>> | ((...args: A) => Readonly<Record<string, number>>);
  /** Classifies a resolved result. @default every result is a success */
  classify?: (result: R) => Outcome;
  /**
   * Classifies a thrown error. @default `classifyThrown`: an SDK's 429 (`status`, `statusCode`,
   * `response.status`, `response.statusCode`, `$metadata.httpStatusCode`; a number or its text
   * `'429'`) or an AWS throttling error is throttled, with the wait its headers ask for
   * (`retry-after-ms`, `Retry-After`); any other 4xx is a success (an answer the server
   * processed, as the HTTP adapters count it; the call still ends with the error); anything else
   * failed. The quotas the headers announce are read by `headers`, not here.
   */
  classifyError?: (error: unknown) => Outcome;
  /**
   * Which response headers of a thrown error announce the quota, read as the HTTP adapters'
   * `headers` reads an answer's (the same profiles and readers), giving the limiter a ceiling:
   * `'openai'` (`x-ratelimit-remaining-requests`, ...), `'anthropic'` (`anthropic-ratelimit-*`),
   * `'github'`, `'shopify'`, each with the IETF RateLimit fields; `'standard'` those alone;
   * `false` none. The headers are the error's (an openai or Anthropic `APIError`'s `headers`, a
   * `Headers`, a record, a `Map` or an array of `[name, value]` pairs, names in any case;
   * `response.headers`; `$response.headers`: see `classifyThrown`), read whatever `classifyError`
   * says of it, and when it throws; what its outcome carries in `quota` is added after them.
   * A resolved result carries no headers: give `classify` its `quota` instead. @default false
   * (unlike the HTTP adapters' `'standard'`: an error's quotas are read when a profile is named)
   */
  headers?: HeaderProfile | false;
  /** Attempts in all when a call is throttled (a throttled call was not processed). @default 4 */
  maxAttempts?: number;
  /**
   * Cancels a call's waits in the limiter (for its first attempt and for each retry), or a
   * function of its arguments returning the call's signal (or `undefined`): an abort rejects a
   * waiting call at once with the signal's reason, its units given back, as the other adapters
   * do; an aborted signal rejects before any attempt. An attempt already running is not stopped:
   * give `fn` the signal too. @default none
   */
  signal?: AbortSignal | ((...args: A) => AbortSignal | undefined);
}

/** The keys of {@link WrapOptions}: any other is refused with its near miss. */
const WRAP_KEYS = [
  // What a call draws, how its outcome is read, how often it is sent, what cancels its waits.
  'units',
  'costs',
  'classify',
  'classifyError',
  'headers',
  'maxAttempts',
  'signal',
];

/**
 * Decorates an async function with a limiter (any {@link RateLimiter}: adaptive, fixed window, a
 * shared budget): each call acquires its units, runs, and feeds the limiter from its outcome; a
 * throttled call is run again up to `maxAttempts` in all, then its last result is returned (or
 * its last error thrown). The function decorator of the three ways in; it runs the same attempt
 * loop as the HTTP adapters.
 */
export function wrap<A extends unknown[], R>(
  limiter: RateLimiter,
  fn: (...args: A) => Promise<R>,
  options: WrapOptions<R, A> = {},
): (...args: A) => Promise<R> {
  const issues = wrapIssues(limiter, fn, options);
  if (issues.length > 0) throw new ConfigError(issues, 'wrap arguments');
  const {
    units = 1,
    costs,
    maxAttempts = DEFAULT_MAX_ATTEMPTS,
    classify = () => success,
    classifyError = classifyThrown,
    signal,
  } = options;
  // Checked above: a profile's own name (lower case) or `false`.
  const profile = options.headers ?? false;
  // A wait only an exhausted policy's reset is marked so only when the default classifier read
  // it from the headers: a `classifyError` of your own that asks for a wait asked for it, as a
  // `classify` callback's wait is in the HTTP adapters.
  const quotaOfError = errorQuota(profile, classifyError === classifyThrown);
  // A `classifyError` that threw on an SDK's error (a 4xx the API counted): the quotas its headers
  // announce still settle the permit, as the HTTP adapters read an answer's when `classify` threw.
  // Settled with none, its unit went back to a fixed window's credit, and a burst that followed
  // sent one call more than the window had left (7 left, 8 at once: 8 went). Its headers are
  // looked up again on this path only (`readingHeadersOnce` is over once `classifyError` threw).
  const thrownErrorQuota =
    quotaOfError === undefined
      ? undefined
      : (error: unknown) => readingHeadersOnce(error, () => quotaOfError(error, FAILED).quota);
  // A function, not an arrow: a wrapped method (`api.get = wrap(limiter, api.get)`) keeps its
  // `this`, and so do `units` and `costs`.
  return function (this: unknown, ...args: A): Promise<R> {
    let callUnits: number;
    let callCosts: Readonly<Record<string, number>> | undefined;
    let callSignal: AbortSignal | undefined;
    try {
      callUnits = typeof units === 'function' ? checkedUnits(units.apply(this, args)) : units;
      callCosts = typeof costs === 'function' ? checkedCosts(costs.apply(this, args)) : costs;
      callSignal = typeof signal === 'function' ? checkedSignal(signal.apply(this, args)) : signal;
    } catch (error) {
      // The decorated function returns a promise: a throw of `units`, `costs` or `signal` rejects
      // it, as a throw of `fn` does, never escapes the call (a `.catch()` or `Promise.allSettled` sees it).
      return Promise.reject(error);
    }
    return runAttempts({
      limiter,
      units: callUnits,
      costs: callCosts,
      signal: callSignal,
      maxAttempts,
      send: () => fn.apply(this, args),
      classify: (result) => checkedOutcome('classify', classify(result)),
      // The error's headers are found once for `classifyError` and the `headers` profile both.
      classifyError: (error) => readingHeadersOnce(error, () => classifiedError(error)),
      thrownErrorQuota,
    });
  };

  function classifiedError(error: unknown): Outcome {
    let outcome: Outcome;
    try {
      outcome = checkedOutcome('classifyError', classifyError(error));
    } catch (thrown) {
      // The call's own error stays reachable (a `classifyError` that threw, or returned
      // what no outcome is: a forgotten `return`).
      // Not on the call's own error (rethrown as it is: no cause pointing at itself), nor on
      // one that takes no new field (frozen).
      if (
        thrown instanceof Error &&
        thrown !== error &&
        thrown.cause === undefined &&
        Object.isExtensible(thrown)
      )
        thrown.cause = error;
      throw thrown;
    }
    return quotaOfError === undefined ? outcome : quotaOfError(error, outcome);
  }
}

/** Every bad argument of {@link wrap}, checked when it is called, before the first call. */
function wrapIssues(limiter: unknown, fn: unknown, options: unknown): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const acquire = (limiter as { acquire?: unknown } | null | undefined)?.acquire;
  if (typeof limiter !== 'object' || limiter === null || typeof acquire !== 'function') {
    issues.push({ path: 'limiter', message: 'must be a rate limiter (with acquire())', received: limiter });
  }
  if (typeof fn !== 'function') issues.push({ path: 'fn', message: 'must be a function', received: fn });
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    issues.push({ path: 'options', message: 'must be an object of wrap options', received: options });
    return issues;
  }
  for (const key of Object.keys(options)) {
    if (!WRAP_KEYS.includes(key)) {
      issues.push({
        path: key,
        message: unknownKeyMessage(key, WRAP_KEYS),
        received: (options as Record<string, unknown>)[key],
      });
    }
  }
  const { units, costs, maxAttempts, classify, classifyError, headers, signal } =
    options as WrapOptions<unknown>;
  if (
    units !== undefined &&
    typeof units !== 'function' &&
    !(typeof units === 'number' && units > 0 && Number.isFinite(units))
  ) {
    issues.push({
      path: 'units',
      message: 'must be a positive finite number, or a function of the arguments',
      received: units,
    });
  }
  if (costs !== undefined && !isCostsObject(costs) && typeof costs !== 'function') {
    issues.push({
      path: 'costs',
      message: 'must be an object of units per budget, or a function of the arguments',
      received: costs,
    });
  } else if (costs !== undefined && typeof costs !== 'function') {
    // Each budget's units, as acquire would check them (only the limiter knows its budgets' names).
    for (const [budget, value] of Object.entries(costs)) {
      if (!isCost(value))
        issues.push({ path: configPath(['costs', budget]), message: `must be ${COST}`, received: value });
    }
  }
  if (signal !== undefined && typeof signal !== 'function' && !isSignal(signal)) {
    issues.push({
      path: 'signal',
      message: 'must be an AbortSignal, or a function of the arguments returning one',
      received: signal,
    });
  }
  // In code, a profile's own name, as the limiters' options take it (`'OpenAI'` is refused there
  // too); only a JSON configuration binds it in any case.
  if (headers !== undefined && headerProfile.safeParse(headers, { error: issueMessage }).data !== headers) {
    issues.push({ path: 'headers', message: HEADERS_MESSAGE, received: headers });
  }
  if (maxAttempts !== undefined && !(Number.isInteger(maxAttempts) && maxAttempts >= 1)) {
    issues.push({ path: 'maxAttempts', message: 'must be an integer >= 1', received: maxAttempts });
  }
  for (const [path, value] of [
    ['classify', classify],
    ['classifyError', classifyError],
  ] as const) {
    if (value !== undefined && typeof value !== 'function') {
      issues.push({ path, message: 'must be a function returning an outcome', received: value });
    }
  }
  return issues;
}

const KINDS = new Set(['success', 'throttled', 'failed']);

const isWait = (ms: unknown) =>
  ms === undefined || (typeof ms === 'number' && ms >= 0 && Number.isFinite(ms));

/** What the `units` function gave a call: a finite number > 0. @throws {InvalidCallbackValueError} */
function checkedUnits(n: unknown): number {
  if (typeof n === 'number' && n > 0 && Number.isFinite(n)) return n;
  throw new InvalidCallbackValueError(
    'units',
    `units returned ${answeredLater(n) ? promiseAnswer('units') : String(n)}; it must return a finite number > 0`,
    n,
  );
}

/** What a budget's units in `costs` must be, as acquire says it. */
const COST = 'a finite number >= 0';

const isCost = (units: unknown) => typeof units === 'number' && units >= 0 && Number.isFinite(units);

/**
 * What the `costs` function gave a call: an object of units per budget, each a finite number >= 0
 * (the budgets' names are checked by the limiter's acquire, which knows them).
 * @throws {InvalidCallbackValueError}
 */
function checkedCosts(costs: unknown): Readonly<Record<string, number>> | undefined {
  if (costs === undefined) return undefined;
  if (isCostsObject(costs)) {
    for (const [budget, units] of Object.entries(costs as object)) {
      if (!isCost(units)) {
        throw new InvalidCallbackValueError(
          'costs',
          `costs returned ${configPath([budget])}: ${describe(units)}; it must return ${COST} for each budget`,
          costs,
        );
      }
    }
    return costs as Readonly<Record<string, number>>;
  }
  // A promise (an `async` costs function) is read as an object with no budget: nothing drawn.
  // Refused, with its rejection handled.
  const what = answeredLater(costs) ? promiseAnswer('costs') : String(costs);
  throw new InvalidCallbackValueError(
    'costs',
    `costs returned ${what}; it must return an object of units per budget, or undefined`,
    costs,
  );
}

/** An object of units per budget: not an array, not a promise. */
function isCostsObject(costs: unknown): boolean {
  return typeof costs === 'object' && costs !== null && !Array.isArray(costs) && !isThenable(costs);
}

/** Whether `signal` can be listened to as an AbortSignal (one of another realm or a polyfill too). */
function isSignal(signal: unknown): signal is AbortSignal {
  return (
    typeof signal === 'object' &&
    signal !== null &&
    typeof (signal as { addEventListener?: unknown }).addEventListener === 'function'
  );
}

/** What the `signal` function gave a call: an AbortSignal or undefined. @throws {InvalidCallbackValueError} */
function checkedSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined || isSignal(signal)) return signal;
  throw new InvalidCallbackValueError(
    'signal',
    `signal returned ${answeredLater(signal) ? promiseAnswer('signal') : String(signal)}; it must return an AbortSignal or undefined`,
    signal,
  );
}

/**
 * `outcome` when it keeps the {@link Outcome} contract; else an `InvalidCallbackValueError` naming
 * the callback, which the attempt loop answers by failing the permit (a value it cannot read,
 * such as the `undefined` of a forgotten `return`, would leave the permit unanswered: a cold
 * start's slot taken for good).
 */
function checkedOutcome(callback: 'classify' | 'classifyError', outcome: unknown): Outcome {
  const o = outcome as Partial<Record<'kind' | 'units' | 'retryAfterMs' | 'quota' | 'budgets', unknown>>;
  const valid =
    typeof outcome === 'object' &&
    outcome !== null &&
    KINDS.has(o.kind as string) &&
    (o.kind === 'success' ? isWait(o.units) : isWait(o.retryAfterMs)) &&
    (o.quota === undefined ||
      (Array.isArray(o.quota) && o.quota.every((q) => quotaProblem(q) === undefined))) &&
    (o.budgets === undefined ||
      (Array.isArray(o.budgets) && o.budgets.every((b: unknown) => typeof b === 'string')));
  if (valid) return outcome as Outcome;
  throw new InvalidCallbackValueError(
    callback,
    `${callback} returned ${answeredLater(outcome) ? promiseAnswer(callback) : describeOutcome(outcome)}; it must return { kind: 'success' | 'throttled' | 'failed' } (units or retryAfterMs a finite number >= 0, quota an array of { policy, remaining, resetMs, limit, windowMs }, numbers finite and >= 0, limit and windowMs > 0)`,
    outcome,
  );
}

function describeOutcome(value: unknown): string {
  if (value === undefined) return 'undefined';
  try {
    return JSON.stringify(redact(value)) ?? String(value);
  } catch {
    return String(value);
  }
}
