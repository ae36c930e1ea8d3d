import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';

/**
 * A limiter with the probe controller (the default) on a manual clock, fed as a saturated sender
 * is: every 10 ms it takes every slot the pacer gives, and each answer comes back at once. From
 * 6,000 requests/min (100 a second): above 3,000/min, where a cut reads its window less every
 * pause in it.
 */
function setup() {
  const clock = new ManualClock(0);
  const limiter = new AdaptiveRateLimiter({
    clock,
    controller: 'probe',
    initialUnitsPerMinute: 6_000,
    maxUnitsPerMinute: 12_000,
    random: () => 0,
  });
  const cuts: { from: number; to: number }[] = [];
  limiter.on('decreased', (e) => cuts.push(e));
  const send = (ms: number, answer: (p: Permit) => void = (p) => p.success()) => {
    for (let t = 0; t < ms; t += 10) {
      clock.advance(10);
      for (let p = limiter.tryAcquire(); p !== undefined; p = limiter.tryAcquire()) answer(p);
    }
  };
  return { limiter, cuts, send };
}

describe('the accepted rate after two Retry-After pauses in its window, at many requests a second', () => {
  it('is read over the time neither pause took: the second cut drains at about the rate, not a third lower', () => {
    const { limiter, cuts, send } = setup();
    send(3_000);
    let throttled = false;
    const once = (p: Permit) => {
      if (throttled) return p.success();
      throttled = true;
      p.throttled(1_000);
    };
    send(10, once); // a 429 with Retry-After: 1
    send(1_000); // the pause
    send(990);
    expect(cuts).toHaveLength(1);
    const sentRate = limiter.rate;
    expect(sentRate).toBeGreaterThan(3_000);
    throttled = false;
    send(10, once); // another, 2 s after the first: both pauses are in the 3 s window
    expect(cuts).toHaveLength(2);
    // What got through while the limiter sent, per minute: about its rate, and the cut drains at
    // 0.9 x that. Read over the whole window less the second pause only, it would be a third lower.
    expect(cuts[1]!.to).toBeGreaterThan(0.8 * sentRate);
  });
});
