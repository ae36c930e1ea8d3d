import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';

// Waiters that abort behind a head that waits (a Retry-After pause) leave the line at once, and
// must not stay in memory until the head is served: callers with a timeout (an LLM client's
// `AbortSignal.timeout`) abort thousands of waits during one pause. A limiter of several budgets
// kept each aborted waiter's entry, with its AbortSignal (about 1.9 KiB each), until the head
// passed it. The signals are watched through WeakRefs and collected with V8's own gc.

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

async function collected(refs: WeakRef<object>[]): Promise<number> {
  for (let i = 0; i < 3; i++) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    gc();
  }
  return refs.filter((ref) => ref.deref() === undefined).length;
}

describe('waiters aborted behind a head that waits', () => {
  it.each([
    ['one budget', false],
    ['several budgets', true],
  ] as const)('%s: their signals are not kept', async (_, budgets) => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      slowStart: false,
      maxWait: 60_000,
      ...(budgets
        ? { budgets: { requests: { initialUnitsPerMinute: 60 }, tokens: { initialUnitsPerMinute: 6_000 } } }
        : { initialUnitsPerMinute: 60 }),
    });
    const costs = budgets ? { costs: { tokens: 1 } } : {};
    expect(limiter.tryAcquire()).toBeDefined();
    limiter.pauseFor(20_000);
    const head = limiter.acquire(1, costs).catch((e: unknown) => e);
    // One reason for all: an AbortError made per abort holds its controller in its stack trace.
    const reason = new Error('gave up');
    const refs: WeakRef<object>[] = [];
    const aborted: Promise<unknown>[] = [];
    for (let i = 0; i < 500; i++) {
      const controller = new AbortController();
      refs.push(new WeakRef(controller.signal));
      aborted.push(limiter.acquire(1, { signal: controller.signal, ...costs }).catch((e: unknown) => e));
      controller.abort(reason);
    }
    await Promise.all(aborted);
    expect(limiter.snapshot().queued).toBe(1); // the head still waits
    // Nearly all: a kept entry keeps every one of them, while V8 may still hold the last few
    // (the loop's frame; on Node 24, 2 of 500 were left once).
    expect(await collected(refs)).toBeGreaterThanOrEqual(refs.length - 10);
    // The head is served in its turn.
    clock.advance(20_000);
    expect(await head).toMatchObject({ units: 1 });
    limiter.close();
  });

  it('several budgets: the live waiters among the aborted ones are served in order, with their costs', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      slowStart: false,
      maxWait: 60_000,
      budgets: { requests: { initialUnitsPerMinute: 6_000 }, tokens: { initialUnitsPerMinute: 600_000 } },
    });
    expect(limiter.tryAcquire(1, { tokens: 1 })).toBeDefined();
    limiter.pauseFor(1_000);
    const served: number[] = [];
    const live: Promise<unknown>[] = [];
    const reason = new Error('gave up');
    for (let i = 0; i < 100; i++) {
      live.push(limiter.acquire(1, { costs: { tokens: 10 } }).then(() => served.push(i)));
      for (let k = 0; k < 2; k++) {
        const controller = new AbortController();
        const aborted = limiter.acquire(1, { signal: controller.signal, costs: { tokens: 10 } });
        controller.abort(reason);
        await expect(aborted).rejects.toBe(reason);
      }
    }
    expect(limiter.snapshot().queued).toBe(100);
    for (let t = 0; t < 40 && served.length < 100; t++) {
      clock.advance(1_000);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    await Promise.all(live);
    expect(served).toEqual([...Array(100).keys()]);
    expect(limiter.snapshot().queued).toBe(0);
    limiter.close();
  });
});
