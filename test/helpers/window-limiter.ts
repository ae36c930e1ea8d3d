import { ManualClock } from '../../src/clock.js';
import { AdaptiveRateLimiter } from '../../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../../src/limiter/options.js';
import type { Permit } from '../../src/limiter/types.js';

/** A limiter on a manual clock that waits and pauses up to an hour (a GitHub window), no slow start. */
export function windowLimiter(options: AdaptiveLimiterOptions = {}) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({
    clock,
    slowStart: false,
    maxPause: 3_600_000,
    maxWait: 3_600_000,
    ...options,
  });
  return { clock, limiter };
}

/** A permit granted now; throws when the limiter grants none. */
export function take(limiter: AdaptiveRateLimiter): Permit {
  const permit = limiter.tryAcquire();
  if (permit === undefined) throw new Error('no permit');
  return permit;
}

/** The permits granted as the clock steps by 100 ms, `steps` times (900 a minute: one a step). */
export function grantsOver(clock: ManualClock, limiter: AdaptiveRateLimiter, steps = 100): Permit[] {
  const granted: Permit[] = [];
  for (let i = 0; i < steps; i++) {
    clock.advance(100);
    const permit = limiter.tryAcquire();
    if (permit !== undefined) granted.push(permit);
  }
  return granted;
}
