// Run with NODE_DEBUG=adaptive-rate-limit (test/attack-observability-config.test.ts): a limiter at
// its floor throttled twice, each a cut that leaves the rate where it is.
import { ManualClock } from '../../src/clock.js';
import { AdaptiveRateLimiter } from '../../src/index.js';

const clock = new ManualClock();
const limiter = new AdaptiveRateLimiter({
  name: 'floor',
  clock,
  controller: 'aimd',
  initialUnitsPerMinute: 60,
  minUnitsPerMinute: 60,
});
for (const retryAfter of [undefined, 1_000]) {
  const permit = limiter.tryAcquire();
  if (permit === undefined) throw new Error('expected a grant after a minute');
  permit.throttled(retryAfter);
  clock.advance(60_000);
}
console.log(`cuts ${limiter.snapshot().cuts}`);
limiter.close();
