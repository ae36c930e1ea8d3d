import type { Clock } from '../clock.js';
import { kOwes } from '../internal.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';

interface OriginEntry {
  readonly limiter: AdaptiveRateLimiter;
  /** What the limiter is for: an origin's, or a partition's of an origin or of a named limiter. */
  readonly owner: PoolOwner;
  /** When `limiterFor` last returned it (ms on the registry's clock). */
  usedAt: number;
  /** Requests of the HTTP adapters in progress through it ({@link OriginPool.hold}). */
  inFlight: number;
  /** The partition that uses an origin's own limiter: the first one seen ({@link OriginPool.claim}). */
  claim?: string;
}

/**
 * Whose limiter a pool entry is: an origin's (`origin`, no `partition`), a partition of an origin
 * made from `default` (`origin` and `partition`), or a partition of a named limiter (`named`
 * and `partition`).
 */
export interface PoolOwner {
  readonly origin?: string;
  readonly named?: string;
  /** The partition's short id. */
  readonly partition?: string;
}

/**
 * A pause kept for a key whose limiter was dropped ({@link OriginPool.takePause}): its end while it
 * runs, and the partition that had claimed the origin's limiter ({@link OriginPool.claim}).
 */
export interface PauseRecord {
  readonly until: number | undefined;
  readonly claim: string | undefined;
}

/** What an {@link OriginPool} is made with. */
export interface OriginPoolOptions {
  /** The registry's time source. */
  clock: Clock;
  /** The most per-origin limiters kept (an integer >= 1): `RegistryOptions.maxOriginLimiters`. */
  maxOriginLimiters: number;
  /** The most pauses kept for origins without a limiter: `RegistryOptions.maxPausedOrigins`. */
  maxPausedOrigins: number;
  /** Idle time (ms) after which a per-origin limiter is dropped: `RegistryOptions.idleTimeout`. */
  idleTimeout: number;
  /** Told of each limiter dropped as idle, to make room, or by {@link OriginPool.dropWhere}. */
  onDrop: (key: string, limiter: AdaptiveRateLimiter, owner: PoolOwner) => void;
  /** Whether something outside the limiter still uses it (an adapter's maxConcurrent gate). */
  isBusy?: (limiter: AdaptiveRateLimiter) => boolean;
}

/**
 * Entries looked at, at most, to make room for one more limiter: the work per new origin stays
 * constant however many limiters are busy or paused.
 */
const SCAN = 16;

/**
 * The registry's per-origin limiters, least recently used first (a use moves its entry to the
 * end), and their eviction. A limiter idle for `idleTimeout` is dropped, checked lazily on a use at
 * most every `idleTimeout / 10` ms (no timers). Room for a new origin's limiter is made by looking
 * at most {@link SCAN} of the least recently used: an idle one is dropped; one whose only state is
 * a pause is dropped, closed (which frees its pause timer) and its pause kept as a small record
 * (the origin and the pause's end), which a limiter made later for the origin starts with; a busy one (requests queued, in flight, or in
 * an adapter's gate) is moved to the end. An idle limiter dropped is not closed.
 */
export class OriginPool {
  readonly #clock: Clock;
  readonly #maxOriginLimiters: number;
  readonly #maxPausedOrigins: number;
  readonly #idleTimeout: number;
  readonly #onDrop: (key: string, limiter: AdaptiveRateLimiter, owner: PoolOwner) => void;
  readonly #isBusy: (limiter: AdaptiveRateLimiter) => boolean;
  /** Per-origin limiters, least recently used first (a use moves its entry to the end). */
  readonly #perOrigin = new Map<string, OriginEntry>();
  /** Pauses of origins whose limiter was dropped: origin to the pause's end (ms on the clock), oldest first. */
  readonly #paused = new Map<string, number>();
  /**
   * The partition that had claimed the origin's limiter, of the records in `#paused` that have
   * one: its next limiter keeps the claim, so the pause stays with that partition.
   */
  readonly #pausedClaims = new Map<string, string>();
  /** The key last moved to the end of `#perOrigin`: the last entry while it is still there. */
  #newest: string | undefined;
  #sweptAt: number;

