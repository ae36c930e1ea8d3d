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
 * What names a waiter from outside the queue by its sequence number (an adapter's `WaitCancel`):
 * the queue keeps `waitSeq` right when it renumbers its waiters, and lets go of `waitingIn` (when
 * it is the queue's line) once the waiter leaves, so that a later cancel by that number cannot
 * reach the waiter that has it by then.
 */
export interface SeqHolder {
  waitSeq: number;
  waitingIn: unknown;
}

/** A waiter's abort listener: tells the queue's owner which waiter, by its number now. */
class AbortWatch {
  seq: number;
  readonly signal: AbortSignal;
  readonly onAbort: (seq: number, reason: unknown) => void;

  constructor(seq: number, signal: AbortSignal, onAbort: (seq: number, reason: unknown) => void) {
    this.seq = seq;
    this.signal = signal;
    this.onAbort = onAbort;
  }

  handleEvent(): void {
    this.onAbort(this.seq, this.signal.reason);
  }
}

/**
 * The waiters of a line, first in first out, kept in flat arrays (a ring) instead of an object
 * each: a waiter's numbers (units, when it was queued, its deadline, ms) in one `Float64Array`,
 * its promise's resolve function in an array (see {@link rejectWith} for a rejection). A long
 * queue then holds only the caller's promise, its resolve function and the slots per waiter:
 * nothing else for the garbage collector to copy out of the young generation and mark, and no
 * boxed number per deadline.
 *
 * A waiter is named by its sequence number (`seq`, from 0, one per push); an abort marks it dead
 * in O(1) (its functions let go at once), and dead entries are dropped when they reach the head.
 * When the ring is full and at least half of it is dead (waiters that left behind a head that
 * waits long), the live ones are moved up together and numbered again from the head, instead of
 * the ring doubling: dead waiters cost no memory beyond the ring live ones need, and the abort
 * listeners and {@link SeqHolder}s it was given learn their new numbers. Otherwise the arrays
 * double when full, and are given back when the queue empties past {@link IDLE_CAPACITY}. The
 * abort listeners and the holders have arrays of their own, made at the first of each.
 */
export class WaiterQueue<T> {
  #nums: Float64Array | undefined;
  /** How each slot is settled; `undefined` for a dead or free slot. */
  #fns: (Settle<T> | undefined)[] = [];
  #mask = -1;
  /** Sequence number of the first entry (live or dead), and of the next push. */
  #head = 0;
  #tail = 0;
  /** The abort listener of each slot, to remove once the waiter is settled; made at the first. */
  #watches: (AbortWatch | undefined)[] | undefined;
  /** The holder of each slot's number (see {@link SeqHolder}); made at the first. */
  #holders: (SeqHolder | undefined)[] | undefined;
  /** What each slot's waiter is to the line's owner (see {@link tag}); made at the first. */
  #tags: unknown[] | undefined;
  /**
   * The waiters queued with a deadline earlier than one queued before them (a retry, with less of
   * its `maxWait` left, behind a first attempt): a min-heap of their deadlines and numbers, so the
   * line refuses each at its own deadline, not when it reaches the head. Empty while deadlines
   * only grow down the line (the usual case: one `maxWait`, queued in time order).
   */
  #early: number[] = [];
  /** The latest deadline queued since the queue was last empty. */
  #latest = Number.NEGATIVE_INFINITY;
  /** The line whose waiters these are: a holder's `waitingIn` let go when it is this. */
  readonly #line: unknown;
  /** Live waiters. */
  size = 0;

  /** Slots in the ring (live, dead and free): what it holds in memory. */
  get capacity(): number {
    return this.#mask + 1;
  }

  constructor(line?: unknown) {
    this.#line = line;
  }

  /** Queues a waiter; returns its sequence number. */
  push(units: number, enqueuedAt: number, deadline: number, resolve: Settle<T>): number {
    if (this.#tail - this.#head > this.#mask) {
      if (this.size * 2 <= this.#tail - this.#head && this.size < this.#mask) this.#compact();
      else this.#grow();
    }
    const seq = this.#tail++;
    const i = seq & this.#mask;
    const nums = this.#nums!;
    nums[i * NUMS] = units;
    nums[i * NUMS + 1] = enqueuedAt;
    nums[i * NUMS + 2] = deadline;
    this.#fns[i] = resolve;
    this.size++;
    if (deadline < this.#latest) this.#heapPush(deadline, seq);
    else this.#latest = deadline;
    return seq;
  }

  /**
   * The live waiter behind the head with the earliest deadline among those queued earlier than a
   * waiter before them (see `#early`), or -1: a waiter that may expire before the head does.
   * `head` is {@link first}'s answer when the caller has it.
   */
  earlyBehind(head = this.first()): number {
    const heap = this.#early;
    while (heap.length > 0) {
      const seq = heap[1]!;
      if (seq !== head && this.alive(seq)) return seq;
      this.#heapPop();
    }
    return -1;
  }

  /** Keeps `value` with waiter `seq` until it leaves: what it is to the line's owner. */
  tag(seq: number, value: unknown): void {
    this.#tags ??= new Array(this.#mask + 1).fill(undefined);
    this.#tags[seq & this.#mask] = value;
  }

  /** What {@link tag} kept with waiter `seq`. */
  tagOf(seq: number): unknown {
    return this.#tags?.[seq & this.#mask];
  }

  #heapPush(deadline: number, seq: number): void {
    const heap = this.#early;
    let i = heap.length / 2;
    heap.push(deadline, seq);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent * 2]! <= deadline) break;
      heap[i * 2] = heap[parent * 2]!;
      heap[i * 2 + 1] = heap[parent * 2 + 1]!;
      i = parent;
    }
    heap[i * 2] = deadline;
    heap[i * 2 + 1] = seq;
  }

  #heapPop(): void {
    const heap = this.#early;
    const seq = heap.pop()!;
    const deadline = heap.pop()!;
    const n = heap.length / 2;
    if (n === 0) return;
    let i = 0;
    for (;;) {
      let child = i * 2 + 1;
      if (child >= n) break;
      if (child + 1 < n && heap[(child + 1) * 2]! < heap[child * 2]!) child++;
      if (heap[child * 2]! >= deadline) break;
      heap[i * 2] = heap[child * 2]!;
      heap[i * 2 + 1] = heap[child * 2 + 1]!;
      i = child;
    }
    heap[i * 2] = deadline;
    heap[i * 2 + 1] = seq;
  }

  /**
   * Listens for an abort of waiter `seq`'s signal until it is settled: `onAbort` is called with
   * the waiter's number then (which may have changed since; see the class) and the signal's reason.
   */
  watch(seq: number, signal: AbortSignal, onAbort: (seq: number, reason: unknown) => void): void {
    const watch = new AbortWatch(seq, signal, onAbort);
    signal.addEventListener('abort', watch, { once: true });
    this.#watches ??= new Array(this.#mask + 1).fill(undefined);
    this.#watches[seq & this.#mask] = watch;
  }

  /** The holder of waiter `seq`'s number (see {@link hold}), if it has one. */
  holderOf(seq: number): SeqHolder | undefined {
    return this.#holders?.[seq & this.#mask];
  }

  /** Keeps `holder.waitSeq` naming waiter `seq` until it leaves (see {@link SeqHolder}). */
  hold(seq: number, holder: SeqHolder): void {
    holder.waitSeq = seq;
    this.#holders ??= new Array(this.#mask + 1).fill(undefined);
    this.#holders[seq & this.#mask] = holder;
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

  /** The sequence number of the first live waiter after `seq`, or -1. */
  next(seq: number): number {
    const fns = this.#fns;
    const mask = this.#mask;
    for (let i = seq + 1; i < this.#tail; i++) if (fns[i & mask] !== undefined) return i;
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
   * Takes live waiter `seq` out (the head, or any one for an abort): its function let go, its
   * abort listener removed and its holder let go. Read what it needs before.
   */
  remove(seq: number): void {
    const i = seq & this.#mask;
    this.#fns[i] = undefined;
    this.size--;
    const watches = this.#watches;
    const watch = watches?.[i];
    if (watch !== undefined) {
      watches![i] = undefined;
      watch.signal.removeEventListener('abort', watch);
    }
    const holders = this.#holders;
    const holder = holders?.[i];
    if (holder !== undefined) {
      holders![i] = undefined;
      if (holder.waitingIn === this.#line && holder.waitSeq === seq) holder.waitingIn = undefined;
    }
    if (this.#tags !== undefined) this.#tags[i] = undefined;
    if (seq === this.#head) this.#head++;
    if (this.size === 0) this.#empty();
  }

  /** No live waiter left: the slots are free, and a large ring is given back. */
  #empty(): void {
    this.#head = this.#tail;
    this.#latest = Number.NEGATIVE_INFINITY;
    if (this.#early.length > 0) this.#early = [];
    if (this.#mask >= IDLE_CAPACITY) {
      this.#nums = undefined;
      this.#fns = [];
      this.#watches = undefined;
      this.#holders = undefined;
      this.#tags = undefined;
      this.#mask = -1;
    }
  }

  /**
   * Moves the live waiters up behind the head, in order, each numbered again (head, head + 1,
   * ...), in place: a waiter's new number is at most its old one, so the slot it moves to held a
   * waiter already moved, or a dead one.
   */
  #compact(): void {
    const mask = this.#mask;
    const nums = this.#nums!;
    const fns = this.#fns;
    const watches = this.#watches;
    const holders = this.#holders;
    const tags = this.#tags;
    // The early waiters are found again under their new numbers.
    const early = this.#early.length > 0;
    if (early) this.#early = [];
    let latest = Number.NEGATIVE_INFINITY;
    let to = this.#head;
    for (let from = this.#head; from < this.#tail; from++) {
      const f = from & mask;
      if (fns[f] === undefined) continue;
      if (to !== from) {
        const t = to & mask;
        for (let k = 0; k < NUMS; k++) nums[t * NUMS + k] = nums[f * NUMS + k]!;
        fns[t] = fns[f];
        fns[f] = undefined;
        if (watches !== undefined) {
          const watch = watches[f];
          watches[t] = watch;
          watches[f] = undefined;
          if (watch !== undefined) watch.seq = to;
        }
        if (holders !== undefined) {
          const holder = holders[f];
          holders[t] = holder;
          holders[f] = undefined;
          if (holder !== undefined) holder.waitSeq = to;
        }
        if (tags !== undefined) {
          tags[t] = tags[f];
          tags[f] = undefined;
        }
      }
      if (early) {
        const deadline = nums[(to & mask) * NUMS + 2]!;
        if (deadline < latest) this.#heapPush(deadline, to);
        else latest = deadline;
      }
      to++;
    }
    this.#tail = to;
  }

  #grow(): void {
    const capacity = Math.max(FIRST_CAPACITY, (this.#mask + 1) * 2);
    const mask = capacity - 1;
    const nums = new Float64Array(capacity * NUMS);
    const fns: (Settle<T> | undefined)[] = new Array(capacity).fill(undefined);
    const oldNums = this.#nums;
    const oldWatches = this.#watches;
    const oldHolders = this.#holders;
    const oldTags = this.#tags;
    const watches = oldWatches && new Array<AbortWatch | undefined>(capacity).fill(undefined);
    const holders = oldHolders && new Array<SeqHolder | undefined>(capacity).fill(undefined);
    const tags = oldTags && new Array<unknown>(capacity).fill(undefined);
    for (let seq = this.#head; seq < this.#tail; seq++) {
      const from = seq & this.#mask;
      const to = seq & mask;
      for (let k = 0; k < NUMS; k++) nums[to * NUMS + k] = oldNums![from * NUMS + k]!;
      fns[to] = this.#fns[from];
      if (watches !== undefined) watches[to] = oldWatches![from];
      if (holders !== undefined) holders[to] = oldHolders![from];
      if (tags !== undefined) tags[to] = oldTags![from];
    }
    this.#nums = nums;
    this.#fns = fns;
    this.#watches = watches;
    this.#holders = holders;
    this.#tags = tags;
    this.#mask = mask;
  }
}
