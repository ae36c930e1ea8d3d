/** How a waiter is settled: its promise's resolve function. */
export type Resolve<T> = (value: T) => void;

/**
 * Rejects the promise of `resolve` with `error` at once, as its reject function would: a
 * resolution whose `then` cannot be read rejects the promise with what the read threw, in the
 * same call (ECMAScript, Promise Resolve Functions, steps 9-10). So a waiter keeps only its
 * resolve function, one closure fewer per queued call.
 */
export function rejectWith(resolve: Resolve<never>, error: unknown): void {
  resolve({
    // biome-ignore lint/suspicious/noThenProperty: a `then` that throws is the point: it rejects the promise.
    get then(): never {
      throw error;
    },
  } as never);
}

/**
 * A waiter told by calls instead of a promise (an adapter's request, which then holds nothing
 * per waiter but its place in the line).
 */
export interface Waiter<T> {
  granted(value: T): void;
  refused(error: unknown): void;
}

/** How a queued waiter is settled: its promise's resolve function, or its calls. */
export type Settle<T> = Resolve<T> | Waiter<T>;

/** Settles `waiter` with `value`. */
export function grantTo<T>(waiter: Settle<T>, value: T): void {
  if (typeof waiter === 'function') waiter(value);
  else waiter.granted(value);
}

/** Refuses `waiter` with `error`. */
export function refuseTo<T>(waiter: Settle<T>, error: unknown): void {
  if (typeof waiter === 'function') rejectWith(waiter, error);
  else waiter.refused(error);
}

/** Slots made at the first push. */
const FIRST_CAPACITY = 16;
/** An empty queue larger than this gives its arrays back (a burst of waiters is not kept for ever). */
const IDLE_CAPACITY = 1024;
/** Numbers per waiter in {@link WaiterQueue}'s flat array: units, enqueued at, deadline. */
const NUMS = 3;

/**
 * The waiters of a line, first in first out, kept in flat arrays (a ring) instead of an object
 * each: a waiter's numbers (units, when it was queued, its deadline, ms) in one `Float64Array`,
 * its promise's resolve function in an array (see {@link rejectWith} for a rejection). A long
 * queue then holds only the caller's promise, its resolve function and the slots per waiter:
 * nothing else for the garbage collector to copy out of the young generation and mark, and no
 * boxed number per deadline.
 *
 * A waiter is named by its sequence number (`seq`, from 0, one per push, never reused); an abort
 * marks it dead in O(1) (its functions let go at once), and dead entries are dropped when they
 * reach the head. The arrays double when full and are given back when the queue empties past
 * {@link IDLE_CAPACITY}. The abort listeners have arrays of their own, made at the first signal.
 */
export class WaiterQueue<T> {
  #nums: Float64Array | undefined;
  /** How each slot is settled; `undefined` for a dead or free slot. */
  #fns: (Settle<T> | undefined)[] = [];
  #mask = -1;
  /** Sequence number of the first entry (live or dead), and of the next push. */
  #head = 0;
  #tail = 0;
  /**
   * The signal and abort listener of each slot (stride 2), to remove once the waiter is settled;
   * made at the first waiter with a signal.
   */
  #watches: (AbortSignal | (() => void) | undefined)[] | undefined;
  /** Live waiters. */
  size = 0;

  /** Queues a waiter; returns its sequence number. */
  push(units: number, enqueuedAt: number, deadline: number, resolve: Settle<T>): number {
    if (this.#tail - this.#head > this.#mask) this.#grow();
    const seq = this.#tail++;
    const i = seq & this.#mask;
    const nums = this.#nums!;
    nums[i * NUMS] = units;
    nums[i * NUMS + 1] = enqueuedAt;
    nums[i * NUMS + 2] = deadline;
    this.#fns[i] = resolve;
    this.size++;
    return seq;
  }

  /** Listens for an abort of waiter `seq`'s signal until it is settled. */
  watch(seq: number, signal: AbortSignal, onAbort: () => void): void {
    signal.addEventListener('abort', onAbort, { once: true });
    this.#watches ??= new Array((this.#mask + 1) * 2).fill(undefined);
    const i = (seq & this.#mask) * 2;
    this.#watches[i] = signal;
    this.#watches[i + 1] = onAbort;
  }

  /** The sequence number of the first live waiter (dropping dead ones on the way), or -1. */
  first(): number {
    const fns = this.#fns;
    const mask = this.#mask;
    while (this.#head < this.#tail) {
      if (fns[this.#head & mask] !== undefined) return this.#head;
      this.#head++;
    }
    return -1;
  }

  /** Whether waiter `seq` is queued and alive. */
  alive(seq: number): boolean {
    return seq >= this.#head && seq < this.#tail && this.#fns[seq & this.#mask] !== undefined;
  }

  units(seq: number): number {
    return this.#nums![(seq & this.#mask) * NUMS]!;
  }

  enqueuedAt(seq: number): number {
    return this.#nums![(seq & this.#mask) * NUMS + 1]!;
  }

  deadline(seq: number): number {
    return this.#nums![(seq & this.#mask) * NUMS + 2]!;
  }

  resolver(seq: number): Settle<T> {
    return this.#fns[seq & this.#mask]!;
  }

  /**
   * Takes live waiter `seq` out (the head, or any one for an abort): its function let go and its
   * abort listener removed. Read what it needs before.
   */
  remove(seq: number): void {
    this.#fns[seq & this.#mask] = undefined;
    this.size--;
    const watches = this.#watches;
    if (watches !== undefined) {
      const i = (seq & this.#mask) * 2;
      const signal = watches[i] as AbortSignal | undefined;
      if (signal !== undefined) {
        const onAbort = watches[i + 1] as () => void;
        watches[i] = undefined;
        watches[i + 1] = undefined;
        signal.removeEventListener('abort', onAbort);
      }
    }
    if (seq === this.#head) this.#head++;
    if (this.size === 0) this.#empty();
  }

  /** No live waiter left: the slots are free, and a large ring is given back. */
  #empty(): void {
    this.#head = this.#tail;
    if (this.#mask >= IDLE_CAPACITY) {
      this.#nums = undefined;
      this.#fns = [];
      this.#watches = undefined;
      this.#mask = -1;
    }
  }

  #grow(): void {
    const capacity = Math.max(FIRST_CAPACITY, (this.#mask + 1) * 2);
    const mask = capacity - 1;
    const nums = new Float64Array(capacity * NUMS);
    const fns: (Settle<T> | undefined)[] = new Array(capacity).fill(undefined);
    const oldNums = this.#nums;
    const oldWatches = this.#watches;
    const watches =
      oldWatches && new Array<AbortSignal | (() => void) | undefined>(capacity * 2).fill(undefined);
    for (let seq = this.#head; seq < this.#tail; seq++) {
      const from = seq & this.#mask;
      const to = seq & mask;
      for (let k = 0; k < NUMS; k++) nums[to * NUMS + k] = oldNums![from * NUMS + k]!;
      fns[to] = this.#fns[from];
      if (watches !== undefined) {
        watches[to * 2] = oldWatches![from * 2];
        watches[to * 2 + 1] = oldWatches![from * 2 + 1];
      }
    }
    this.#nums = nums;
    this.#fns = fns;
    this.#watches = watches;
    this.#mask = mask;
  }
}
