import { afterEach, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { LISTENER_THREW_WARNING } from '../src/limiter/listener-threw.js';

// A throw of the user's code the library reports as a process warning, where there is no
// process.emitWarning (a browser, through a bundler): the report must not be what throws.

const emitWarning = process.emitWarning;

afterEach(() => {
  process.emitWarning = emitWarning;
  vi.restoreAllMocks();
});

it('serves every waiter when a listener throws with no process.emitWarning, and says it on console.warn', async () => {
  // As a browser's: no process warnings.
  (process as { emitWarning?: unknown }).emitWarning = undefined;
  const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ name: 'browser', clock, initialUnitsPerMinute: 60 });
  try {
    await limiter.acquire(); // the idle credit spent: the next one queues
    limiter.on('acquired', () => {
      throw new Error('listener bug');
    });
    const states: string[] = [];
    limiter.acquire().then(
      () => states.push('granted'),
      (error: unknown) => states.push(`refused: ${String(error)}`),
    );
    // The grant is the timer's: a throw out of it left the waiter, and every one behind, unsettled.
    expect(() => clock.advance(1000)).not.toThrow();
    await Promise.resolve();
    expect(states).toEqual(['granted']);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]?.[0]).toMatchObject({ code: LISTENER_THREW_WARNING });
  } finally {
    limiter.close();
  }
});
