import type { Clock } from '../clock.js';
import { kOwes } from '../internal.js';
import type { RateLimiter } from '../limiter/types.js';
import type { LazySharedBudget } from './shared.js';

/** A shared budget of one partition: what its requests acquire from, its local limiter, its close. */
export type PartitionBudget = LazySharedBudget;

interface Entry {
  readonly budget: PartitionBudget;
  /** Which named limiter it partitions. */
  readonly named: string;
  usedAt: number;
  /** Requests of the HTTP adapters in progress through it. */
  inFlight: number;
}

/** Entries looked at, at most, to make room for one more: constant work per new partition. */
const SCAN = 16;

/**
 * The shared budgets of partitions (a named limiter with `shared`, partitioned): a budget per
 * partition, named after the partition in every process, least recently used first. Bounded as
 * the per-origin limiters are: at most `max` budgets; one idle for `idleTimeout` is closed (it
 * leaves the budget: its state, a pause included, stays in the store for the next one); to make
 * room, an idle one of the {@link SCAN} least recently used is closed, else the new partition has
 * no budget of its own (`undefined`: it shares the named limiter's).
 */
export class SharedPartitions {
  readonly #clock: Clock;
  readonly #max: number;
  readonly #idleTimeout: number;
  readonly #entries = new Map<string, Entry>();
  #sweptAt: number;

  constructor(clock: Clock, max: number, idleTimeout: number) {
    this.#clock = clock;
    this.#max = max;
    this.#idleTimeout = idleTimeout;
    this.#sweptAt = clock.now();
  }

  /** The budget of `key`, counted as a use, or `undefined`. */
  touch(key: string): PartitionBudget | undefined {
    const now = this.#clock.now();
    this.#sweep(now);
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    entry.usedAt = now;
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    return entry.budget;
  }

  /** Keeps `make()`'s budget for `key`, when there is room (made only then); else `undefined`. */
  add(key: string, named: string, make: () => PartitionBudget): PartitionBudget | undefined {
    if (!this.#makeRoom()) return undefined;
    const budget = make();
    this.#entries.set(key, { budget, named, usedAt: this.#clock.now(), inFlight: 0 });
    return budget;
  }

  /** Counts a request in progress through the budget of `key`; the returned function ends it (once). */
  hold(key: string, budget: RateLimiter): (() => void) | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined || entry.budget !== budget) return undefined;
    entry.inFlight++;
    // Held by the budget too: one that `replace` takes out is not closed under the request.
    const release = entry.budget.hold();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      entry.inFlight--;
      release();
    };
  }

  /** The budget of `key`; not a use. */
  get(key: string): PartitionBudget | undefined {
    return this.#entries.get(key)?.budget;
  }

  /** Which named limiter `key`'s budget partitions, if there is one. */
  namedOf(key: string): string | undefined {
    return this.#entries.get(key)?.named;
  }

  keys(): IterableIterator<string> {
    return this.#entries.keys();
  }

  /** Forgets the budgets of the named limiter `named`, not closed; returns them. */
  takeWhere(named: string): PartitionBudget[] {
    const taken: PartitionBudget[] = [];
    for (const [key, entry] of this.#entries) {
      if (entry.named !== named) continue;
      this.#entries.delete(key);
      taken.push(entry.budget);
    }
    return taken;
  }

  /** Closes and forgets the budgets of the named limiter `named` (every one, without `named`). */
  closeWhere(named?: string): void {
    for (const [key, entry] of this.#entries) {
      if (named !== undefined && entry.named !== named) continue;
      this.#entries.delete(key);
      void entry.budget.close().catch(() => undefined);
    }
  }

  #makeRoom(): boolean {
    if (this.#entries.size < this.#max) return true;
    let scanned = 0;
    for (const [key, entry] of this.#entries) {
      if (scanned++ >= SCAN) break;
      if (this.#idle(entry)) {
        this.#close(key, entry);
        return true;
      }
    }
    return false;
  }

  #sweep(now: number): void {
    if (now - this.#sweptAt < this.#idleTimeout / 10) return;
    this.#sweptAt = now;
    for (const [key, entry] of this.#entries) {
      if (now - entry.usedAt < this.#idleTimeout) break;
      if (this.#idle(entry)) this.#close(key, entry);
    }
  }

  /**
   * Nothing in flight or queued, and no debt (a pause is the store's: it outlives the member). A
   * budget that owes units (`kOwes`: a call used more than its bucket held, an LLM answer's tokens
   * above the estimate) is kept until it is paid back, as the registry keeps such a limiter:
   * closed, the partition's next budget would start with a full bucket and send at once what the
   * API would answer with a 429.
   */
  #idle(entry: Entry): boolean {
    const limiter = entry.budget.limiter;
    return (
      entry.inFlight === 0 && limiter !== undefined && limiter.snapshot().queued === 0 && !limiter[kOwes]()
    );
  }

  #close(key: string, entry: Entry): void {
    this.#entries.delete(key);
    void entry.budget.close().catch(() => undefined);
  }
}
