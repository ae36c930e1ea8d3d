import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { ConcurrencyGate } from '../src/http/concurrency.js';
import { kHeldDeadlines } from '../src/internal.js';

// A maxConcurrent gate kept the deadline of every waiter that left (aborted, or given its slot)
// until the timer or the head of the line reached it: a long line of aborted waits at a full gate
// stayed in memory until maxWait, and the timer stayed armed for a waiter gone. Time is a manual
// clock throughout.

/** A ManualClock that tells when each of its armed timers is due. */
class DueClock extends ManualClock {
  readonly #due = new Map<unknown, number>();

  override setTimeout(fn: () => void, ms: number): unknown {
    const handle = super.setTimeout(() => {
      this.#due.delete(handle);
      fn();
    }, ms);
    this.#due.set(handle, this.now() + Math.max(0, ms));
    return handle;
  }

  override clearTimeout(handle: unknown): void {
    this.#due.delete(handle);
    super.clearTimeout(handle);
  }

  /** When the armed timers are due, earliest first. */
  get due(): number[] {
    return [...this.#due.values()].sort((a, b) => a - b);
  }
}

const bound = (clock: ManualClock, leftMs: number) => ({
  clock,
  leftMs,
  refuse: () => new RateLimitRejectedError('max-wait', 'test', 'too long'),
});

describe('a maxConcurrent gate’s deadlines', () => {
  it('holds none for a thousand waits aborted behind a waiter at a full gate, and one timer, for that waiter', async () => {
    const clock = new DueClock();
    const gate = new ConcurrencyGate(1);
    expect(gate.tryEnter()).toBe(true);
    const head = gate.enter(undefined, bound(clock, 1_000)).catch((e: unknown) => e);
    const reason = new Error('gave up');
    const aborted: Promise<unknown>[] = [];
    for (let i = 0; i < 1_000; i++) {
      const controller = new AbortController();
      aborted.push(gate.enter(controller.signal, bound(clock, 1_000)).catch((e: unknown) => e));
      controller.abort(reason);
    }
    expect(new Set(await Promise.all(aborted))).toEqual(new Set([reason]));

    expect(gate.waiting).toBe(1);
    expect(gate[kHeldDeadlines]).toBe(1);
    expect(clock.due).toEqual([1_000]);
    clock.advance(1_000);
    expect(await head).toMatchObject({ reason: 'max-wait' });
    expect(gate[kHeldDeadlines]).toBe(0);
    expect(clock.due).toEqual([]);
    gate.leave();
  });

  it('moves the timer to the next waiter when the earliest is aborted or given its slot, and stops it when none is left', async () => {
    const clock = new DueClock();
    const gate = new ConcurrencyGate(1);
    expect(gate.tryEnter()).toBe(true);
    const abortA = new AbortController();
    const a = gate.enter(abortA.signal, bound(clock, 1_000)).catch((e: unknown) => e); // due 1000
    clock.advance(500);
    const b = gate.enter(undefined, bound(clock, 1_000)); // due 1500
    clock.advance(200);
    const abortC = new AbortController();
    const c = gate.enter(abortC.signal, bound(clock, 1_000)).catch((e: unknown) => e); // due 1700
    // A retry, with less of maxWait left: its deadline goes between a's and b's.
    const d = gate.enter(undefined, bound(clock, 600)).catch((e: unknown) => e); // due 1300
    expect(clock.due).toEqual([1_000]);
    expect(gate[kHeldDeadlines]).toBe(4);

    abortA.abort(new Error('a gave up'));
    expect(await a).toMatchObject({ message: 'a gave up' });
    expect(clock.due).toEqual([1_300]);

    clock.advance(600); // 1300: d's time is up
    expect(await d).toMatchObject({ reason: 'max-wait' });
    expect(clock.due).toEqual([1_500]);

    gate.leave(); // b gets the slot
    const held = await b;
    expect(held.waitedMs).toBe(800);
    expect(clock.due).toEqual([1_700]);
    expect(gate[kHeldDeadlines]).toBe(1);

    abortC.abort(new Error('c gave up'));
    expect(await c).toMatchObject({ message: 'c gave up' });
    expect(clock.due).toEqual([]);
    expect(clock.pendingTimers).toBe(0);
    expect(gate[kHeldDeadlines]).toBe(0);
    held.release();
  });
});
