import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { rejectWith, WaiterQueue } from '../src/limiter/waiter-queue.js';

/** Lets resolved promises run; no time passes. */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Takes every live waiter out, head first; returns their units. */
function drainUnits(queue: WaiterQueue<number>): number[] {
  const out: number[] = [];
  for (let seq = queue.first(); seq !== -1; seq = queue.first()) {
    out.push(queue.units(seq));
    queue.remove(seq);
  }
  return out;
}

const noop = (): undefined => undefined;

describe('WaiterQueue', () => {
  it('keeps first-in first-out order across wrap-around and growth, with its numbers', () => {
    const queue = new WaiterQueue<number>();
    for (let i = 0; i < 10; i++) queue.push(i, 100 + i, 1000 + i, noop);
    const taken = [];
    for (let i = 0; i < 6; i++) {
      const seq = queue.first();
      taken.push([queue.units(seq), queue.enqueuedAt(seq), queue.deadline(seq)]);
      queue.remove(seq);
    }
    expect(taken[5]).toEqual([5, 105, 1005]);
    // 4 left in a ring of 16: these wrap around its end, then make it grow twice.
    for (let i = 10; i < 60; i++) queue.push(i, 100 + i, 1000 + i, noop);
    expect(queue.size).toBe(54);
    const seq = queue.first();
    expect([queue.units(seq), queue.enqueuedAt(seq), queue.deadline(seq)]).toEqual([6, 106, 1006]);
    expect(drainUnits(queue)).toEqual(Array.from({ length: 54 }, (_, i) => i + 6));
    expect(queue.size).toBe(0);
    expect(queue.first()).toBe(-1);
  });

  it('skips a waiter removed from the middle, and names it dead from then on', () => {
    const queue = new WaiterQueue<number>();
    const seqs = Array.from({ length: 40 }, (_, i) => queue.push(i, 0, 0, noop));
    for (const i of [0, 1, 7, 20, 39]) queue.remove(seqs[i]!);
    expect(queue.alive(seqs[7]!)).toBe(false);
    expect(queue.alive(seqs[8]!)).toBe(true);
    expect(queue.size).toBe(35);
    expect(drainUnits(queue)).toEqual(
      Array.from({ length: 40 }, (_, i) => i).filter((i) => ![0, 1, 7, 20, 39].includes(i)),
    );
    // An emptied queue numbers on from where it was: an old number stays dead after new pushes.
    queue.push(99, 0, 0, noop);
    expect(queue.alive(seqs[8]!)).toBe(false);
  });

  it('works again after a large queue emptied and gave its arrays back', () => {
    const queue = new WaiterQueue<number>();
    for (let i = 0; i < 5000; i++) queue.push(i, 0, i, noop);
    expect(drainUnits(queue)).toHaveLength(5000);
    for (let i = 0; i < 3; i++) queue.push(i + 1, 0, 0, noop);
    expect(drainUnits(queue)).toEqual([1, 2, 3]);
  });

  it('removes the abort listener of a waiter it takes out', () => {
    const queue = new WaiterQueue<number>();
    const controller = new AbortController();
    let aborted = 0;
    const seq = queue.push(1, 0, 0, noop);
    const onAbort = () => aborted++;
    queue.watch(seq, controller.signal, onAbort);
    queue.remove(seq);
    controller.abort();
    expect(aborted).toBe(0);
  });
});

describe('rejectWith', () => {
  it('rejects in the same call as a reject function: the handlers run in the order of the rejections', async () => {
    const order: string[] = [];
    let resolveA: (value: number) => void = noop;
    let rejectB: (error: unknown) => void = noop;
    const a = new Promise<number>((resolve) => {
      resolveA = resolve;
    });
    const b = new Promise<number>((_, reject) => {
      rejectB = reject;
    });
    a.catch((error: unknown) => order.push(`a ${String(error)}`));
    b.catch((error: unknown) => order.push(`b ${String(error)}`));
    rejectB('first');
    rejectWith(resolveA, 'second');
    await flush();
    expect(order).toEqual(['b first', 'a second']);
    await expect(a).rejects.toBe('second');
  });

  it('settles a promise once: a later rejection of a resolved waiter does nothing', async () => {
    let resolve: (value: number) => void = noop;
    const promise = new Promise<number>((r) => {
      resolve = r;
    });
    resolve(1);
    rejectWith(resolve, new Error('late'));
    await expect(promise).resolves.toBe(1);
  });
});

