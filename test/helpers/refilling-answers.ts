import type { ManualClock } from '../../src/clock.js';
import type { AdaptiveRateLimiter } from '../../src/limiter/adaptive.js';
import type { Permit } from '../../src/limiter/types.js';
import { flush as tick } from './unhandled.js';
/**
 * One caller asking every `everyMs` through `limiter` for `units`; a server whose refilling bucket
 * lets `perMinute` units a minute through (holding at most `units`), each call answered at once: a
 * 200, or a 429 with Retry-After 1 s. The 429s and successes over the last `measureMs` of `runMs`.
 */
export async function against(
  limiter: AdaptiveRateLimiter,
  clock: ManualClock,
  perMinute: number,
  units: number,
  everyMs: number,
  runMs: number,
  measureMs: number,
) {
  let level = units;
  let last = clock.now();
  const counts = { ok: 0, throttled: 0 };
  const start = clock.now();
  const answer = (permit: Permit) => {
    const now = clock.now();
    level = Math.min(units, level + ((now - last) * perMinute) / 60_000);
    last = now;
    const counted = now - start >= runMs - measureMs;
    if (level >= units) {
      level -= units;
      if (counted) counts.ok++;
      permit.success();
    } else {
      if (counted) counts.throttled++;
      permit.throttled(1_000);
    }
  };
  for (let t = 0; t < runMs; t += everyMs) {
    limiter.acquire(units).then(answer, () => {});
    await tick();
    for (let s = 0; s < everyMs; s += 50) {
      clock.advance(50);
      await tick();
    }
  }
  const rate = limiter.snapshot().rate;
  limiter.close();
  return { ...counts, rate };
}
