import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { InvalidArgumentError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import type { Permit } from '../src/limiter/types.js';

// acquire's `signal` must be an AbortSignal. The AbortController itself (a common slip) was taken
// into the line before its listener failed: the caller got a bare TypeError, and its waiter stayed
// at the head of the line for good, so no later acquire was ever granted (an adaptive limiter), or
// its units stayed counted in the cycle (a fixed window). It is now refused before anything is
// queued, with InvalidArgumentError naming `signal`.

function granted(promise: Promise<Permit>) {
  const state = { done: false };
  promise.then(() => {
    state.done = true;
  });
  return state;
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("acquire's signal", () => {
  it.each<[string, unknown]>([
    ['the AbortController itself', new AbortController()],
    ['a string', 'abort'],
    ['a plain object', { aborted: false }],
  ])('an adaptive limiter refuses %s and serves the next waiter on time', async (_, signal) => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      initialUnitsPerMinute: 60,
      minUnitsPerMinute: 60,
      maxUnitsPerMinute: 60,
    });
    limiter.tryAcquire()?.success(); // the next unit is a second away: acquires wait
    const error = await limiter.acquire(1, { signal: signal as AbortSignal }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ method: 'acquire', argument: 'signal' });
    expect(limiter.snapshot().queued).toBe(0);

    const next = granted(limiter.acquire(1));
    clock.advance(1_000);
    await tick();
    expect(next.done).toBe(true);
    limiter.close();
  });

  it('a fixed window refuses the AbortController itself and keeps the cycle’s permits', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindowRateLimiter({
      limitForPeriod: 1,
      limitRefreshPeriod: 1_000,
      timeoutDuration: 5_000,
      clock,
    });
    limiter.tryAcquire()?.success();
    const error = await limiter
      .acquire(1, { signal: new AbortController() as unknown as AbortSignal })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ argument: 'signal' });

    // The next cycle's one permit is still there for the next waiter (not taken by the refused one).
    const next = granted(limiter.acquire(1));
    clock.advance(1_000);
    await tick();
    expect(next.done).toBe(true);
    limiter.close();
  });

  it('takes an AbortSignal, null and no signal as before', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 6e9, minUnitsPerMinute: 6e9 });
    for (const signal of [new AbortController().signal, null, undefined]) {
      (await limiter.acquire(1, { signal: signal as AbortSignal | undefined })).success();
    }
    limiter.close();
  });
});
