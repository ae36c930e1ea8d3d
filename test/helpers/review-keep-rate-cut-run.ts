// Run with NODE_DEBUG=adaptive-rate-limit (test/review-latest-commits.test.ts): a limiter far above
// its floor, whose custom controller keeps the rate after a throttle (a controller that only
// pauses on Retry-After), throttled once: a cut counted that leaves the rate where it is.
import { ManualClock } from '../../src/clock.js';
import { AdaptiveRateLimiter } from '../../src/index.js';

const clock = new ManualClock();
const limiter = new AdaptiveRateLimiter({
  name: 'keeper',
  clock,
  controller: { onThrottled: (s) => s.rate, onSuccess: () => undefined },
  initialUnitsPerMinute: 600,
  minUnitsPerMinute: 1,
});
const permit = limiter.tryAcquire();
if (permit === undefined) throw new Error('expected a grant at once');
permit.throttled();
const s = limiter.snapshot();
console.log(`cuts ${s.cuts} rate ${s.rate} min ${s.minRate}`);
limiter.close();
