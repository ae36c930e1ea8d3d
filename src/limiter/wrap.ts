import { runAttempts } from '../attempt-loop.js';
import { ConfigError } from '../errors.js';
import { classifyThrown } from '../wrap/sdk-errors.js';
import type { Outcome, RateLimiter, WrapOptions } from './types.js';

const success: Outcome = { kind: 'success' };

/**
 * Decorates an async function with a limiter: each call acquires its units, runs, and feeds the
 * limiter from its outcome; a throttled call is run again up to `maxAttempts` in all, then its
 * last result is returned (or its last error thrown).
 */
export function wrapWithLimiter<A extends unknown[], R>(
  limiter: RateLimiter,
  fn: (...args: A) => Promise<R>,
  options: WrapOptions<R> = {},
): (...args: A) => Promise<R> {
  if (typeof fn !== 'function') {
    throw new ConfigError([{ path: 'fn', message: 'expected a function', received: fn }], 'wrap arguments');
  }
  const maxAttempts = options.maxAttempts ?? 4;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) {
    throw new ConfigError([
      { path: 'maxAttempts', message: 'expected an integer >= 1', received: maxAttempts },
    ]);
  }
  const { units = 1, classify = () => success, classifyError = classifyThrown } = options;
  if (typeof units === 'number' && !(units > 0 && Number.isFinite(units))) {
    throw new ConfigError([{ path: 'units', message: 'expected a positive finite number', received: units }]);
  }
  return (...args: A) =>
    runAttempts({
      limiter,
      units: typeof units === 'function' ? (units as unknown as (...a: A) => number)(...args) : units,
      maxAttempts,
      send: () => fn(...args),
      classify,
      classifyError,
    });
}
