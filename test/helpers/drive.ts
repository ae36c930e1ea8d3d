import type { ManualClock } from '../../src/clock.js';
import { until } from './rate-limited-server.js';

/**
 * Moves `clock` in steps of `stepMs` until `promise` settles, and returns it: the HTTP round trips
 * run in real time between the steps, the limiter's (and a mock's) time only moves here.
 */
export async function drive<T>(clock: ManualClock, promise: Promise<T>, stepMs = 100): Promise<T> {
  let done = false;
  const settled = promise.finally(() => {
    done = true;
  });
  settled.catch(() => {});
  await until(
    () => {
      if (!done) clock.advance(stepMs);
      return done;
    },
    'the call to settle',
    60_000,
  );
  return settled;
}
