import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import type { Clock } from '../clock.js';
import { resolveController } from '../controllers/index.js';
import { AdaptiveRateLimitError } from '../errors.js';
import { AdaptiveRateLimiter, type LimiterSnapshot } from '../limiter/adaptive.js';
import { resolveLimiterOptions } from '../limiter/options.js';
import type { AcquireOptions, Permit, RateLimiter, WrapOptions } from '../limiter/types.js';
import { wrapWithLimiter } from '../limiter/wrap.js';
import { type ResolvedSharedOptions, resolveSharedOptions, type SharedBudgetOptions } from './options.js';
import { RedisBudgetStore } from './redis-store.js';
import { type SharedCut, shareController } from './share-controller.js';
import type { Answer, BudgetStore, HeartbeatReply } from './store.js';

/** A backlog of queued units counts as demand to be served within this many ms. */
const BACKLOG_MS = 1_000;
/** A new share closer than this (relative) to the current rate is not applied: no churn. */
const SHARE_TOLERANCE = 0.005;
/** A shared pause that ends within this many ms of the local one is not applied again. */
const PAUSE_TOLERANCE_MS = 25;
/** The local limiter's floor (units/min): a member's share may be below the whole budget's min. */
const LOCAL_MIN_RATE = 1e-3;

/** What this process last learned from the store (Redis). Rates in units/min. */
export interface SharedState {
  /** The whole budget's rate; `undefined` while not learned (no initial rate, no throttle yet). */
  rate: number | undefined;
  /** This member's share of the rate; `undefined` while the rate is not learned. */
  share: number | undefined;
  /** Live members, this one included (1 before the first reply). */
  members: number;
  /**
   * Cuts of the shared rate so far, in the state's current generation: a throttle cuts only a
   * request sent in the current epoch.
   */
  epoch: number;
  /**
   * The shared state's generation (`undefined` before the first reply): a new one when the
   * state was lost (a Redis restart, a failover, an eviction, a FLUSHDB, its ttl) and created
   * again; this member then took the new state's epoch and rate as they were.
   */
  generation: string | undefined;
  /** True while Redis cannot be reached and this process serves from its last known share. */
  degraded: boolean;
  /**
   * Round trips to the store's server so far (Redis: one per heartbeat, cut or pause; two on a
   * script cache miss). A store in memory makes none.
   */
  roundTrips: number;
}

/** The events of a {@link SharedBudget}; the local limiter's own events are on `budget.limiter`. */
export interface SharedBudgetEventMap {
  /** Redis could not be reached: this process now serves from `rate` (units/min), its local share. */
  degraded: [{ budget: string; error: unknown; rate: number }];
  /** Redis answers again: sharing resumed. */
  recovered: [{ budget: string; members: number }];
  /** The number of live members changed. */
  members: [{ budget: string; from: number; to: number }];
}

/** A shared epoch in the generation of the state it belongs to: what a permit was sent in. */
interface Era {
  readonly epoch: number;
  readonly generation: string | undefined;
}

/** Thrown by `acquire` of a `failClosed` budget while Redis cannot be reached. */
export class SharedBudgetUnavailableError extends AdaptiveRateLimitError {
  readonly budget: string;

  constructor(budget: string, cause: unknown) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    super('ERR_SHARED_BUDGET_UNAVAILABLE', `shared budget "${budget}": Redis unreachable (${detail})`, {
      cause,
    });
    this.name = 'SharedBudgetUnavailableError';
    this.budget = budget;
  }
}

/**
 * One budget shared by every process that opens it with the same name on the same Redis. Each
 * process keeps a local {@link AdaptiveRateLimiter} and leases a share of the whole RATE (not
 * units): an acquire never waits for Redis. A heartbeat (one Lua script) registers the member,
 * reports its demand and its controller's proposed change, and applies the share it gets back.
 * A cut and a Retry-After pause are shared at once through their own script. See docs/redis.md.
 *
 * The shared state lives behind a {@link BudgetStore}: Redis by default (`redis`), or a
 * `MemoryBudgetStore` shared by the members of one process (`store`), as in the simulator. The
 * heartbeats are timers on the limiter's `clock`; a store that answers synchronously (memory)
 * is applied in the same call, so on a virtual clock everything happens at its instant.
 */
