import type { Clock } from '../clock.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';

interface OriginEntry {
  readonly limiter: AdaptiveRateLimiter;
  /** When `limiterFor` last returned it (ms on the registry's clock). */
  usedAt: number;
}

/** What an {@link OriginPool} is made with. */
export interface OriginPoolOptions {
  /** The registry's time source. */
  clock: Clock;
  /** The most per-origin limiters kept (an integer >= 1): `RegistryOptions.maxOriginLimiters`. */
  maxOriginLimiters: number;
  /** Idle time (ms) after which a per-origin limiter is dropped: `RegistryOptions.idleTimeout`. */
  idleTimeout: number;
  /** Told of each limiter dropped as idle, over the cap or by {@link OriginPool.dropWhere}. */
  onDrop: (origin: string, limiter: AdaptiveRateLimiter) => void;
  /** Whether something outside the limiter still uses it (an adapter's requests in flight). */
  isBusy?: (limiter: AdaptiveRateLimiter) => boolean;
}

/**
 * The registry's per-origin limiters, least recently used first (a use moves its entry to the
 * end), and their eviction: a limiter idle for `idleTimeout` is dropped, checked lazily on a use
 * at most every `idleTimeout / 10` ms (no timers), and the least recently used idle ones are
 * dropped while there are more than `maxOriginLimiters`. A dropped limiter is not closed.
 */
export class OriginPool {
  readonly #clock: Clock;
  readonly #maxOriginLimiters: number;
  readonly #idleTimeout: number;
  readonly #onDrop: (origin: string, limiter: AdaptiveRateLimiter) => void;
  readonly #isBusy: (limiter: AdaptiveRateLimiter) => boolean;
  /** Per-origin limiters, least recently used first (a use moves its entry to the end). */
  readonly #perOrigin = new Map<string, OriginEntry>();
  /** The key last moved to the end of `#perOrigin`: the last entry while it is still there. */
  #newest: string | undefined;
  #sweptAt: number;

  constructor(options: OriginPoolOptions) {
    this.#clock = options.clock;
    this.#maxOriginLimiters = options.maxOriginLimiters;
    this.#idleTimeout = options.idleTimeout;
    this.#onDrop = options.onDrop;
    this.#isBusy = options.isBusy ?? (() => false);
    this.#sweptAt = this.#clock.now();
  }

  /**
   * The per-origin limiter of the normalized origin `key`, counted as a use (it is not dropped as
   * idle), or `undefined` when the pool holds none for it.
   */
  touch(key: string): AdaptiveRateLimiter | undefined {
    const now = this.#clock.now();
    this.#sweep(now);
    const found = this.#perOrigin.get(key);
    if (found === undefined) return undefined;
    found.usedAt = now;
    if (this.#newest !== key) {
      // Moved to the end (most recent); already there when it was the last one used.
      this.#perOrigin.delete(key);
      this.#perOrigin.set(key, found);
      this.#newest = key;
    }
    return found.limiter;
  }

  /** Keeps `limiter` for `key` as the most recently used; then call {@link trim}. */
  add(key: string, limiter: AdaptiveRateLimiter): void {
    this.#perOrigin.set(key, { limiter, usedAt: this.#clock.now() });
    this.#newest = key;
  }

  /** Whether the pool holds a limiter for `key`. */
  has(key: string): boolean {
    return this.#perOrigin.has(key);
  }

  /** The limiter of `key`; does not count as a use. */
  get(key: string): AdaptiveRateLimiter | undefined {
    return this.#perOrigin.get(key)?.limiter;
  }

  /** Forgets the limiter of `key` (not closed, not told to `onDrop`). */
  delete(key: string): boolean {
    return this.#perOrigin.delete(key);
  }

  /** The origins, least recently used first. */
  keys(): IterableIterator<string> {
    return this.#perOrigin.keys();
  }

  /** The limiters, least recently used first. */
  *limiters(): IterableIterator<AdaptiveRateLimiter> {
    for (const entry of this.#perOrigin.values()) yield entry.limiter;
  }

  /** Drops the limiters of the origins `test` accepts, busy or not. */
  dropWhere(test: (origin: string) => boolean): void {
    for (const [origin, found] of this.#perOrigin) {
      if (test(origin)) this.#drop(origin, found);
    }
  }

  /** Drops the least recently used idle per-origin limiters while there are more than the cap. */
  trim(keep: string): void {
    for (const [origin, entry] of this.#perOrigin) {
      if (this.#perOrigin.size <= this.#maxOriginLimiters) return;
      if (origin !== keep && this.#idle(entry.limiter)) this.#drop(origin, entry);
    }
  }

  /** Drops per-origin limiters idle for `idleTimeout`; runs at most every `idleTimeout / 10` ms. */
  #sweep(now: number): void {
    if (now - this.#sweptAt < this.#idleTimeout / 10) return;
    this.#sweptAt = now;
    for (const [origin, entry] of this.#perOrigin) {
      if (now - entry.usedAt < this.#idleTimeout) break; // LRU order: the rest were used later
      if (this.#idle(entry.limiter)) this.#drop(origin, entry);
    }
  }

  #idle(limiter: AdaptiveRateLimiter): boolean {
    return isIdle(limiter) && !this.#isBusy(limiter);
  }

  #drop(origin: string, entry: OriginEntry): void {
    this.#perOrigin.delete(origin);
    this.#onDrop(origin, entry.limiter);
  }
}

/** Nothing queued and no pause running: dropping it loses nothing but its learned rate. */
function isIdle(limiter: AdaptiveRateLimiter): boolean {
  const snapshot = limiter.snapshot();
  return snapshot.queued === 0 && snapshot.pausedUntil === undefined;
}
