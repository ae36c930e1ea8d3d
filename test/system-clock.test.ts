import { afterEach, expect, it, vi } from 'vitest';
import { systemClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';

// The real clock where the global timers are not Node's: a browser's, a Worker's before its
// compatibility date gives it Node's timers (test/runtimes.test.ts runs such a Worker). Their
// setTimeout returns a number, with no unref().

afterEach(() => {
  vi.unstubAllGlobals();
});

/** The global timers as a browser's: setTimeout returns a number. */
function numberTimers(): void {
  const { setTimeout: nodeSetTimeout } = globalThis;
  vi.stubGlobal('setTimeout', (fn: () => void, ms?: number) => Number(nodeSetTimeout(fn, ms)));
}

it('arms a timer that need not keep the process alive with timers that return numbers', () => {
  numberTimers();
  const handle = systemClock.setTimeout(() => {}, 60_000);
  expect(typeof handle).toBe('number');
  systemClock.clearTimeout(handle);
});

it('pauses a limiter nobody waits on for a Retry-After with timers that return numbers', async () => {
  numberTimers();
  const limiter = new AdaptiveRateLimiter({ name: 'numbers', initialUnitsPerMinute: 600 });
  try {
    const permit = await limiter.acquire();
    // The end of the pause is the limiter's idle timer: it threw `handle.unref is not a function`.
    permit.throttled(60_000);
    expect(limiter.snapshot().pausedUntil).toBeDefined();
  } finally {
    limiter.close();
  }
});
