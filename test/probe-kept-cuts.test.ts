import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';

/**
 * A limiter with the probe controller (the default) on a manual clock, fed as a saturated sender
 * is: every 10 ms it takes every slot the pacer gives, and each answer comes back at once.
 */
function setup() {
  const clock = new ManualClock(0);
  const limiter = new AdaptiveRateLimiter({
    clock,
    controller: 'probe',
    initialUnitsPerMinute: 3_000,
    maxUnitsPerMinute: 6_000,
    random: () => 0,
  });
  const send = (ms: number, answer: (p: Permit) => void = (p) => p.success()) => {
    for (let t = 0; t < ms; t += 10) {
      clock.advance(10);
      for (let p = limiter.tryAcquire(); p !== undefined; p = limiter.tryAcquire()) answer(p);
    }
  };
  return { clock, limiter, send };
}

describe('the accepted rate after two Retry-After pauses in its window', () => {
  it('is read over the time neither pause took', () => {
    const { limiter, send } = setup();
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
    const sentRate = limiter.rate;
    throttled = false;
    send(10, once); // another, 2 s after the first: both pauses are in the 3 s window
    // What got through while the limiter sent, per minute: about its rate. Read over the whole
    // window less the second pause only, it would be a third lower.
    expect(limiter.snapshot().acceptedRate).toBeGreaterThan(0.9 * sentRate);
  });
});

describe('the probe after a long dropped quota', () => {
  it('remembers the ceiling before the drop over more cuts than the drop made, and holds short when the quota comes back', () => {
    const { clock, limiter, send } = setup();
    /** A strict leaky bucket of `quota` requests/min, burst 5, no Retry-After. */
    let quota = 3_000;
    let excess = 0;
    let at = 0;
    const server = (p: Permit) => {
      const now = clock.now();
      const next = Math.max(0, excess - ((now - at) * quota) / 60_000) + 1;
      if (next > 6) return p.throttled();
      excess = next;
      at = now;
      p.success();
    };
    send(30_000, server);
    const before = limiter.snapshot().cuts;
    expect(before).toBeGreaterThan(0);
    // Another client takes two thirds of the quota: the probe finds 1,000 a minute again and
    // again, and cuts more than 8 times.
    quota = 1_000;
    send(75_000, server);
    const cuts = limiter.snapshot().cuts - before;
    expect(cuts).toBeGreaterThan(8);
    expect(cuts).toBeLessThan(16);
    expect(limiter.rate).toBeLessThan(1_100);
    // The quota is back: 8 s later the probe has climbed past 1,200 a minute (the short hold, 4 s,
    // and a round or two). With only the last 8 cuts kept, all of them at 1,000 a minute, the hold
    // doubled as at a ceiling that had always been there, and it was still holding.
    quota = 3_000;
    send(8_000, server);
    expect(limiter.rate).toBeGreaterThan(1_200);
  });
});
