import { DEFAULT_MAX_ATTEMPTS, runAttempts } from '../attempt-loop.js';
import { ConfigError } from '../errors.js';
import type { Outcome, RateLimiter } from '../limiter/types.js';
import { classifyThrown } from './sdk-errors.js';

const success: Outcome = { kind: 'success' };

/** How {@link wrap} meters and judges a call. */
export interface WrapOptions<R> {
  /** The cost of a call in units, or a function of its arguments (the call's request body among them). @default 1 */
  units?: number | ((...args: never[]) => number);
  /**
   * What a call draws from the limiter's other budgets (see `AdaptiveLimiterOptions.budgets`), by
   * name, or a function of its arguments: `(request) => ({ tokens: request.max_tokens })`. A
   * limiter without budgets ignores it. @default {}
   */
  costs?: Readonly<Record<string, number>> | ((...args: never[]) => Readonly<Record<string, number>>);
  /** Classifies a resolved result. @default every result is a success */
  classify?: (result: R) => Outcome;
  /**
   * Classifies a thrown error. @default `classifyThrown`: an SDK's 429 (`status`, `statusCode`,
   * `response.status`, `response.statusCode`, `$metadata.httpStatusCode`) or an AWS throttling
   * error is throttled, with the wait its headers ask for (`retry-after-ms`, `Retry-After`);
   * anything else failed.
   */
  classifyError?: (error: unknown) => Outcome;
  /** Attempts in all when a call is throttled (a throttled call was not processed). @default 4 */
  maxAttempts?: number;
}

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
  options: WrapOptions<R> = {},
): (...args: A) => Promise<R> {
  if (typeof fn !== 'function') {
    throw new ConfigError([{ path: 'fn', message: 'expected a function', received: fn }], 'wrap arguments');
  }
  const maxAttempts = options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) {
    throw new ConfigError([
      { path: 'maxAttempts', message: 'expected an integer >= 1', received: maxAttempts },
    ]);
  }
  const { units = 1, costs, classify = () => success, classifyError = classifyThrown } = options;
  if (costs !== undefined && (typeof costs !== 'object' || costs === null) && typeof costs !== 'function') {
    throw new ConfigError([
      {
        path: 'costs',
        message: 'expected an object of units per budget, or a function of the arguments',
        received: costs,
      },
    ]);
  }
  if (typeof units !== 'function' && !(typeof units === 'number' && units > 0 && Number.isFinite(units))) {
    throw new ConfigError([
      {
        path: 'units',
        message: 'expected a positive finite number, or a function of the arguments',
        received: units,
      },
    ]);
  }
  return (...args: A) => {
    let callUnits: number;
    let callCosts: Readonly<Record<string, number>> | undefined;
    try {
      callUnits = typeof units === 'function' ? (units as unknown as (...a: A) => number)(...args) : units;
      callCosts =
        typeof costs === 'function'
          ? (costs as unknown as (...a: A) => Readonly<Record<string, number>>)(...args)
          : costs;
    } catch (error) {
      // The decorated function returns a promise: a throw of `units` or `costs` rejects it, as a
      // throw of `fn` does, never escapes the call (a `.catch()` or `Promise.allSettled` sees it).
      return Promise.reject(error);
    }
    return runAttempts({
      limiter,
      units: callUnits,
      costs: callCosts,
      maxAttempts,
      send: () => fn(...args),
      classify,
      classifyError,
    });
  };
}