export class SharedBudget extends EventEmitter<SharedBudgetEventMap> implements RateLimiter {
  /** The local limiter this process acquires from; its events and snapshot are this process's. */
  readonly limiter: AdaptiveRateLimiter;
  /** This member's id in the store. */
  readonly id: string;

  readonly #opts: ResolvedSharedOptions;
  readonly #store: BudgetStore;
  readonly #clock: Clock;
  /** Whole-budget rates for the store, units/min; `undefined`: none (unlimited, no maximum). */
  readonly #initial: number | undefined;
  readonly #min: number;
  readonly #max: number | undefined;
  readonly #cooldown: number;
  readonly #maxPause: number;

  #timer: unknown;
  #beat: Promise<void> | undefined;
  #closed = false;
  #degraded = false;
  #lastError: unknown;
  #rate: number | undefined;
  #share: number | undefined;
  #members = 1;
  /** The shared epoch and generation this member knows (one object per change, shared by permits). */
  #era: Era = { epoch: 0, generation: undefined };
  /**
   * The last share divided by the rate: a cut applies it to the new rate at once, and the local
   * controller sees a process that carries this part of the budget (see share-controller.ts).
   */
  #fraction: number;
  /** The controller's changes of the local rate (units/min) since the last heartbeat. */
  #pendingDelta = 0;
  #localCut: { from: number; to: number } | undefined;
  /** Acquires of this budget queued in the local limiter, or granted and not yet handed out. */
  #queued = 0;
  /** The shared era at each grant of a queued acquire whose permit is not handed out yet. */
  readonly #grantEras: Era[] = [];
  /** True while this budget takes units at once (a grant the queue's listener must not record). */
  #takingNow = false;
  /** Listens to the local limiter's grants while acquires of this budget are queued. */
  readonly #onGrant = (): void => {
    if (!this.#takingNow) this.#grantEras.push(this.#era);
  };
  /** The last cut of the whole rate made by another member: when this member learned of it. */
  #sharedCut: { at: number; rateBefore: number } | undefined;
  /** The local limiter's pauses, as CUBIC counts them: ms banked since the shared cut, and the last. */
  #pausedBanked = 0;
  #pauseFrom = Number.NEGATIVE_INFINITY;
  #pauseUntil = Number.NEGATIVE_INFINITY;
  #seq = 0;
  #appliedSeq = 0;
  readonly #pending = new Set<Promise<unknown>>();
  readonly #ready: Promise<void>;
  #isReady = false;
  #resolveReady: () => void = () => {};

