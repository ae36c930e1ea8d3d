import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { InvalidArgumentError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { LISTENER_THREW_WARNING } from '../src/limiter/listener-threw.js';

// What production does to a limiter around its requests: a listener with a bug, one app-wide
// abort signal passed to every call, a caller that gives up during a pause, a cost given to the
// wrong budget. Each case failed before its fix.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

const warnings: Error[] = [];
const onWarning = (w: Error): void => {
  if ((w as Error & { code?: string }).code === LISTENER_THREW_WARNING) warnings.push(w);
};
process.on('warning', onWarning);
afterEach(() => {
  warnings.length = 0;
});

/** The state of a promise, read after the microtasks ran. */
function track(promise: Promise<unknown>) {
  const state = { settled: 'pending' as 'pending' | 'granted' | 'refused' };
  promise.then(
    () => {
      state.settled = 'granted';
    },
    () => {
      state.settled = 'refused';
    },
  );
  return state;
}

describe('a listener that throws', () => {
  it('out of a grant: every waiter is still served, and the throw is said as a warning', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60 });
    await limiter.acquire(); // the idle credit spent: the next ones queue
    let calls = 0;
    limiter.on('acquired', () => {
      if (calls++ === 0) throw new Error('a metrics bug');
    });
    const waiting = [track(limiter.acquire()), track(limiter.acquire())];
    clock.advance(1_000);
    clock.advance(1_000);
    await flush();
    expect(waiting.map((w) => w.settled)).toEqual(['granted', 'granted']);
    expect(warnings.map((w) => w.message).join()).toContain('"acquired" event threw (Error: a metrics bug)');
  });

  it('the listeners after the one that threw are still told (the metrics behind an app listener)', async () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock(), initialUnitsPerMinute: 60_000 });
    const told: string[] = [];
    limiter.on('acquired', () => {
      told.push('first');
      throw new Error('an app bug');
    });
    limiter.on('acquired', () => told.push('second'));
    limiter.once('acquired', () => told.push('once'));
    await limiter.acquire();
    await limiter.acquire();
    expect(told).toEqual(['first', 'second', 'once', 'first', 'second']);
    await flush();
    expect(warnings.filter((w) => w.message.includes('an app bug'))).toHaveLength(2);
  });

  it('out of close(): every waiter is refused', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60 });
    await limiter.acquire();
    limiter.on('rejected', () => {
      throw new Error('a logging bug');
    });
    const waiting = [track(limiter.acquire()), track(limiter.acquire()), track(limiter.acquire())];
    limiter.close();
    await flush();
    expect(waiting.map((w) => w.settled)).toEqual(['refused', 'refused', 'refused']);
  });
});

describe('an announced quota whose reset passes while requests wait', () => {
  it('settles each waiter once, keeps its counts, and serves the next request', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600, maxWait: 5_000 });
    // An answer announces 1 left until a reset 3 s away: a ceiling until then.
    (await limiter.acquire()).success(undefined, [{ remaining: 1, resetMs: 3_000 }]);
    const waiting = [track(limiter.acquire()), track(limiter.acquire())];
    limiter.pauseFor(20_000); // another answer's Retry-After: the line wakes at a waiter's deadline
    clock.advance(6_000); // the reset passes inside that wake's drain
    await flush();
    expect(waiting.map((w) => w.settled)).toEqual(['refused', 'refused']); // past maxWait, each once
    expect(limiter.snapshot()).toMatchObject({ queued: 0, queuedUnits: 0 });
    clock.advance(30_000); // the pause is over
    const next = track(limiter.acquire());
    clock.advance(1_000);
    await flush();
    expect(next.settled).toBe('granted');
  });
});

describe('one abort signal for every call (an app-wide shutdown)', () => {
  it('is left with no listener once the queued calls are served, with several budgets too', async () => {
    for (const budgets of [undefined, { requests: { initialUnitsPerMinute: 60 }, tokens: {} }]) {
      const clock = new ManualClock();
      const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60, budgets });
      const shutdown = new AbortController();
      const costs = budgets === undefined ? undefined : { tokens: 1 };
      const calls = Array.from({ length: 20 }, () =>
        track(limiter.acquire(1, { signal: shutdown.signal, costs })),
      );
      for (let i = 0; i < 25; i++) clock.advance(1_000);
      await flush();
      expect(calls.every((c) => c.settled === 'granted')).toBe(true);
      expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
    }
  });
});

describe('a caller that gives up during a pause', () => {
  it('leaves no timer that holds the process open: an idle limiter never does', async () => {
    class Recording extends ManualClock {
      readonly alive = new Map<unknown, boolean>();
      override setTimeout(fn: () => void, ms: number, keepAlive?: boolean): unknown {
        const handle: unknown = super.setTimeout(() => {
          this.alive.delete(handle);
          fn();
        }, ms);
        this.alive.set(handle, keepAlive === true);
        return handle;
      }
      override clearTimeout(handle: unknown): void {
        this.alive.delete(handle);
        super.clearTimeout(handle);
      }
      keepsAlive(): boolean {
        return [...this.alive.values()].some(Boolean);
      }
    }
    const clock = new Recording();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600 });
    limiter.pauseFor(30_000);
    const abort = new AbortController();
    const call = track(limiter.acquire(1, { signal: abort.signal }));
    expect(clock.keepsAlive()).toBe(true); // a waiter is served before the process may exit
    abort.abort();
    await flush();
    expect(call.settled).toBe('refused');
    expect(clock.keepsAlive()).toBe(false);
  });
});

describe('costs', () => {
  it('refuses a cost named for the first budget, which draws the units argument (it was taken as 1 unit)', () => {
    const limiter = new AdaptiveRateLimiter({
      clock: new ManualClock(),
      budgets: { requests: { initialUnitsPerMinute: 600 }, tokens: {} },
    });
    expect(() => limiter.tryAcquire(1, { requests: 50, tokens: 1 })).toThrow(InvalidArgumentError);
    expect(() => limiter.tryAcquire(1, { requests: 50, tokens: 1 })).toThrow(/costs\.requests/);
  });
});