/** A limiter on a manual clock whose idle credit is spent: every acquire after it waits. */
function spentLimiter(initialUnitsPerMinute: number, queueLimit: number) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute, queueLimit, maxWait: 1e9 });
  while (limiter.tryAcquire() !== undefined);
  return { clock, limiter };
}

describe('a long line on a limiter', () => {
  it('grants 5,000 waiters in order with every third aborted, each aborted one rejected with its reason', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      initialUnitsPerMinute: 60_000,
      queueLimit: 10_000,
      maxWait: 1e9,
    });
    while (limiter.tryAcquire() !== undefined); // what idle time earned is taken: every acquire below waits
    const granted: number[] = [];
    const rejected: number[] = [];
    const controllers: AbortController[] = [];
    for (let i = 0; i < 5000; i++) {
      const controller = new AbortController();
      controllers.push(controller);
      limiter.acquire(1, { signal: controller.signal }).then(
        () => granted.push(i),
        (reason: unknown) => rejected.push(reason === `abort ${i}` ? i : -1),
      );
    }
    for (let i = 0; i < 5000; i += 3) controllers[i]?.abort(`abort ${i}`);
    expect(limiter.snapshot().queued).toBe(5000 - 1667);
    clock.advance(5000); // 1,000 a second
    await flush();
    expect(granted).toEqual(Array.from({ length: 5000 }, (_, i) => i).filter((i) => i % 3 !== 0));
    expect(rejected).toEqual(Array.from({ length: 1667 }, (_, k) => k * 3));
    expect(limiter.snapshot().queued).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it('behind a head held back, 20,000 callers that abort leave a small ring, and a late abort reaches its own waiter', async () => {
    const { clock, limiter } = spentLimiter(600, 1_000);
    limiter.pauseFor(60_000);
    const granted: number[] = [];
    const rejected: string[] = [];
    const keep = new Map<number, AbortController>();
    for (let i = 0; i < 20_000; i++) {
      const controller = new AbortController();
      limiter.acquire(1, { signal: controller.signal }).then(
        () => granted.push(i),
        (reason: unknown) => rejected.push(String(reason)),
      );
      if (i % 2_000 === 0) keep.set(i, controller);
      else controller.abort(`abort ${i}`);
    }
    expect(limiter.snapshot().queued).toBe(10);
    // One of the waiters kept, numbered again several times since it came: its abort reaches it alone.
    keep.get(10_000)!.abort('late');
    await flush();
    expect(rejected.filter((r) => r === 'late')).toHaveLength(1);
    expect(rejected).toHaveLength(20_000 - 10 + 1);
    clock.advance(61_000);
    await flush();
    expect(granted).toEqual([0, 2_000, 4_000, 6_000, 8_000, 12_000, 14_000, 16_000, 18_000]);
  });

  it('rejects every waiter of a closed limiter, each with the typed error', async () => {
    const { limiter } = spentLimiter(60, 3000);
    const results = Array.from({ length: 3000 }, () =>
      limiter.acquire().then(
        () => 'granted',
        (error: unknown) => (error as { reason?: string }).reason,
      ),
    );
    limiter.close();
    expect(new Set(await Promise.all(results))).toEqual(new Set(['closed']));
  });
});

describe('ManualClock', () => {
  it('runs timers by due time, then creation, after others were cleared', () => {
    const clock = new ManualClock();
    const ran: string[] = [];
    const a = clock.setTimeout(() => ran.push('a'), 10);
    clock.setTimeout(() => ran.push('b'), 10);
    clock.setTimeout(() => ran.push('c'), 5);
    clock.setTimeout(() => ran.push('d'), 10);
    clock.clearTimeout(a);
    clock.clearTimeout(a); // twice: nothing
    expect(clock.pendingTimers).toBe(3);
    clock.advance(10);
    expect(ran).toEqual(['c', 'b', 'd']);
    expect(clock.pendingTimers).toBe(0);
  });

  it('ignores the clearing of a timer that already ran, and of a foreign handle', () => {
    const clock = new ManualClock();
    const ran: string[] = [];
    const a = clock.setTimeout(() => ran.push('a'), 1);
    clock.advance(1);
    const b = clock.setTimeout(() => ran.push('b'), 1);
    clock.clearTimeout(a);
    clock.clearTimeout(undefined);
    clock.clearTimeout({});
    expect(clock.pendingTimers).toBe(1);
    clock.advance(1);
    expect(ran).toEqual(['a', 'b']);
    expect(b).toBeDefined();
  });
});

