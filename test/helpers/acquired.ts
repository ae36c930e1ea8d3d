import type { ManualClock } from '../../src/clock.js';
import { flush } from './unhandled.js';

/**
 * Starts `acquire` and moves the clock a second at a time, for at most `seconds` (70 by default:
 * past the default `maxWait` of 60 s), until it settles: its permit, or `undefined` when it was
 * refused (or had not settled by then).
 */
export async function acquiredWithin<P>(
  acquire: () => Promise<P>,
  clock: ManualClock,
  seconds = 70,
): Promise<P | undefined> {
  let result: { permit: P } | { error: unknown } | undefined;
  acquire().then(
    (permit) => {
      result = { permit };
    },
    (error: unknown) => {
      result = { error };
    },
  );
  await flush();
  for (let s = 0; s < seconds && result === undefined; s++) {
    clock.advance(1_000);
    await flush();
  }
  return result !== undefined && 'permit' in result ? result.permit : undefined;
}
