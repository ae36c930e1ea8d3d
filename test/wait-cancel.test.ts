import { describe, expect, it } from 'vitest';
import { type AttemptPlan, runAttempts } from '../src/attempt-loop.js';
import { ManualClock } from '../src/clock.js';
import { kWaitCancel } from '../src/internal.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AcquireOptions, Permit } from '../src/limiter/types.js';
import { QUEUED, type WaitCancel } from '../src/limiter/waiting-line.js';

/** Lets resolved promises run; no time passes. */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** 60 units/min, paced: one grant a second, the first at once. */
function setup(budgets = false) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({
    clock,
    slowStart: false,
    initialUnitsPerMinute: 60,
    ...(budgets
      ? {
          budgets: {
            requests: { initialUnitsPerMinute: 60 },
            tokens: { initialUnitsPerMinute: 6_000, burst: 'second' },
          },
        }
      : {}),
  });
  return { clock, limiter };
}

function cancellable(cancel: WaitCancel, costs?: Record<string, number>): AcquireOptions {
  return { costs, [kWaitCancel]: cancel } as AcquireOptions;
}

function newCancel(): WaitCancel {
  return { waitingIn: undefined, waitSeq: 0 };
}

describe('an acquire cancelled without a signal (the interceptor’s waits)', () => {
  it('takes a queued waiter out with its units and rejects it with the reason, as an abort would', async () => {
    const { clock, limiter } = setup();
    expect(limiter.tryAcquire()).toBeDefined();
    const cancel = newCancel();
    const first = limiter.acquire(1, cancellable(cancel));
    const second = limiter.acquire();
    expect(limiter.snapshot()).toMatchObject({ queued: 2, queuedUnits: 2 });
    expect(cancel.waitingIn).toBeDefined();

    const reason = new Error('caller went away');
    cancel.waitingIn?.cancel(cancel.waitSeq, reason);

    await expect(first).rejects.toBe(reason);
    expect(limiter.snapshot()).toMatchObject({ queued: 1, queuedUnits: 1 });
    // The next in line takes the freed turn.
    clock.advance(1_000);
    await expect(second).resolves.toMatchObject({ units: 1 });
  });

  it('does nothing once the waiter has been served, nor to the waiter after it', async () => {
    const { clock, limiter } = setup();
    expect(limiter.tryAcquire()).toBeDefined();
    const cancel = newCancel();
    const served = limiter.acquire(1, cancellable(cancel));
    const next = limiter.acquire();
    clock.advance(1_000);
    const permit = await served;
    expect(permit.units).toBe(1);

    cancel.waitingIn?.cancel(cancel.waitSeq, new Error('late'));

    expect(limiter.snapshot()).toMatchObject({ queued: 1, queuedUnits: 1 });
    clock.advance(1_000);
    await expect(next).resolves.toMatchObject({ units: 1 });
  });

  it('leaves the cancel untouched for an acquire granted at once', async () => {
    const { limiter } = setup();
    const cancel = newCancel();
    await limiter.acquire(1, cancellable(cancel));
    expect(cancel.waitingIn).toBeUndefined();
  });

  it('returns the costs of a cancelled waiter to the other budgets too', async () => {
    const { clock, limiter } = setup(true);
    expect(limiter.tryAcquire(1, { tokens: 10 })).toBeDefined();
    const cancel = newCancel();
    const big = limiter.acquire(1, cancellable(cancel, { tokens: 90 }));
    const small = limiter.acquire(1, { costs: { tokens: 10 } });
    expect(limiter.snapshot().queued).toBe(2);

    cancel.waitingIn?.cancel(cancel.waitSeq, new Error('gone'));

    await expect(big).rejects.toThrow('gone');
    expect(limiter.snapshot()).toMatchObject({ queued: 1, queuedUnits: 1 });
    clock.advance(1_000);
    await expect(small).resolves.toMatchObject({ units: 1 });
  });

  it('the attempt loop rejects at once with the abort reason a cancel carries, taking no units', async () => {
    const { limiter } = setup();
    const reason = new Error('aborted before the wait');
    let sent = 0;
    const plan: AttemptPlan<number> = {
      limiter,
      units: 1,
      maxAttempts: 1,
      waitCancel: { waitingIn: undefined, waitSeq: 0, abortReason: reason },
      send: async () => ++sent,
      classify: () => ({ kind: 'success' }),
    };
    const before = limiter.snapshot().tokens;

    await expect(runAttempts(plan)).rejects.toBe(reason);
    await flush();
    expect(sent).toBe(0);
    expect(limiter.snapshot().tokens).toBe(before);
  });

  it('the attempt loop tells its limiter the cancel of each wait, and a cancel ends the wait', async () => {
    const { limiter } = setup();
    expect(limiter.tryAcquire()).toBeDefined();
    const waitCancel = { waitingIn: undefined, waitSeq: 0, abortReason: undefined as unknown };
    let sent = 0;
    const run = runAttempts<number>({
      limiter,
      units: 1,
      maxAttempts: 1,
      waitCancel,
      send: async () => ++sent,
      classify: () => ({ kind: 'success' }),
    });
    await flush();
    expect(limiter.snapshot().queued).toBe(1);
    const reason = new Error('aborted while waiting');
    (waitCancel.waitingIn as WaitCancel['waitingIn'])?.cancel(waitCancel.waitSeq, reason);

    await expect(run).rejects.toBe(reason);
    expect(sent).toBe(0);
    expect(limiter.snapshot()).toMatchObject({ queued: 0, queuedUnits: 0 });
  });

  describe('told by calls instead of a promise', () => {
    /** A waiter that records what it is told. */
    function recorder() {
      const told: { granted: Permit[]; refused: unknown[] } = { granted: [], refused: [] };
      const waiter: WaitCancel = {
        waitingIn: undefined,
        waitSeq: 0,
        granted: (permit) => told.granted.push(permit),
        refused: (error) => told.refused.push(error),
      };
      return { told, waiter };
    }

    it('returns QUEUED for a queued waiter and calls granted when it is served', () => {
      const { clock, limiter } = setup();
      expect(limiter.tryAcquire()).toBeDefined();
      const { told, waiter } = recorder();

      expect(limiter.acquire(1, cancellable(waiter))).toBe(QUEUED);
      expect(limiter.snapshot().queued).toBe(1);
      clock.advance(500);
      expect(told.granted).toHaveLength(0);
      clock.advance(500);

      expect(told.granted).toHaveLength(1);
      expect(told.granted[0]?.units).toBe(1);
      expect(told.granted[0]?.waitedMs).toBeGreaterThan(500);
      expect(told.refused).toHaveLength(0);
      expect(limiter.snapshot().queued).toBe(0);
    });

    it('calls refused with the reason of a cancel, and with the error of an expired wait or a close', () => {
      const { clock, limiter } = setup();
      limiter.update({ maxWait: 2_500 });
      const permit = limiter.tryAcquire();
      const cancelled = recorder();
      const expired = recorder();
      const closed = recorder();
      limiter.acquire(1, cancellable(cancelled.waiter));
      const reason = new Error('gone');
      cancelled.waiter.waitingIn?.cancel(cancelled.waiter.waitSeq, reason);
      expect(cancelled.told.refused).toEqual([reason]);

      limiter.acquire(1, cancellable(expired.waiter));
      clock.advance(500);
      limiter.acquire(1, cancellable(closed.waiter));
      expect(limiter.snapshot().queued).toBe(2);
      // A 429 pauses the limiter past the first waiter's deadline (2.5 s).
      permit?.throttled(10_000);
      clock.advance(2_000);
      expect(expired.told.refused[0]).toMatchObject({ reason: 'max-wait' });
      limiter.close();
      expect(closed.told.refused[0]).toMatchObject({ reason: 'closed' });
      expect([cancelled, expired, closed].map(({ told }) => told.granted.length)).toEqual([0, 0, 0]);
    });

    it('returns the promise of an acquire that is not queued (granted or refused at once)', async () => {
      const { limiter } = setup();
      const { told, waiter } = recorder();
      const granted = limiter.acquire(1, cancellable(waiter));
      expect(granted).not.toBe(QUEUED);
      await expect(granted).resolves.toMatchObject({ units: 1 });
      limiter.close();
      await expect(limiter.acquire(1, cancellable(waiter))).rejects.toMatchObject({ reason: 'closed' });
      expect(told).toEqual({ granted: [], refused: [] });
    });
  });
});