describe('WaiterQueue: waiters that left behind a head that stays', () => {
  it('100,000 waiters that left behind one head keep a ring as small as the live ones need, in order', () => {
    const queue = new WaiterQueue<number>('line');
    queue.push(0, 0, 0, noop);
    const kept: { waitSeq: number; waitingIn: unknown }[] = [];
    for (let i = 1; i <= 100_000; i++) {
      const seq = queue.push(i, 0, 0, noop);
      if (i % 1000 !== 0) queue.remove(seq);
      else {
        const holder = { waitSeq: -1, waitingIn: 'line' as unknown };
        queue.hold(seq, holder);
        kept.push(holder);
      }
    }
    // 101 live waiters: a ring of 256 at most (it doubled for 131,072 before).
    expect(queue.capacity).toBeLessThanOrEqual(256);
    expect(kept.map((h) => queue.units(h.waitSeq))).toEqual(
      Array.from({ length: 100 }, (_, k) => (k + 1) * 1000),
    );
    expect(drainUnits(queue)).toEqual(Array.from({ length: 101 }, (_, k) => k * 1000));
  });

  it('an abort after the waiters were numbered again reaches its own waiter, and a holder keeps its number', () => {
    const queue = new WaiterQueue<number>('line');
    const removed: number[] = [];
    const onAbort = (seq: number) => {
      if (!queue.alive(seq)) return;
      removed.push(queue.units(seq));
      queue.remove(seq);
    };
    queue.push(-1, 0, 0, noop); // the head, which stays
    const controllers = new Map<number, AbortController>();
    const holders = new Map<number, { waitSeq: number; waitingIn: unknown }>();
    for (let i = 0; i < 15; i++) {
      const seq = queue.push(i, 0, 0, noop);
      if (i % 2 === 0) {
        const controller = new AbortController();
        controllers.set(i, controller);
        queue.watch(seq, controller.signal, onAbort);
      } else {
        const holder = { waitSeq: -1, waitingIn: 'line' as unknown };
        holders.set(i, holder);
        queue.hold(seq, holder);
      }
    }
    // 12 of the 15 leave from the middle: the ring of 16 is full, three quarters dead.
    for (const i of [0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14]) {
      const controller = controllers.get(i);
      if (controller !== undefined) controller.abort();
      else onAbort(holders.get(i)!.waitSeq);
    }
    expect(removed).toEqual([0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14]);
    // Left: the head, 4 (a signal), 8 (a signal), 12 (a signal). The next push numbers them again.
    const seq = queue.push(100, 0, 0, noop);
    expect(queue.capacity).toBe(16);
    expect(seq).toBeLessThan(16);
    // A holder that left let go of its line: a cancel by its old number reaches no one.
    expect(holders.get(1)!.waitingIn).toBeUndefined();
    controllers.get(8)!.abort();
    expect(removed.at(-1)).toBe(8);
    expect(drainUnits(queue)).toEqual([-1, 4, 12, 100]);
  });

  it('a holder that waits through the renumbering cancels its own waiter', () => {
    const queue = new WaiterQueue<number>('line');
    queue.push(-1, 0, 0, noop);
    const seqs = Array.from({ length: 14 }, (_, i) => queue.push(i, 0, 0, noop));
    const holder = { waitSeq: -1, waitingIn: 'line' as unknown };
    queue.hold(queue.push(99, 0, 0, noop), holder);
    for (const seq of seqs) queue.remove(seq);
    const before = holder.waitSeq;
    queue.push(7, 0, 0, noop); // full and mostly dead: numbered again
    expect(holder.waitSeq).toBeLessThan(before);
    expect(queue.units(holder.waitSeq)).toBe(99);
    queue.remove(holder.waitSeq);
    expect(holder.waitingIn).toBeUndefined();
    expect(drainUnits(queue)).toEqual([-1, 7]);
  });
});
