import { EventEmitter } from 'node:events';
import { controllerNameOf, resolveController } from '../controllers/index.js';
import { ASYNC_DISPOSE } from '../dispose.js';
import { AdaptiveRateLimitError, ConfigError, SHARED_BUDGET_UNAVAILABLE } from '../errors.js';
import { kFailed, kNoCrowdWait, kSuccess, kThrottled, kWaitBound } from '../internal.js';
import { AdaptiveRateLimiter, type LimiterSnapshot } from '../limiter/adaptive.js';
import { resolveLimiterOptions } from '../limiter/options.js';
import { notSent, unitsCounted } from '../limiter/permit.js';
import type { AcquireOptions, AnnouncedQuota, Permit, RateLimiter, WaitBound } from '../limiter/types.js';
import { redactText } from '../redact.js';
import { Coordinator } from './coordinator.js';
import { memberController } from './member-controller.js';
import { MemberState, type SharedBudgetEventMap, type SharedState } from './member-state.js';
import { type ResolvedSharedOptions, resolveSharedOptions, type SharedBudgetOptions } from './options.js';
import { type Era, SharedPermit } from './permit.js';
import { assertIoredis, RedisBudgetStore } from './redis-store.js';
import type { BudgetStore } from './store.js';

/** The controller of a shared budget that names none. */
const SHARED_DEFAULT_CONTROLLER = 'probe';

export type { SharedBudgetEventMap, SharedState } from './member-state.js';

/** The local limiter's floor (units/min): a member's share may be below the whole budget's min. */
const LOCAL_MIN_RATE = 1e-3;

/** Thrown by `acquire` of a `failClosed` budget while Redis cannot be reached. */
export class SharedBudgetUnavailableError extends AdaptiveRateLimitError {
  /** The budget's name, its secrets masked (`redactText`) as in the message. */
  readonly budget: string;

  constructor(budget: string, cause: unknown) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    super(SHARED_BUDGET_UNAVAILABLE, `shared budget "${budget}": Redis unreachable (${detail})`, {
      cause,
    });
    this.name = 'SharedBudgetUnavailableError';
    this.budget = redactText(budget);
  }
}

/**
 * One budget shared by every process that opens it with the same name on the same Redis. Each
 * process keeps a local {@link AdaptiveRateLimiter} and leases a share of the whole RATE (not
 * units): an acquire never waits for Redis. A heartbeat (one Lua script) registers the member,
 * reports its demand and accepted rate, carries the budget's controller's proposed change, and
 * applies the share it gets back. The controller's state is kept once for the budget in the
 * store, so a cut, a ceiling and a probe are decided once (budget-controller.ts). A cut and a
 * Retry-After pause are shared at once through their own script. See docs/redis.md.
 *
 * The shared state lives behind a {@link BudgetStore}: Redis by default (`redis`), or a
 * `MemoryBudgetStore` shared by the members of one process (`store`), as in the simulator. The
 * heartbeats are timers on the limiter's `clock`; a store that answers synchronously (memory)
 * is applied in the same call, so on a virtual clock everything happens at its instant.
 *
 * This class is the face: acquires and permits. The {@link Coordinator} (coordinator.ts) runs the
 * heartbeat and the calls to the store; the {@link MemberState} (member-state.ts) applies their
 * answers to the local limiter.
 */
export class SharedBudget extends EventEmitter<SharedBudgetEventMap> implements RateLimiter {
  /** The local limiter this process acquires from; its events and snapshot are this process's. */
  readonly limiter: AdaptiveRateLimiter;
  /** This member's id in the store. */
  readonly id: string;

