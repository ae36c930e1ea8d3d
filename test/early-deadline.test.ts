import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateLimitRejectedError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { WaiterQueue } from '../src/limiter/waiter-queue.js';

// A waiter queued behind one with a later deadline (a retry, with less of its maxWait left,
// behind a first attempt) is refused at its own deadline, not when it reaches the head. Before,
// only the head expired: a pause that grew after the retry was queued held it past its maxWait,
// until the first attempt's deadline. Times on a ManualClock; no test asserts a duration.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** What a promise has settled to so far: 'waiting', 'granted', or the rejection's reason. */
function track(promise: Promise<unknown>) {
  const state: { now: string; error?: RateLimitRejectedError; at?: number } = { now: 'waiting' };
  promise.then(
    () => {
      state.now = 'granted';
    },
    (error: RateLimitRejectedError) => {
      state.now = error.reason ?? 'error';
      state.error = error;
    },
  );
  return state;
}

async function advance(clock: ManualClock, ms: number, step = 500) {
  for (let t = 0; t < ms; t += step) {
    clock.advance(Math.min(step, ms - t));
    await flush();
  }
}

/**
 * 600 requests a minute (one each 100 ms) and 6,000 tokens a minute in a bucket of 100, paused
 * for `pauseMs`; `acquire(name, tokens, options)` records each grant or refusal with its time.
 */
function budgeted(pauseMs: number) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({
    clock,
    slowStart: false,
    maxWait: 60_000,
    budgets: {
      requests: { initialUnitsPerMinute: 600 },
      tokens: { initialUnitsPerMinute: 6_000, burst: 'second' },
    },
  });
  limiter.pauseFor(pauseMs);
  const granted: [string, number][] = [];
  const acquire = (name: string, tokens: number, options: { waitedMs?: number; signal?: AbortSignal } = {}) =>
    limiter.acquire(1, { costs: { tokens }, ...options }).then(
      () => granted.push([name, clock.now()]),
      (error: RateLimitRejectedError) =>
        granted.push([`${name}: ${error.reason ?? error.message}`, clock.now()]),
    );
  return { clock, limiter, granted, acquire };
}

describe('a waiter whose deadline comes before the head’s', () => {
  it('is refused at its own deadline when a pause grows past it (the retry behind a first attempt)', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600, maxWait: 60_000 });
    limiter.pauseFor(30_000);
    const first = track(limiter.acquire()); // deadline 60 s
    const retry = track(limiter.acquire(1, { waitedMs: 25_000 })); // deadline 35 s
    // A 429 with Retry-After: 60 for a request sent before the pause: the pause reaches 61 s.
    await advance(clock, 1_000);
    limiter.pauseFor(60_000);
    await advance(clock, 33_500);
    expect(retry.now).toBe('waiting');
    expect(first.now).toBe('waiting');
    await advance(clock, 1_000);
    // Refused at 35 s, its maxWait over its two attempts, not at 60 s with the first attempt.
    expect(retry.now).toBe('max-wait');
    expect(retry.error?.message).toMatch(/waited 35000 ms of the 35000 ms it was given, maxWait is 60000 ms/);
    expect(first.now).toBe('waiting');
    await advance(clock, 25_000);
    expect(first.now).toBe('max-wait');
    limiter.close();
  });

  it('leaves the line in order: the head and the waiters after it are served as before', async () => {
    const clock = new ManualClock();
    // One a second, the bucket's unit taken: the line's turns come at 1, 2, 3, 4 and 5 s.
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60, maxWait: 60_000 });
    limiter.tryAcquire();
    const order: string[] = [];
    const acquire = (name: string, waitedMs?: number) =>
      limiter.acquire(1, { waitedMs }).then(
        () => order.push(name),
        (error: RateLimitRejectedError) => order.push(`${name}: ${error.reason}`),
      );
    acquire('a');
    acquire('b', 57_500); // 2.5 s left, its turn at 2 s
    acquire('c');
    acquire('d', 55_800); // 4.2 s left, its turn at 4 s
    acquire('e');
    // A pause to 3.5 s: the turns move to 3.5, 4.5 ... s, past b's and d's deadlines.
    limiter.pauseFor(3_500);
    await advance(clock, 6_000, 100);
    // b leaves at 2.5 s behind a, d at 4.2 s behind c; before, each left only once it was the
    // head (b after a was served, d after c).
    expect(order).toEqual(['b: max-wait', 'a', 'd: max-wait', 'c', 'e']);
    limiter.close();
  });

  it('takes its costs out of the budgets when it leaves from behind the head: the next waiter goes with its own', async () => {
    const { clock, limiter, granted, acquire } = budgeted(5_000);
    acquire('first', 100);
    acquire('retry', 100, { waitedMs: 50_000 }); // 10 s left
    acquire('third', 10);
    limiter.pauseFor(30_000); // a 429's Retry-After, after they were queued
    await advance(clock, 31_000, 100);
    // The retry left at 10 s. After the pause the first takes the 100 tokens, and the third
    // waits for its own 10 (100 ms), not for the retry's 100 (a second).
    expect(granted).toEqual([
      ['retry: max-wait', 10_000],
      ['first', 30_000],
      ['third', 30_100],
    ]);
    limiter.close();
  });
});

describe('a budgeted waiter whose signal the line cannot listen to', () => {
  it('takes its costs out of the budgets as it is refused: the next waiter goes with its own', async () => {
    const { clock, limiter, granted, acquire } = budgeted(5_000);
    // The budgets listen to it first; the line's listener, the second, throws.
    let listeners = 0;
    const signal = {
      aborted: false,
      addEventListener: () => {
        if (++listeners === 2) throw new Error('no second listener');
      },
      removeEventListener: () => {},
    } as unknown as AbortSignal;
    acquire('first', 100);
    acquire('odd', 100, { signal });
    acquire('third', 10);
    await flush();
    await advance(clock, 6_000, 100);
    // The third waits for its own 10 tokens (100 ms) after the first took the 100, not for the
    // 100 of the waiter that was never queued (a second).
    expect(granted).toEqual([
      ['odd: no second listener', 0],
      ['first', 5_000],
      ['third', 5_100],
    ]);
    limiter.close();
  });
});

describe('WaiterQueue: the early waiters behind the head', () => {
  it('finds the earliest deadline behind the head, by their numbers after a compaction', () => {
    const queue = new WaiterQueue<number>();
    const noop = () => {};
    // 16 slots: the head waits long, then waiters with falling deadlines.
    const head = queue.push(1, 0, 1_000, noop);
    const seqs = Array.from({ length: 15 }, (_, i) => queue.push(1, 0, 900 - i * 10, noop));
    expect(queue.deadline(queue.earlyBehind())).toBe(760);
    // Half of them leave (aborted): the next push compacts the ring and numbers them again.
    for (const seq of seqs.filter((_, i) => i % 2 === 1)) queue.remove(seq);
    queue.push(1, 0, 500, noop);
    expect(queue.deadline(queue.earlyBehind())).toBe(500);
    queue.remove(queue.earlyBehind());
    expect(queue.deadline(queue.earlyBehind())).toBe(760);
    expect(queue.first()).toBe(head);
  });

  it('has none while deadlines only grow down the line', () => {
    const queue = new WaiterQueue<number>();
    for (let i = 0; i < 40; i++) queue.push(1, i, 1_000 + i, () => {});
    expect(queue.earlyBehind()).toBe(-1);
  });
});
