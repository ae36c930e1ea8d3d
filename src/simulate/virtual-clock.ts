import type { Clock } from '../clock.js';

interface VirtualTimer {
  /** Due time, whole ms on the virtual clock. */
  readonly at: number;
  /** Creation order: timers due at the same ms run in the order they were set. */
  readonly seq: number;
  readonly fn: () => void;
  cancelled: boolean;
}

export interface RunOptions {
  /**
   * Pieces of work that are running in promise callbacks (not parked on a timer). When given,
   * the clock lets microtasks run after each instant, one microtask turn at a time, until this
   * returns 0: fast, and exact as long as every piece of work is counted. When omitted, it
   * waits for a macrotask (`setImmediate`) after each instant instead: slow but always safe.
   */
  busy?: () => number;
  /**
   * Asked after each instant, once its work is done, with the virtual time (ms): a promise makes
   * the run wait for it (a live view paces the run on a wall clock, pauses it, or rejects to stop
   * it); `undefined` goes on at once. Only the quiet moment between two instants is offered, so a
   * paced run gives the same numbers as one that is not.
   */
  pace?: (now: number) => Promise<void> | undefined;
}

/** Microtask turns one instant may take before the run is declared stuck (a bookkeeping bug). */
const MAX_TURNS = 100_000;

/**
 * A discrete-event clock for the simulator. Time stands still until {@link runUntil} moves it
 * to the next due timer; no real time passes. Like Node's timers it works in whole
 * milliseconds: a timer is due at `now + ceil(ms)` (a delay of 0 runs at the same instant, after
 * the timers already due). Timers live in a binary heap ordered by due time, then creation; a
 * cleared timer is marked and skipped when it reaches the top.
 *
 * After the timers of one instant have run, the promise callbacks they started (the limiter's
 * waiters, the attempt loop) run too before time moves on: see {@link RunOptions.busy}.
 */
export class VirtualClock implements Clock {
  #now: number;
  #seq = 0;
  #heap: VirtualTimer[] = [];
  #live = 0;
  /** Timers run since creation. */
  timersRun = 0;

  constructor(start = 0) {
    this.#now = Math.ceil(start);
  }

  now(): number {
    return this.#now;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const delay = ms > 0 ? Math.ceil(ms) : 0;
    const timer: VirtualTimer = { at: this.#now + delay, seq: this.#seq++, fn, cancelled: false };
    this.#push(timer);
    this.#live++;
    return timer;
  }

  clearTimeout(handle: unknown): void {
    const timer = handle as VirtualTimer | undefined;
    if (timer === undefined || timer === null || timer.cancelled) return;
    timer.cancelled = true;
    this.#live--;
  }

  /** Timers armed and not yet run or cleared. */
  get pendingTimers(): number {
    return this.#live;
  }

  /**
   * Runs every timer due up to `end` (ms), instant by instant, letting promise callbacks settle
   * after each instant; then sets the time to `end`. Resolves when done.
   */
  async runUntil(end: number, options: RunOptions = {}): Promise<void> {
    const { busy, pace } = options;
    const heap = this.#heap;
    for (;;) {
      const top = this.#peek();
      if (top === undefined || top.at > end) break;
      const instant = top.at;
      this.#now = instant;
      // Every timer due now, including those set with a delay of 0 while these run.
      for (let timer = this.#peek(); timer !== undefined && timer.at === instant; timer = this.#peek()) {
        this.#pop();
        timer.cancelled = true;
        this.#live--;
        this.timersRun++;
        timer.fn();
      }
      if (busy === undefined) {
        await new Promise<void>((resolve) => setImmediate(resolve));
      } else {
        for (let turns = 0; busy() > 0; turns++) {
          if (turns > MAX_TURNS) {
            throw new Error(
              `VirtualClock: work still busy after ${MAX_TURNS} microtask turns at ${instant} ms`,
            );
          }
          await undefined;
        }
      }
      const wait = pace?.(instant);
      if (wait !== undefined) await wait;
    }
    if (end > this.#now && Number.isFinite(end)) this.#now = end;
    // Drop cancelled timers left on top so that the heap does not keep them.
    while (heap.length > 0 && heap[0]!.cancelled) this.#pop();
  }

  #peek(): VirtualTimer | undefined {
    const heap = this.#heap;
    while (heap.length > 0) {
      const top = heap[0]!;
      if (!top.cancelled) return top;
      this.#pop();
    }
    return undefined;
  }

  #push(timer: VirtualTimer): void {
    const heap = this.#heap;
    let i = heap.length;
    heap.push(timer);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = heap[parent]!;
      if (p.at < timer.at || (p.at === timer.at && p.seq < timer.seq)) break;
      heap[i] = p;
      i = parent;
    }
    heap[i] = timer;
  }

  #pop(): void {
    const heap = this.#heap;
    const last = heap.pop()!;
    const n = heap.length;
    if (n === 0) return;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      let child = left;
      let c = heap[left]!;
      if (right < n) {
        const r = heap[right]!;
        if (r.at < c.at || (r.at === c.at && r.seq < c.seq)) {
          child = right;
          c = r;
        }
      }
      if (last.at < c.at || (last.at === c.at && last.seq < c.seq)) break;
      heap[i] = c;
      i = child;
    }
    heap[i] = last;
  }
}