  readonly #opts: ResolvedSharedOptions;
  readonly #member: MemberState;
  readonly #coordinator: Coordinator;
  /** Acquires of this budget queued in the local limiter, or granted and not yet handed out. */
  #queued = 0;
  /** The shared era at each grant of a queued acquire whose permit is not handed out yet. */
  readonly #grantEras: Era[] = [];
  /** True while this budget takes units at once (a grant the queue's listener must not record). */
  #takingNow = false;
  /** Listens to the local limiter's grants while acquires of this budget are queued. */
  readonly #onGrant = (): void => {
    if (!this.#takingNow) this.#grantEras.push(this.#member.era);
  };

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
      lazy: _l,
      ...limiterOptions
    } = options;
    // Whole-budget options are checked as for one limiter, before anything is opened. A shared
    // budget's controller is the probe controller by default (SHARED_DEFAULT_CONTROLLER), its
    // books kept once for the budget in the store.
    const resolved = resolveLimiterOptions({
      ...limiterOptions,
      controller: limiterOptions.controller ?? SHARED_DEFAULT_CONTROLLER,
    });
    if (this.#opts.lazy && typeof redis === 'string') assertIoredis();
    const guess = resolved.instanceCount;
    const min = resolved.minUnitsPerMinute;
    const max = resolved.maxUnitsPerMinute;
    const initial = resolved.initialUnitsPerMinute;
    // One controller: the budget's (once for the budget) and a degraded member's (on its own).
    const controller = resolveController(resolved.controller, resolved);
    this.#member = new MemberState(this, {
      name: this.#opts.name,
      initialRate: initial,
      minRate: min,
      maxRate: max,
      maxPause: resolved.maxPause,
      memberTimeout: this.#opts.memberTimeout,
      stateTtl: this.#opts.stateTtl,
      rejoinMarginMs: this.#opts.redisTimeout + this.#opts.heartbeatInterval,
      members: guess,
      controller,
      random: resolved.random,
      limiter: (view) =>
        noCrowdWait(
          new AdaptiveRateLimiter({
            ...limiterOptions,
            name: this.#opts.name,
            // The budget's controller decides once for the budget (budget-controller.ts); the local
            // one applies this member's part of its cuts (member-controller.ts).
            // Named after the budget's controller (what metrics and NODE_DEBUG show).
            // Degraded, the member runs the same controller on its own state (its pauses pause
            // only itself), as a single limiter.
            controller: Object.assign(memberController(controller, view), {
              name: controllerNameOf(resolved.controller),
            }),
            instanceCount: 1,
            minUnitsPerMinute: Math.min(min, LOCAL_MIN_RATE),
            initialUnitsPerMinute:
              initial === undefined ? undefined : Math.max(initial / guess, LOCAL_MIN_RATE),
          }),
        ),
    });
    this.limiter = this.#member.limiter;
    this.#coordinator = new Coordinator(this.#member, {
      opts: this.#opts,
      random: limiterOptions.random,
      initialRate: initial,
      minRate: min,
      maxRate: max,
      cooldown: resolved.decreaseCooldown,
      maxPause: resolved.maxPause,
      store: () =>
        store ??
        new RedisBudgetStore({
          // resolveSharedOptions checked that one of them is given.
          redis: redis!,
          name: this.#opts.name,
          keyPrefix: this.#opts.keyPrefix,
          redisTimeout: this.#opts.redisTimeout,
        }),
    });
    this.id = this.#coordinator.id;
    if (!this.#opts.lazy) this.#coordinator.start();
  }

  get name(): string {
    return this.#opts.name;
  }

  /** What this process last learned from the store. */
  get state(): SharedState {
    return this.#coordinator.state;
  }

  /** The local limiter's snapshot: this process's share, queue and pause. */
  snapshot(): LimiterSnapshot {
    return this.limiter.snapshot();
  }

  /** The store this budget shares its state through. */
  get store(): BudgetStore {
    return this.#coordinator.store;
  }

  /** Resolves after the first heartbeat, answered or failed (a `lazy` budget opens now). */
  ready(): Promise<void> {
    this.#coordinator.start();
    return this.#coordinator.ready;
  }

  /** Whether the store is open: always, but for a `lazy` budget before its first use. */
  get opened(): boolean {
    return this.#coordinator.started;
  }

  acquire(units = 1, options?: AcquireOptions): Promise<Permit> {
    if (!this.#coordinator.started) this.#coordinator.start();
    const refused = this.#refused();
    if (refused !== undefined) return Promise.reject(refused);
    if (this.#opts.failClosed) return this.#acquireClosed(units, options);
    return this.#acquire(units, options);
  }

  tryAcquire(units = 1, costs?: Readonly<Record<string, number>>): Permit | undefined {
    if (!this.#coordinator.started) this.#coordinator.start();
    const refused = this.#refused();
    if (refused !== undefined) throw refused;
    // Fail-closed serves nothing before Redis has answered once, as acquire waits for that.
    if (this.#opts.failClosed && (!this.#coordinator.isReady || this.#member.degraded)) return undefined;
    const permit = this.#takeNow(units, costs);
    if (permit === undefined) {
      this.#member.waited();
      return undefined;
    }
    return new SharedPermit(this, permit, this.#member.era);
  }

  /** @internal See {@link WaitBound}: the local limiter's, whose errors the rate wait gives. */
  [kWaitBound](): WaitBound {
    return this.limiter[kWaitBound]();
  }

  /** Runs a heartbeat now (after the one in flight) and returns the state it learned. */
  refresh(): Promise<SharedState> {
    this.#coordinator.start();
    return this.#coordinator.refresh();
  }

  /** Waits for the cut and pause scripts sent so far. */
  flush(): Promise<void> {
    return this.#coordinator.flush();
  }

  /**
   * Closes the local limiter first (every acquire still waiting, with `failClosed` also one
   * waiting for the first heartbeat, is rejected with reason `closed`), then stops the heartbeat,
   * leaves the budget (the others see one member fewer at their next heartbeat) and closes the
   * store (the Redis client it opened). Idempotent.
   */
  close(): Promise<void> {
    return this.#coordinator.close();
  }

  /** {@link close}, for `await using budget = new SharedBudget(...)`. */
  [ASYNC_DISPOSE](): Promise<void> {
    return this.close();
  }

  // ---- feedback from permits -------------------------------------------------------------

  /** @internal */
  [kSuccess](inner: Permit, unitsUsed: number | undefined, quota?: readonly AnnouncedQuota[]): void {
    inner.success(unitsUsed, quota);
    // As the local limiter counts it: the units used when the answer says, else the permit's.
    const used = unitsCounted(inner, unitsUsed);
    this.#member.accepted(used);
  }

  /** @internal */
  [kThrottled](
    inner: Permit,
    sent: Era,
    retryAfterMs: number | undefined,
    quota?: readonly AnnouncedQuota[],
    quotaWait = false,
  ): void {
    this.#coordinator.throttled(inner, sent, retryAfterMs, quota, quotaWait);
  }

  /** @internal */
  [kFailed](inner: Permit, retryAfterMs: number | undefined, quota?: readonly AnnouncedQuota[]): void {
    this.#coordinator.failed(inner, retryAfterMs, quota);
  }

  // ---- acquiring -------------------------------------------------------------------------

  async #acquireClosed(units: number, options: AcquireOptions | undefined): Promise<Permit> {
    const signal = options?.signal;
    const ready = this.#coordinator.ready;
    if (this.#coordinator.isReady || signal === undefined) await ready;
    else await readyOrAborted(ready, signal);
    if (this.#member.degraded) throw this.#unavailable();
    return this.#acquire(units, options);
  }

  /** Why a fail-closed budget refuses an acquire while degraded. */
  #unavailable(): Error {
    return this.#refused() ?? new SharedBudgetUnavailableError(this.#opts.name, this.#member.lastError);
  }

  /**
   * The `ConfigError` of a store that cannot work as configured (Redis refused the URL's
   * database): no waiting helps, so every acquire ends with it, fail-open or not.
   */
  #refused(): ConfigError | undefined {
    const error = this.#member.lastError;
    return this.#member.degraded && error instanceof ConfigError ? error : undefined;
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
      const permit = this.#takeNow(units, options?.costs);
      if (permit !== undefined) return Promise.resolve(new SharedPermit(this, permit, this.#member.era));
    }
    this.#member.waited();
    if (this.#queued++ === 0) this.limiter.on('acquired', this.#onGrant);
    return this.limiter.acquire(units, options).then(
      (permit) => {
        const era = this.#grantEras.shift() ?? this.#member.era;
        this.#dequeued();
        if (this.#opts.failClosed && this.#member.degraded) {
          // Queued before Redis went away: refused as an acquire made now is. The units are
          // given up with no outcome (no request was sent).
          notSent(permit);
          throw this.#unavailable();
        }
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
  #takeNow(units: number, costs: Readonly<Record<string, number>> | undefined): Permit | undefined {
    this.#takingNow = true;
    try {
      return this.limiter.tryAcquire(units, costs);
    } finally {
      this.#takingNow = false;
    }
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

/**
 * Opens a budget shared through Redis (`redis`) or another store (`store`); see
 * {@link SharedBudgetOptions}. Throws `ConfigError` at once.
 */
export function createSharedBudget(options: SharedBudgetOptions): SharedBudget {
  return new SharedBudget(options);
}

/** The member's local limiter: the budget's books, not a crowd wait, answer a 429 that says nothing. */
function noCrowdWait(limiter: AdaptiveRateLimiter): AdaptiveRateLimiter {
  limiter[kNoCrowdWait]();
  return limiter;
}