  constructor(options: SharedBudgetOptions) {
    super();
    this.#opts = resolveSharedOptions(options);
    const {
      redis,
      store,
      heartbeatInterval: _h,
      memberTimeout: _m,
      redisTimeout: _r,
      floorFraction: _f,
      failClosed: _c,
      keyPrefix: _k,
      stateTtl: _s,
      ...limiterOptions
    } = options;
    // Whole-budget options are checked as for one limiter, before anything is opened.
    const resolved = resolveLimiterOptions(limiterOptions);
    const guess = resolved.instanceCount;
    const min = resolved.minUnitsPerMinute;
    const max = resolved.maxUnitsPerMinute;
    const initial = resolved.initialUnitsPerMinute;
    this.#members = guess;
    this.#fraction = 1 / guess;
    // The local controller sees this member's part of the budget: its steps, its part of the
    // maximum and its rate before the last cut are scaled by the share (share-controller.ts).
    const controller = shareController(
      resolveController(resolved.controller, resolved),
      () => ({ fraction: this.#fraction, minRate: min, maxRate: max, sharedCut: this.#sharedCutSeen() }),
      // AIMD and CUBIC raise only after a wait: a success without one costs no state.
      typeof resolved.controller === 'string',
    );
    this.limiter = new AdaptiveRateLimiter({
      ...limiterOptions,
      name: this.#opts.name,
      controller,
      instanceCount: 1,
      minUnitsPerMinute: Math.min(min, LOCAL_MIN_RATE),
      initialUnitsPerMinute: initial === undefined ? undefined : Math.max(initial / guess, LOCAL_MIN_RATE),
    });
    this.#clock = this.limiter.clock;
    this.#rate = initial;
    this.#initial = initial;
    this.#min = min;
    this.#max = Number.isFinite(max) ? max : undefined;
    this.#cooldown = limiterOptions.decreaseCooldown ?? 1_000;
    this.#maxPause = limiterOptions.maxPause ?? 600_000;

    this.id = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.#store =
      store ??
      new RedisBudgetStore({
        // resolveSharedOptions checked that one of them is given.
        redis: redis!,
        name: this.#opts.name,
        keyPrefix: this.#opts.keyPrefix,
        redisTimeout: this.#opts.redisTimeout,
      });

    this.limiter.on('paused', (e) => {
      const from = e.until - e.ms;
      if (from >= this.#pauseUntil) {
        this.#pausedBanked += this.#pausedSinceCut(this.#pauseFrom, this.#pauseUntil);
        this.#pauseFrom = from;
      }
      this.#pauseUntil = e.until;
    });
    this.limiter.on('increased', (e) => {
      if (e.cause === 'success' && Number.isFinite(e.from)) this.#pendingDelta += e.to - e.from;
    });
    this.limiter.on('decreased', (e) => {
      if (e.cause === 'throttle') this.#localCut = { from: e.from, to: e.to };
      else if (e.cause === 'success' && Number.isFinite(e.from)) this.#pendingDelta += e.to - e.from;
    });

    this.#ready = new Promise((resolve) => {
      this.#resolveReady = () => {
        this.#isReady = true;
        resolve();
      };
    });
    this.#tick();
  }

  get name(): string {
    return this.#opts.name;
  }

  /** What this process last learned from the store. */
  get state(): SharedState {
    return {
      rate: this.#rate,
      share: this.#share,
      members: this.#members,
      epoch: this.#era.epoch,
      generation: this.#era.generation,
      degraded: this.#degraded,
      roundTrips: this.#store.roundTrips,
    };
  }

  /** The local limiter's snapshot: this process's share, queue and pause. */
  snapshot(): LimiterSnapshot {
    return this.limiter.snapshot();
  }

  /** The store this budget shares its state through. */
  get store(): BudgetStore {
    return this.#store;
  }

  /** Resolves after the first heartbeat, answered or failed. */
  ready(): Promise<void> {
    return this.#ready;
  }

  acquire(units = 1, options?: AcquireOptions): Promise<Permit> {
    if (this.#opts.failClosed) return this.#acquireClosed(units, options);
    return this.#acquire(units, options);
  }

  tryAcquire(units = 1): Permit | undefined {
    if (this.#opts.failClosed && this.#degraded) return undefined;
    const permit = this.#takeNow(units);
    return permit === undefined ? undefined : new SharedPermit(this, permit, this.#era);
  }

  wrap<A extends unknown[], R>(
    fn: (...args: A) => Promise<R>,
    options?: WrapOptions<R>,
  ): (...args: A) => Promise<R> {
    return wrapWithLimiter(this, fn, options);
  }

  /** Runs a heartbeat now (after the one in flight) and returns the state it learned. */
  async refresh(): Promise<SharedState> {
    while (this.#beat !== undefined) await this.#beat;
    await this.#heartbeat();
    return this.state;
  }

  /** Waits for the cut and pause scripts sent so far. */
  async flush(): Promise<void> {
    await Promise.allSettled([...this.#pending]);
  }

  /**
   * Stops the heartbeat, leaves the budget (the others see one member fewer at their next
   * heartbeat), closes the store (the Redis client it opened) and the local limiter. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#beat;
    await this.flush();
    if (!this.#degraded) {
      await Promise.resolve()
        .then(() => this.#store.leave(this.id))
        .catch(() => undefined);
    }
    await this.#store.close?.();
    this.limiter.close();
  }

  // ---- feedback from permits -------------------------------------------------------------

  /** @internal */
  _throttled(inner: Permit, sent: Era, retryAfterMs: number | undefined): void {
    this.#localCut = undefined;
    inner.throttled(retryAfterMs);
    const cut = this.#localCut;
    this.#localCut = undefined;
    if (cut !== undefined) this.#track(this.#cut(sent, cut));
    if (retryAfterMs !== undefined && retryAfterMs > 0) this.#track(this.#pause(retryAfterMs));
  }

  /** @internal */
  _failed(inner: Permit, retryAfterMs: number | undefined): void {
    inner.failed(retryAfterMs);
    if (retryAfterMs !== undefined && retryAfterMs > 0) this.#track(this.#pause(retryAfterMs));
  }

  // ---- coordination ----------------------------------------------------------------------

  async #acquireClosed(units: number, options: AcquireOptions | undefined): Promise<Permit> {
    const signal = options?.signal;
    if (this.#isReady || signal === undefined) await this.#ready;
    else await readyOrAborted(this.#ready, signal);
    if (this.#degraded) throw new SharedBudgetUnavailableError(this.#opts.name, this.#lastError);
    return this.#acquire(units, options);
  }

  /**
   * The local limiter's acquire, as a permit that records the shared epoch known when the local
   * limiter granted it, not when the promise's callback runs (a heartbeat or a cut may come
   * between). Units free now are taken at once, with this epoch; a queued acquire's epoch is
   * recorded by the `acquired` event, in the order of the grants, which is the order the
   * callbacks run in. (The event is listened to only while acquires of this budget are queued;
   * acquires made on `budget.limiter` itself meanwhile would shift that order.)
   */
  #acquire(units: number, options: AcquireOptions | undefined): Promise<Permit> {
    if (units > 0 && units < Number.POSITIVE_INFINITY && options?.signal?.aborted !== true) {
      const permit = this.#takeNow(units);
      if (permit !== undefined) return Promise.resolve(new SharedPermit(this, permit, this.#era));
    }
    if (this.#queued++ === 0) this.limiter.on('acquired', this.#onGrant);
    return this.limiter.acquire(units, options).then(
      (permit) => {
        const era = this.#grantEras.shift() ?? this.#era;
        this.#dequeued();
        return new SharedPermit(this, permit, era);
      },
      (error: unknown) => {
        this.#dequeued();
        throw error;
      },
    );
  }

  #dequeued(): void {
    if (--this.#queued > 0) return;
    this.limiter.off('acquired', this.#onGrant);
    this.#grantEras.length = 0;
  }

  /** The local limiter's `tryAcquire`, unseen by the queue's grant listener. */
  #takeNow(units: number): Permit | undefined {
    this.#takingNow = true;
    try {
      return this.limiter.tryAcquire(units);
    } finally {
      this.#takingNow = false;
    }
  }

  #tick(): void {
    this.#timer = undefined;
    if (this.#closed) return;
    const beat = this.#heartbeat();
    if (beat === undefined) this.#arm();
    else void beat.finally(() => this.#arm());
  }

  #arm(): void {
    if (this.#closed || this.#timer !== undefined) return;
    this.#timer = this.#clock.setTimeout(() => this.#tick(), this.#opts.heartbeatInterval);
  }

  /** Sends a heartbeat (or joins the one in flight); `undefined` when it was applied at once. */
  #heartbeat(): Promise<void> | undefined {
    if (this.#beat !== undefined) return this.#beat;
    const pending = this.#sendHeartbeat();
    if (pending === undefined) {
      this.#resolveReady();
      return undefined;
    }
    const beat = pending.finally(() => {
      this.#beat = undefined;
      this.#resolveReady();
    });
    this.#beat = beat;
    return beat;
  }

  #sendHeartbeat(): Promise<void> | undefined {
    const snap = this.limiter.snapshot();
    const demand = (snap.measuredRate ?? 0) + (snap.queuedUnits * 60_000) / BACKLOG_MS;
    // Each member's controller runs on its part of the budget (share-controller.ts), so the
    // changes of the members' rates add up to the change of the whole rate.
    const delta = this.#degraded || this.#rate === undefined ? 0 : this.#pendingDelta;
    this.#pendingDelta = 0;
    const o = this.#opts;
    const seq = ++this.#seq;
    return this.#ask(
      () =>
        this.#store.heartbeat({
          id: this.id,
          demand,
          delta,
          memberTimeout: o.memberTimeout,
          floorFraction: o.floorFraction,
          initialRate: this.#initial,
          minRate: this.#min,
          maxRate: this.#max,
          ttl: o.stateTtl,
        }),
      (reply) => this.#applyHeartbeat(seq, reply),
    );
  }

  #applyHeartbeat(seq: number, reply: HeartbeatReply): void {
    this.#recover(reply.members);
    this.#learn(seq, reply.generation, reply.epoch, false);
    if (seq < this.#appliedSeq) return;
    this.#appliedSeq = seq;
    this.#setMembers(reply.members);
    this.#rate = reply.rate;
    this.#share = reply.share;
    if (this.#rate !== undefined && this.#share !== undefined) this.#fraction = this.#share / this.#rate;
    this.#applyShare(this.#share);
    this.#applyPause(reply.pauseRemaining);
  }

  #cut(sent: Era, cut: { from: number; to: number }): Promise<void> | undefined {
    if (this.#degraded) return undefined; // the local cut stands
    const o = this.#opts;
    const seq = ++this.#seq;
    return this.#ask(
      () =>
        this.#store.cut({
          sentEpoch: sent.epoch,
          generation: sent.generation,
          ratio: Number.isFinite(cut.from) && cut.from > 0 ? cut.to / cut.from : undefined,
          // Leaving "unlimited": the local cut started from this process's measured rate.
          absoluteRate: cut.to * this.#members,
          cooldown: this.#cooldown,
          minRate: this.#min,
          maxRate: this.#max,
          ttl: o.stateTtl,
        }),
      (reply) => {
        this.#learn(seq, reply.generation, reply.epoch, reply.cut);
        if (seq < this.#appliedSeq) return;
        this.#appliedSeq = seq;
        this.#rate = reply.rate;
        if (this.#rate !== undefined) this.#share = this.#rate * this.#fraction;
        // A refused cut (another member cut for this burst) restores the share the local cut took.
        this.#applyShare(this.#share);
      },
    );
  }

  #pause(ms: number): Promise<void> | undefined {
    if (this.#degraded) return undefined;
    const request = { ms: Math.min(ms, this.#maxPause), ttl: this.#opts.stateTtl };
    return this.#ask(
      () => this.#store.pause(request),
      () => {},
    );
  }

  /**
   * The store's generation and epoch, from the answer to call `seq`. A newer epoch than this
   * member knew is a cut of the whole rate: its own (`own`: the local limiter's last cut is that
   * cut already), or another member's: from now on the local controller counts from that cut, as
   * from its own, with the whole rate known before it (see share-controller.ts).
   *
   * Another generation than this member knew is a state created again after it was lost (see
   * store.ts): its epoch is taken as it is, lower or not (epochs of two generations do not
   * compare), and the caller takes its rate. Only from an answer at least as recent as the last
   * applied one: a late answer from before a change of generation is not taken back.
   */
  #learn(seq: number, generation: string, epoch: number, own: boolean): void {
    if (generation !== this.#era.generation) {
      if (seq < this.#appliedSeq) return;
      this.#era = { epoch, generation };
      // A new state at epoch 0 has no cut yet: the last cut this member knows stays the last.
      if (epoch === 0 && !own) return;
    } else {
      if (epoch <= this.#era.epoch) return;
      this.#era = { epoch, generation };
    }
    if (own || this.#rate === undefined) {
      this.#sharedCut = undefined;
      return;
    }
    this.#sharedCut = { at: this.#clock.now(), rateBefore: this.#rate };
    this.#pausedBanked = 0;
  }

  #sharedCutSeen(): SharedCut | undefined {
    const cut = this.#sharedCut;
    if (cut === undefined) return undefined;
    return {
      since: this.#clock.now() - cut.at,
      paused: this.#pausedBanked + this.#pausedSinceCut(this.#pauseFrom, this.#pauseUntil),
      rateBefore: cut.rateBefore,
    };
  }

  /** ms of the pause [from, until) after the shared cut, up to now. */
  #pausedSinceCut(from: number, until: number): number {
    const cutAt = this.#sharedCut?.at ?? Number.POSITIVE_INFINITY;
    return Math.max(0, Math.min(until, this.#clock.now()) - Math.max(from, cutAt));
  }

  /**
   * Asks the store and applies its answer: in this call when the store answers synchronously
   * (then returns `undefined`), else when the promise settles. A failure marks the budget degraded.
   */
  #ask<T>(call: () => Answer<T>, apply: (answer: T) => void): Promise<void> | undefined {
    const fail = (error: unknown) => this.#fail(error);
    let answer: Answer<T>;
    try {
      answer = call();
    } catch (error) {
      fail(error);
      return undefined;
    }
    if (isPromiseLike(answer)) return Promise.resolve(answer).then(apply).catch(fail);
    try {
      apply(answer);
    } catch (error) {
      fail(error);
    }
    return undefined;
  }

  #applyShare(share: number | undefined): void {
    if (share === undefined || !(share > 0) || this.#closed) return;
    const current = this.limiter.rate;
    if (Number.isFinite(current) && Math.abs(share - current) <= current * SHARE_TOLERANCE) return;
    this.limiter.setRate(share);
  }

  #applyPause(remaining: number): void {
    if (!(remaining > 0) || this.#closed) return;
    const until = this.limiter.snapshot().pausedUntil;
    const local = until === undefined ? 0 : until - this.#clock.now();
    if (remaining > local + PAUSE_TOLERANCE_MS) this.limiter.pauseFor(remaining);
  }

  #setMembers(members: number): void {
    if (members === this.#members) return;
    const from = this.#members;
    this.#members = members;
    this.emit('members', { budget: this.#opts.name, from, to: members });
  }

  #fail(error: unknown): void {
    this.#lastError = error;
    if (this.#degraded || this.#closed) return;
    this.#degraded = true;
    this.#pendingDelta = 0;
    // Fall back to an equal share of the last known rate.
    if (this.#rate !== undefined) {
      this.#fraction = 1 / this.#members;
      this.#share = this.#rate / this.#members;
      this.#applyShare(this.#share);
    }
    const rate = this.limiter.rate;
    if (this.listenerCount('degraded') === 0) {
      const detail = error instanceof Error ? error.message : String(error);
      console.warn(
        `adaptive-rate-limit: shared budget "${this.#opts.name}" degraded (${detail}); serving from the local share, ${rate} units/min`,
      );
    }
    this.emit('degraded', { budget: this.#opts.name, error, rate });
  }

  #recover(members: number): void {
    if (!this.#degraded) return;
    this.#degraded = false;
    if (this.listenerCount('recovered') === 0) {
      console.warn(`adaptive-rate-limit: shared budget "${this.#opts.name}" recovered; sharing resumed`);
    }
    this.emit('recovered', { budget: this.#opts.name, members });
  }

  #track(promise: Promise<void> | undefined): void {
    if (promise === undefined) return;
    this.#pending.add(promise);
    void promise.finally(() => this.#pending.delete(promise));
  }
}

/** The permit of a {@link SharedBudget}: the local permit plus the shared era it was sent in. */
class SharedPermit implements Permit {
  #budget: SharedBudget | undefined;

  constructor(
    budget: SharedBudget,
    readonly inner: Permit,
    readonly era: Era,
  ) {
    this.#budget = budget;
  }

  /** The shared epoch it was sent in. */
  get epoch(): number {
    return this.era.epoch;
  }

  get units(): number {
    return this.inner.units;
  }

  success(unitsUsed?: number): void {
    if (this.#settle() !== undefined) this.inner.success(unitsUsed);
  }

  throttled(retryAfterMs?: number): void {
    this.#settle()?._throttled(this.inner, this.era, retryAfterMs);
  }

  failed(retryAfterMs?: number): void {
    this.#settle()?._failed(this.inner, retryAfterMs);
  }

  #settle(): SharedBudget | undefined {
    const budget = this.#budget;
    this.#budget = undefined;
    return budget;
  }
}

/**
 * `ready`, or a rejection with the signal's reason as soon as it aborts; the abort listener is
 * removed when `ready` settles first (`ready` never rejects).
 */
function readyOrAborted(ready: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    void ready.then(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    });
  });
}

function isPromiseLike<T>(value: Answer<T>): value is Promise<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}

/**
 * Opens a budget shared through Redis (`redis`) or another store (`store`); see
 * {@link SharedBudgetOptions}. Throws `ConfigError` at once.
 */
export function createSharedBudget(options: SharedBudgetOptions): SharedBudget {
  return new SharedBudget(options);
}