  constructor(options: OriginPoolOptions) {
    this.#clock = options.clock;
    this.#maxOriginLimiters = options.maxOriginLimiters;
    this.#maxPausedOrigins = options.maxPausedOrigins;
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
    if (this.#newest !== key) this.#moveToEnd(key, found);
    return found.limiter;
  }

  /**
   * Makes room for one more limiter, looking at {@link SCAN} limiters at most; `false` when
   * there is none: every limiter looked at is busy, or paused with the pause records full. The
   * pool may hold more than `maxOriginLimiters` (a limiter made in a pause record's place when
   * there was no room, see {@link takePause}): room is made only once it holds fewer, so limiters
   * and records together stay within `maxOriginLimiters + maxPausedOrigins`.
   */
  makeRoom(): boolean {
    if (this.#perOrigin.size < this.#maxOriginLimiters) return true;
    const now = this.#clock.now();
    /** Whether a pause record can be added: asked at the first paused limiter, and after each record. */
    let recordRoom: boolean | undefined;
    let scanned = 0;
    for (const [origin, entry] of this.#perOrigin) {
      if (scanned++ >= SCAN) break;
      const state = this.#stateOf(entry);
      if (state === 'idle') {
        this.#drop(origin, entry);
        if (this.#perOrigin.size < this.#maxOriginLimiters) return true;
        continue;
      }
      if (state !== 'busy') recordRoom ??= this.#roomForRecord(now);
      if (state !== 'busy' && recordRoom === true) {
        this.#paused.set(origin, state);
        if (entry.claim !== undefined) this.#pausedClaims.set(origin, entry.claim);
        this.#drop(origin, entry);
        // Nothing uses it (nothing queued or in flight), and its pause lives on in the record:
        // closed, so that its pause timer does not keep it in memory until the pause ends.
        entry.limiter.close();
        if (this.#perOrigin.size < this.#maxOriginLimiters) return true;
        recordRoom = undefined;
        continue;
      }
      // Busy, or a pause with no room to keep it: looked at again after the others, as used now
      // (the idle sweep reads the order as the order of use: one moved behind without it kept an
      // idle limiter past idleTimeout ahead of it).
      entry.usedAt = now;
      this.#moveToEnd(origin, entry);
    }
    return false;
  }

  /**
   * Keeps `limiter` for `key` as the most recently used, claimed by the partition `claim` (a
   * record's, see {@link takePause}); call {@link makeRoom} first.
   */
  add(key: string, limiter: AdaptiveRateLimiter, owner: PoolOwner = { origin: key }, claim?: string): void {
    const entry: OriginEntry = { limiter, owner, usedAt: this.#clock.now(), inFlight: 0 };
    if (claim !== undefined) entry.claim = claim;
    this.#perOrigin.set(key, entry);
    this.#newest = key;
  }

  /**
   * The pause kept for `key` when its limiter was dropped: its end if it is still running, and
   * the partition that had claimed that limiter; the record is removed (the caller gives both to
   * a new limiter, which it makes even when {@link makeRoom} finds no room: the limiter takes the
   * record's place, so limiters and records together stay within both bounds).
   */
  takePause(key: string): PauseRecord | undefined {
    const until = this.#paused.get(key);
    if (until === undefined) return undefined;
    this.#paused.delete(key);
    const claim = this.#pausedClaims.get(key);
    this.#pausedClaims.delete(key);
    return { until: until > this.#clock.now() ? until : undefined, claim };
  }

  /**
   * Puts back a record {@link takePause} took, when no limiter was made for `key` after all (the
   * user's `partitionName` threw as it was named): its pause stays for the key's next limiter.
   */
  putBackPause(key: string, record: PauseRecord): void {
    if (record.until === undefined || this.#perOrigin.has(key)) return;
    this.#paused.set(key, record.until);
    if (record.claim !== undefined) this.#pausedClaims.set(key, record.claim);
  }

  /**
   * Keeps a pause until `until` for `key`, which has no limiter of its own here: a 429 its
   * server answered through an overflow limiter. Its next limiter starts with it (see
   * {@link takePause}), so the pause is not lost when the key leaves the overflow limiter.
   * Within `maxPausedOrigins`, as a dropped limiter's pause is.
   */
  keepPause(key: string, until: number): void {
    if (this.#perOrigin.has(key)) return;
    const had = this.#paused.get(key);
    if (had !== undefined) {
      if (until > had) this.#paused.set(key, until);
      return;
    }
    if (this.#roomForRecord(this.#clock.now())) this.#paused.set(key, until);
  }

  /** Whether a running pause is kept for `key` (see {@link takePause}); the record stays. */
  pausedNow(key: string): boolean {
    const until = this.#paused.get(key);
    return until !== undefined && until > this.#clock.now();
  }

  /**
   * Counts a request in progress through the limiter of `key` (when the pool holds `limiter` for
   * it): that limiter is not dropped until the returned function is called (once).
   */
  hold(key: string, limiter: AdaptiveRateLimiter): () => void {
    const entry = this.#perOrigin.get(key);
    if (entry === undefined || entry.limiter !== limiter) return () => {};
    entry.inFlight++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      entry.inFlight--;
    };
  }

  /** Whether the pool holds a limiter for `key`. */
  has(key: string): boolean {
    return this.#perOrigin.has(key);
  }

  /** The limiter of `key`; does not count as a use. */
  get(key: string): AdaptiveRateLimiter | undefined {
    return this.#perOrigin.get(key)?.limiter;
  }

  /**
   * The partition that uses the limiter of `key` (an origin's) as its own: the one given when none
   * did yet; `undefined` when the pool holds no limiter for `key`.
   */
  claim(key: string, partition: string): string | undefined {
    const entry = this.#perOrigin.get(key);
    if (entry === undefined) return undefined;
    entry.claim ??= partition;
    return entry.claim;
  }

  /** Whose limiter `key` holds, if it holds one. */
  ownerOf(key: string): PoolOwner | undefined {
    return this.#perOrigin.get(key)?.owner;
  }

  /** Forgets the limiter of `key` and any pause kept for it (not closed, not told to `onDrop`). */
  delete(key: string): boolean {
    const paused = this.#paused.delete(key);
    this.#pausedClaims.delete(key);
    return this.#perOrigin.delete(key) || paused;
  }

  /** The origins, least recently used first. */
  keys(): IterableIterator<string> {
    return this.#perOrigin.keys();
  }

  /** The limiters, least recently used first. */
  *limiters(): IterableIterator<AdaptiveRateLimiter> {
    for (const entry of this.#perOrigin.values()) yield entry.limiter;
  }

  /** Pauses kept for origins without a limiter. */
  get pausedOrigins(): number {
    return this.#paused.size;
  }

  /**
   * Drops the limiters (busy or not) whose owner `test` accepts, and the kept pauses of the keys
   * `testKey` accepts; returns the limiters dropped.
   */
  dropWhere(test: (owner: PoolOwner) => boolean, testKey: (key: string) => boolean): AdaptiveRateLimiter[] {
    const dropped: AdaptiveRateLimiter[] = [];
    for (const [key, found] of this.#perOrigin) {
      if (test(found.owner)) {
        this.#drop(key, found);
        dropped.push(found.limiter);
      }
    }
    for (const key of this.#paused.keys()) {
      if (!testKey(key)) continue;
      this.#paused.delete(key);
      this.#pausedClaims.delete(key);
    }
    return dropped;
  }

  /** Drops per-origin limiters idle for `idleTimeout`; runs at most every `idleTimeout / 10` ms. */
  #sweep(now: number): void {
    if (now - this.#sweptAt < this.#idleTimeout / 10) return;
    this.#sweptAt = now;
    for (const [origin, entry] of this.#perOrigin) {
      if (now - entry.usedAt < this.#idleTimeout) break; // LRU order: the rest were used later
      if (this.#stateOf(entry) === 'idle') this.#drop(origin, entry);
    }
  }

  /**
   * `busy` (requests queued, in flight or in a gate, or a budget in debt), the end of its pause,
   * or `idle`. Of a limiter with budgets, the latest pause of any (a tokens budget's 429 pauses
   * that budget alone): its record pauses the next limiter whole until then, as every call draws
   * from each budget. A budget in debt (`RateGate.owed`: a call used more than its bucket holds,
   * an LLM answer's tokens above its estimate) and not paused is kept as a busy one is,
   * until the debt is refilled: dropped, its key's next limiter would start with a full bucket and
   * send at once what the API would answer with a 429. A pause record is no place for it (a key's
   * next limiter starts paused only after a 429 of its own). A paused one is kept as its pause's
   * record: its next limiter waits out the pause the server asked for, not the rest of the debt.
   */
  #stateOf(entry: OriginEntry): 'busy' | 'idle' | number {
    if (entry.inFlight > 0 || this.#isBusy(entry.limiter)) return 'busy';
    const snapshot = entry.limiter.snapshot();
    if (snapshot.queued > 0) return 'busy';
    let until = snapshot.pausedUntil;
    for (const budget of Object.values(snapshot.budgets ?? {})) {
      const end = budget.pausedUntil;
      if (end !== undefined && (until === undefined || end > until)) until = end;
    }
    return until ?? (entry.limiter[kOwes]() ? 'busy' : 'idle');
  }

  /**
   * Whether there is room for one more pause record; when full, drops the oldest records whose
   * pause ended, looking at {@link SCAN} at most.
   */
  #roomForRecord(now: number): boolean {
    if (this.#paused.size < this.#maxPausedOrigins) return true;
    let scanned = 0;
    for (const [origin, end] of this.#paused) {
      if (scanned++ >= SCAN || this.#paused.size < this.#maxPausedOrigins) break;
      this.#paused.delete(origin);
      // A running pause goes back at the end: records end roughly in the order they came.
      if (end > now) this.#paused.set(origin, end);
      else this.#pausedClaims.delete(origin);
    }
    return this.#paused.size < this.#maxPausedOrigins;
  }

  #moveToEnd(key: string, entry: OriginEntry): void {
    this.#perOrigin.delete(key);
    this.#perOrigin.set(key, entry);
    this.#newest = key;
  }

  #drop(origin: string, entry: OriginEntry): void {
    this.#perOrigin.delete(origin);
    this.#onDrop(origin, entry.limiter, entry.owner);
  }
}
