import { type Clock, systemClock } from '../clock.js';
import { controllerNameOf, resolveController } from '../controllers/index.js';
import type { RateController } from '../controllers/types.js';
import { DISPOSE } from '../dispose.js';
import {
  ConfigError,
  InvalidArgumentError,
  LIMITER_SOURCE,
  RateLimitRejectedError,
  type RejectionReason,
} from '../errors.js';
import {
  kAlignSlots,
  kCanGrant,
  kChargeUncounted,
  kFailed,
  kGiveBack,
  kHeldBack,
  kLastAnswerAt,
  kNoCrowdWait,
  kOwes,
  kPredictWait,
  kReadyAt,
  kRecentAcceptedRate,
  kSuccess,
  kTake,
  kThrottled,
  kWaitBound,
  kWaitCancel,
} from '../internal.js';
import { redactText } from '../redact.js';
import { AnnouncedBucket } from './announced-bucket.js';
import { type RateGate, TokenBucket } from './bucket.js';
import {
  BudgetedPermit,
  BudgetSet,
  type BudgetWaiter,
  budgetsGate,
  type Costs,
  checkCharge,
} from './budgets.js';
import { Ceilings } from './ceiling.js';
import { CROWD_LEARNED, CrowdWait } from './crowd-wait.js';
import { LazyEmitter, type LimiterEventMap, refusal } from './events.js';
import { Flight } from './flight.js';
import { LimitFloors } from './limit-floor.js';
import {
  type AdaptiveLimiterOptions,
  type BudgetOptions,
  type ResolvedLimiterOptions,
  resolveLimiterOptions,
  sameBudgets,
} from './options.js';
import { Pacer } from './pacer.js';
import { Pause } from './pause.js';
import { badOptions, LimiterPermit, unitsCounted, waitedBefore } from './permit.js';
import { drawFrom, RateBook } from './rate-book.js';
import { SlowStart } from './slow-start.js';
import type {
  AcquireOptions,
  AnnouncedQuota,
  LimiterSnapshot,
  Permit,
  RateLimiter,
  ReadQuota,
  WaitBound,
} from './types.js';
import { type CancellableAcquireOptions, signalFor, WaitingLine } from './waiting-line.js';
import { handToWatchers, watchGeneration } from './watch.js';

// NODE_DEBUG=adaptive-rate-limit (watches nothing without it).

export type { LimiterSnapshot } from './types.js';

/**
 * The adaptive limiter: a token bucket refilled at a rate a {@link RateController} moves, a
 * FIFO queue of waiters, Retry-After pauses, and the cut rules of README's "How the limiter works". Synchronous inside:
 * every state change happens in one call, and at most one timer is armed (none when idle).
 *
 * The bucket holds one second of the rate (at least one unit) and starts full. A request larger
 * than the bucket is served once the bucket is full and leaves it in debt, so the long-run rate
 * holds for any request size.
 *
 * The parts: the {@link TokenBucket}, the {@link Pause}, the {@link RateBook} (the controller and
 * what it is told) and the {@link WaitingLine} (the waiters and the one timer, made at the first
 * wait or pause). The limiter grants, settles permits and tells the listeners.
 */
export class AdaptiveRateLimiter extends LazyEmitter<LimiterEventMap> implements RateLimiter {
  readonly #clock: Clock;
  #opts: ResolvedLimiterOptions;
  readonly #bucket: RateGate;
  readonly #pause = new Pause();
  readonly #book: RateBook;
  #line: WaitingLine | undefined;
  /**
   * Made on an adapter's first `maxConcurrent` slot wait ({@link kWaitBound}): the requests waiting
   * outside the line for a slot (`queueLimit` counts them), and the gates told when it closes. One
   * field, unset on an idle limiter, which stays within 1 KiB.
   */
  #outside: { waiting: number; onClose: Set<() => void> | undefined } | undefined;
  /** The cap on units in flight of an unlimited limiter's cold start; unset once dropped. */
  #slowStart: SlowStart | undefined;
  /** Units granted so far: each permit's place in grant order (see `Ceilings.answer`). */
  #grantedUnits = 0;
  /** The ceilings the API announced, made at the first announcement. */
  #ceilings: Ceilings | undefined;
  #closed = false;
  /** The bucket when it is the announced one (`burst: 'announced'`), which counts units in flight. */
  readonly #announced: AnnouncedBucket | undefined;
  /** The announced bucket's calls in flight (see `AnnouncedBucket.sync`); none for another bucket. */
  readonly #flight: Flight<LimiterPermit> | undefined;
  /** This budget's name when the limiter has several budgets (or is one of them). */
  /**
   * Of a limiter of several budgets (its first budget, or one of the others'): the budget's name,
   * whether the head of the line waits held back by this budget (a change of rate keeps `waited`
   * only then), and, for another budget's limiter, the owner its events go to; for the owner, the
   * `burst` and `reserve` of its own options, which its first budget's entry overrode (the other
   * budgets' unless theirs say otherwise: an `update()` may give them again). One field, unset on
   * a plain limiter.
   */
  #member:
    | {
        readonly name: string;
        holdsHead?: () => boolean;
        forward?: (event: keyof LimiterEventMap, payload: object) => void;
        given?: Pick<ResolvedLimiterOptions, 'burst' | 'reserve'>;
      }
    | undefined;
  /** The other budgets (see `budgets`), each an `AdaptiveRateLimiter` that never queues. */
  readonly #budgets: BudgetSet | undefined;
  readonly #subs: readonly (readonly [string, AdaptiveRateLimiter])[] | undefined;
  /** The watcher generation this limiter was last handed to (see watch.ts). */
  #watched = 0;
  /**
   * The wait after a 429 that says nothing, until the limiter has learned a rate (crowd-wait.ts):
   * a limiter given no initial rate only. Until its first such 429 it is the count of successes
   * (a number costs an idle limiter nothing); unset when the limiter never waits so.
   */
  #crowd: CrowdWait | number | undefined;
  /**
   * The name as the limiter shows it, in its events (and so the diagnostics channels), its
   * refusals and its snapshot: its secrets masked (`redactText`), as everything the library echoes
   * back. The same string as the name when there is nothing to mask.
   */
  readonly #shownName: string;

  constructor(options: AdaptiveLimiterOptions = {}) {
    super();
    this.#opts = resolveLimiterOptions(options);
    this.#shownName = redactText(this.#opts.name);
    const entries = Object.entries(this.#opts.budgets ?? {});
    const [firstName, firstOwn] = entries[0] ?? [undefined, undefined];
    // The first budget is this limiter's own: its entry's fields override the limiter's.
    const { burst: givenBurst, reserve: givenReserve } = this.#opts;
    if (firstOwn !== undefined) this.#opts = resolveLimiterOptions(firstOwn, this.#opts);
    if (firstName !== undefined)
      this.#member = { name: firstName, given: { burst: givenBurst, reserve: givenReserve } };
    const controller = resolveController(this.#opts.controller, this.#opts);
    this.#clock = options.clock ?? systemClock;
    const now = this.#clock.now();
    const { initialUnitsPerMinute, maxUnitsPerMinute, instanceCount, burst } = this.#opts;
    const rate = (initialUnitsPerMinute ?? maxUnitsPerMinute) / instanceCount;
    if (burst === 'announced') {
      this.#announced = new AnnouncedBucket(rate, now, this.#opts.reserve);
      this.#bucket = this.#announced;
      this.#flight = new Flight();
    } else this.#bucket = burst === 'second' ? new TokenBucket(rate, now) : new Pacer(rate, now);
    this.#book = new RateBook(this.#opts, controller, this.#pause, now, rate);
    if (this.#bucket.unlimited && this.#opts.slowStart !== false)
      this.#slowStart = new SlowStart(this.#opts.slowStart);
    if (initialUnitsPerMinute === undefined) this.#crowd = 0;
    if (entries.length > 1) {
      this.#subs = entries
        .slice(1)
        .map(([name, own]) => [name, this.#budgetLimiter(name, options, own)] as const);
      const budgets = new BudgetSet(this.#subs);
      this.#budgets = budgets;
      if (this.#member) this.#member.holdsHead = () => budgets.headHeld().includes(firstName as string);
    }
  }

  /** The limiter of one of the other budgets: the limiter's options, that budget's over them. */
  #budgetLimiter(name: string, options: AdaptiveLimiterOptions, own: BudgetOptions): AdaptiveRateLimiter {
    const {
      budgets: _,
      initialUnitsPerMinute: _i,
      minUnitsPerMinute: _m,
      maxUnitsPerMinute: _x,
      ...shared
    } = options;
    const sub = new AdaptiveRateLimiter({ ...shared, ...own, slowStart: false, clock: this.#clock });
    sub.#member = {
      name,
      forward: (event, payload) => this.#emitTagged(event, payload),
      holdsHead: () => this.#budgets?.headHeld().includes(name) ?? false,
    };
    return sub;
  }

  /**
   * Hands this limiter to the watchers (the metrics) once per generation; not the limiter of one
   * of the other budgets, whose events its owner tells under its own name.
   */
  #handToWatchers(): number {
    return this.#member?.forward === undefined ? handToWatchers(this) : watchGeneration();
  }

  /** This limiter's budget's name when it is one of several, else `undefined`. */
  get #budgetName(): string | undefined {
    return this.#member?.name;
  }

  /** The name of this limiter's first budget when it has several (see `budgets`), else `undefined`. */
  get budget(): string | undefined {
    return this.#budgetName;
  }

  /** Every event names its budget when the limiter has several; a budget's limiter tells its owner. */
  protected override emit<K extends keyof LimiterEventMap & string>(
    event: K,
    ...args: LimiterEventMap[K]
  ): boolean {
    const label = this.#budgetName;
    if (label === undefined) return super.emit(event, ...args);
    const payload = { ...args[0], budget: label };
    const forward = this.#member?.forward;
    if (forward === undefined) return this.#emitTagged(event, payload);
    // A budget's grants (and cancelled waits) are the request's: its owner tells them once.
    if (event !== 'acquired' && event !== 'canceled') forward(event, payload);
    return true;
  }

  #emitTagged(event: keyof LimiterEventMap, payload: object): boolean {
    return super.emit(event, ...([payload] as unknown as LimiterEventMap[typeof event]));
  }

  get name(): string {
    return this.#opts.name;
  }

  /**
   * The controller's name: `'aimd'`, `'cubic'`, `'probe'`, or a custom controller's `name`
   * property (`'custom'` without one).
   */
  get controllerName(): string {
    return controllerNameOf(this.#opts.controller);
  }

  /** The current rate of this process in units/min (`Infinity` while unlimited). */
  get rate(): number {
    return this.#bucket.rate;
  }

  /** The clock this limiter reads. */
  get clock(): Clock {
    return this.#clock;
  }

  acquire(units = 1, options?: AcquireOptions): Promise<Permit> {
    if (!validUnits(units)) return Promise.reject(badUnits('acquire', units));
    if (options !== undefined) {
      const bad = badOptions('acquire', options);
      if (bad !== undefined) return Promise.reject(bad);
    }
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#closed) return Promise.reject(this.#rejection('closed', units, 'closed'));
    const now = this.#clock.now();
    if (this.#budgets !== undefined) return this.#acquireBudgets(units, options, now);
    if (this.#nobodyWaits() && this.#canGrant(units, now)) {
      return Promise.resolve(this.#grant(units, now, now));
    }
    this.#book.waited = true;
    // The admission checks stay here, not in the line: a smaller `acquire` is inlined (V8, Node 20)
    // into a caller's loop in place of `[kSuccess]`, which cost ~7% of the engine bench's async rate.
    const line = this.#waitingLine();
    const predicted = this.#bucket.predictWait(units, line.queuedUnits, this.#pause.left(now), now);
    const full = this.#full(units, predicted);
    if (full !== undefined) return Promise.reject(full);
    // One maxWait for the whole request: what its earlier attempts waited counts.
    const maxWait = this.#opts.maxWait - waitedBefore(options);
    if (predicted > maxWait) return Promise.reject(this.#tooLong(units, predicted, maxWait));
    const cancel = (options as CancellableAcquireOptions | undefined)?.[kWaitCancel];
    return line.enqueue(units, now, now + maxWait, signal, cancel);
  }

  /** `costs`: units drawn from the other budgets (see `budgets`), as `AcquireOptions.costs`. */
  tryAcquire(units = 1, costs?: Costs): Permit | undefined {
    if (!validUnits(units)) throw badUnits('tryAcquire', units);
    if (this.#closed) return undefined;
    const now = this.#clock.now();
    const budgets = this.#budgets;
    if (budgets !== undefined) {
      const drawn = budgets.check(costs, this.#budgetName as string, 'tryAcquire');
      // Behind a waiter it is the head's budgets that hold it back: they were told.
      if (!this.#nobodyWaits()) return undefined;
      const held = this.#refusing(units, drawn, now);
      if (held.length === 0) return this.#grantAll(units, drawn, now, now, false);
      this.#heldBack(held);
      return undefined;
    }
    if (this.#nobodyWaits() && this.#canGrant(units, now)) return this.#grant(units, now, now);
    this.#book.waited = true;
    return undefined;
  }

  /** `acquire` for a limiter of several budgets: every budget drawn from grants at once, FIFO. */
  #acquireBudgets(units: number, options: AcquireOptions | undefined, now: number): Promise<Permit> {
    const budgets = this.#budgets as BudgetSet;
    let costs: Costs;
    try {
      costs = budgets.check(options?.costs, this.#budgetName as string, 'acquire');
    } catch (error) {
      return Promise.reject(error);
    }
    // It heads the line when nobody waits: the budgets that cannot grant it hold it back. Behind
    // a waiter, those that hold the head back hold it back too (they were told).
    let held: readonly string[] = [];
    if (this.#nobodyWaits()) {
      held = this.#refusing(units, costs, now);
      if (held.length === 0) return Promise.resolve(this.#grantAll(units, costs, now, now, false));
      this.#heldBack(held);
    }
    const line = this.#waitingLine();
    const predicted = Math.max(
      this.#bucket.predictWait(units, line.queuedUnits, this.#pause.left(now), now),
      budgets.predictWait(costs, now, true),
    );
    const full = this.#full(units, predicted);
    if (full !== undefined) return Promise.reject(full);
    const maxWait = this.#opts.maxWait - waitedBefore(options);
    if (predicted > maxWait) return Promise.reject(this.#tooLong(units, predicted, maxWait));
    const cancel = (options as CancellableAcquireOptions | undefined)?.[kWaitCancel];
    // The budgets listen to a signal: a cancel of the adapter's aborts one.
    const signal = cancel === undefined ? options?.signal : signalFor(cancel);
    // Before the line's own abort listener: the costs leave with their waiter.
    let entry: BudgetWaiter;
    try {
      entry = budgets.push(costs, signal, held);
    } catch (error) {
      return Promise.reject(error);
    }
    return line.enqueue(units, now, now + maxWait, signal, undefined, entry);
  }

  /** The budgets that cannot grant `units` of the first and `costs` of the others at `now`. */
  #refusing(units: number, costs: Costs, now: number): string[] {
    const held = (this.#budgets as BudgetSet).refusing(costs, now);
    if (!this.#canGrant(units, now)) held.unshift(this.#budgetName as string);
    return held;
  }

  /** Tells the budgets `names` (the first one's name among them or not) they held a request back. */
  #heldBack(names: readonly string[]): void {
    if (names.includes(this.#budgetName as string)) this.#book.waited = true;
    (this.#budgets as BudgetSet).heldBack(names);
  }

  /** Grants `units` of the first budget and `costs` of the others at once. */
  #grantAll(units: number, costs: Costs, now: number, since: number, queued: boolean): Permit {
    const budgets = this.#budgets as BudgetSet;
    // Out of the budgets' line first: the grant tells 'acquired', whose listener may abort this
    // waiter's signal (the budgets then marked the next one, whose costs would be lost).
    if (queued) budgets.shift();
    const first = this.#grant(units, now, since);
    const others = budgets.take(costs, now, since);
    return new BudgetedPermit(
      first,
      this.#budgetName as string,
      others,
      () => this.#line?.kick(this.#clock.now()),
      (name, units) => budgets.refund(name, units),
    );
  }

  /**
   * Charges (or refunds, when negative) units after the request's permit was settled: what an
   * answer really cost, known only at its end (the `usage` at the end of a stream). A number is the
   * first budget's; an object names the budgets (see `budgets`). Waiters may go sooner or later.
   * @throws {InvalidArgumentError} for a value that is no finite number or a budget it does not
   * have (`units.tokns`), before anything is charged.
   */
  charge(units: number | Costs): void {
    checkCharge(units, this.#budgetName, this.#budgets?.names ?? []);
    this.#charge(units, false);
  }

  /**
   * @internal Charges `units` as `charge` does, units the API's announced quotas never counted: a
   * refused call's `usage`, in place of the estimate it gave back. The announced bucket sets no
   * part of them against what its announcements took off (see `AnnouncedBucket.charge`).
   */
  [kChargeUncounted](units: Costs): void {
    checkCharge(units, this.#budgetName, this.#budgets?.names ?? []);
    this.#charge(units, true);
  }

  #charge(units: number | Costs, uncounted: boolean): void {
    const now = this.#clock.now();
    const own = typeof units === 'number' ? units : units[this.#budgetName ?? ''];
    if (own !== undefined && Number.isFinite(own) && own !== 0) this.#bucket.charge(own, now, uncounted);
    if (typeof units === 'object') {
      for (const [name, sub] of this.#subs ?? []) {
        const delta = units[name];
        if (delta !== undefined && Number.isFinite(delta) && delta !== 0) sub.#charge(delta, uncounted);
      }
    }
    this.#line?.kick(now);
  }

  // ---- one budget's books, for the limiter it belongs to (see BudgetSet) --------------------

  /** @internal */
  [kCanGrant](units: number, now: number): boolean {
    return this.#canGrant(units, now);
  }

  /** @internal */
  [kTake](units: number, now: number, since: number): LimiterPermit {
    return this.#grant(units, now, since);
  }

  /** @internal */
  [kReadyAt](units: number, start: number): number {
    const held = this.#ceilings?.heldUntil(this.#grantedUnits, start, units) ?? Number.NEGATIVE_INFINITY;
    return this.#bucket.readyAt(units, Math.max(start, this.#pause.until, held));
  }

  /** @internal */
  [kPredictWait](units: number, queuedUnits: number, now: number): number {
    return this.#bucket.predictWait(units, queuedUnits, this.#pause.left(now), now);
  }

  /** @internal Gives back `units` a request drew and the API never counted (a refused call's draw). */
  [kGiveBack](units: number): void {
    const now = this.#clock.now();
    this.#bucket.charge(-units, now, true);
    this.#line?.kick(now);
  }

  /** @internal This budget held a request of the limiter it belongs to back. */
  [kHeldBack](): void {
    this.#book.waited = true;
  }

  /**
   * Changes options at run time; the rate, the bucket, the queue and the cut bookkeeping are kept.
   * `name`, `clock`, `burst`, `reserve`, `slowStart` and `budgets` are fixed at creation: a new
   * value is a `ConfigError`, the same one is accepted.
   */
  update(options: Partial<AdaptiveLimiterOptions>): void {
    // Not an object (`null`): the constructor's ConfigError, before a field of it is read.
    if (typeof options !== 'object' || options === null) resolveLimiterOptions(options, this.#opts);
    // The name keys the limiter's metrics series and its place in a registry, both made with it:
    // a new one would be told by its events and snapshots only.
    if (options.name !== undefined && options.name !== this.#opts.name) {
      throw new ConfigError(
        [
          {
            path: 'name',
            message:
              "cannot change at run time (its metrics and a registry's key follow the name it was made with)",
            received: options.name,
          },
        ],
        LIMITER_SOURCE,
      );
    }
    if (options.clock !== undefined && options.clock !== this.#clock) {
      throw new ConfigError(
        [{ path: 'clock', message: 'cannot change at run time', received: options.clock }],
        LIMITER_SOURCE,
      );
    }
    // The bucket's kind and reserve and the cold start are built once: a change would be ignored.
    // The same: the first budget's, or (several budgets) the limiter's own options' as made.
    const given = this.#member?.given;
    for (const field of ['burst', 'reserve', 'slowStart'] as const) {
      const value = options[field];
      if (
        value !== undefined &&
        value !== this.#opts[field] &&
        (field === 'slowStart' || value !== given?.[field])
      ) {
        throw new ConfigError(
          [{ path: field, message: 'cannot change at run time', received: value }],
          LIMITER_SOURCE,
        );
      }
    }
    // Those fields kept as built (the first budget's), whichever of the same was given.
    let next = resolveLimiterOptions({ ...options, burst: undefined, reserve: undefined }, this.#opts);
    if (options.budgets !== undefined) {
      // Compared as parsed (a budget's fields in any order), a custom controller by identity.
      if (!sameBudgets(next.budgets, this.#opts.budgets)) {
        throw new ConfigError(
          [{ path: 'budgets', message: 'cannot change at run time', received: options.budgets }],
          LIMITER_SOURCE,
        );
      }
      // Given with its budgets (the options it was made with, say), the first budget's entry
      // overrides the limiter's fields as at construction: its own rates stay. Without them, the
      // rates given are the first budget's (docs/llm.md).
      const own = this.#member === undefined ? undefined : next.budgets?.[this.#member.name];
      if (own !== undefined) next = resolveLimiterOptions(own, next);
    }
    // Given a first rate: the limiter no longer waits a crowd wait (see crowd-wait.ts).
    if (options.initialUnitsPerMinute !== undefined) this.#crowd = undefined;
    const controller =
      options.controller !== undefined ||
      options.aimd !== undefined ||
      options.cubic !== undefined ||
      options.probe !== undefined
        ? resolveController(next.controller, next)
        : undefined;
    const now = this.#clock.now();
    // A new instance count rescales this process's share of what was learned.
    const share = this.#opts.instanceCount / next.instanceCount;
    this.#opts = next;
    this.#book.configure(next, controller, share);
    let rate = this.#bucket.rate * share;
    if (this.#bucket.unlimited && next.initialUnitsPerMinute !== undefined) {
      rate = next.initialUnitsPerMinute / next.instanceCount;
    }
    rate = this.#book.clamp(rate);
    if (rate !== this.#bucket.rate) this.#changeRate(rate, now, 'update');
    this.#updateBudgets(options);
    this.#line?.kick(now);
  }

  /**
   * The options every budget shares (the controller and its options, `instanceCount`, the cut and
   * pause rules) go to the other budgets too; the rates, `budgets`, `burst`, `reserve` and
   * `slowStart` are the first budget's own.
   */
  #updateBudgets(options: Partial<AdaptiveLimiterOptions>): void {
    if (this.#subs === undefined) return;
    const {
      budgets: _budgets,
      initialUnitsPerMinute: _initial,
      minUnitsPerMinute: _min,
      maxUnitsPerMinute: _max,
      burst: _burst,
      reserve: _reserve,
      slowStart: _slowStart,
      name: _name,
      clock: _clock,
      ...shared
    } = options;
    if (Object.keys(shared).length === 0) return;
    for (const [, sub] of this.#subs) sub.update(shared);
  }

  /**
   * Sets the current rate (units/min of this process, clamped to [min, max]) without asking the
   * controller: for an operator, or a coordinator that shares one budget between processes.
   * Like any change of rate it clears `waited`; the cut bookkeeping is kept.
   */
  setRate(rate: number): void {
    if (typeof rate !== 'number' || !(rate > 0))
      throw new InvalidArgumentError('setRate', 'rate', 'must be a positive number', rate);
    const now = this.#clock.now();
    const next = this.#book.clamp(rate);
    if (next !== this.#bucket.rate) this.#changeRate(next, now, 'update');
    this.#line?.kick(now);
  }

  /**
   * @internal Whether this limiter's bucket, or any budget's, owes units past what it holds when
   * full (see `RateGate.owed`): the registry keeps such a limiter until they are paid back.
   */
  [kOwes](): boolean {
    const bucket = this.#bucket;
    bucket.refill(this.#clock.now());
    return bucket.owed > 0 || (this.#subs?.some(([, sub]) => sub[kOwes]()) ?? false);
  }

  /**
   * @internal Puts the paced slots on a grid shared with other processes (see `Pacer.align`):
   * `phase` in [0, 1), `offset` ms from this limiter's clock to the shared one. Nothing with
   * `burst: 'second'` (no slots).
   */
  [kAlignSlots](phase: number, offset: number): void {
    if (!(this.#bucket instanceof Pacer)) return;
    const now = this.#clock.now();
    this.#bucket.align(phase, offset, now);
    this.#line?.kick(now);
  }

  /**
   * Pauses every send for `ms` (capped by `maxPause`), as a Retry-After does, without a cut.
   * A shorter pause than the current one changes nothing.
   */
  pauseFor(ms: number): void {
    if (typeof ms !== 'number' || !(ms >= 0))
      throw new InvalidArgumentError('pauseFor', 'ms', 'must be a number >= 0', ms);
    const now = this.#clock.now();
    const capped = Math.min(ms, this.#opts.maxPause);
    if (capped > 0) this.#pauseFor(now, capped, ms);
    this.#arm(now);
  }

  /** Rejects every waiter (reason `closed`) and every later acquire; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#line?.close();
    for (const [, sub] of this.#subs ?? []) sub.close();
    const listeners = this.#outside?.onClose;
    if (this.#outside) this.#outside.onClose = undefined;
    for (const listener of listeners ?? []) listener();
  }
  /** {@link close}, for `using limiter = new AdaptiveRateLimiter(...)`. */
  [DISPOSE](): void {
    this.close();
  }

  snapshot(): LimiterSnapshot {
    const now = this.#clock.now();
    const bucket = this.#bucket;
    const book = this.#book;
    bucket.refill(now);
    const snapshot: LimiterSnapshot = {
      name: this.#shownName,
      rate: bucket.rate,
      announcedRate: this.#announcedRate(now),
      minRate: book.minRate,
      maxRate: book.maxRate,
      measuredRate: book.measured.value,
      acceptedRate: book.acceptedRate(now),
      tokens: bucket.tokens,
      capacity: bucket.capacity,
      queued: this.#line?.size ?? 0,
      inFlightCap: this.#slowStart?.cap,
      queuedUnits: this.#line?.queuedUnits ?? 0,
      pausedUntil: this.#pause.active(now) ? this.#pause.until : undefined,
      waited: book.waited,
      instanceCount: this.#opts.instanceCount,
      throttles: book.throttles,
      cuts: book.cuts,
      closed: this.#closed,
    };
    // For the head's units when a request waits: a credit too little for it holds it too.
    const held = this.#ceilings?.heldUntil(this.#grantedUnits, now, this.#line?.headUnits || 1);
    if (held !== undefined && held > now) snapshot.heldUntil = held;
    const label = this.#budgetName;
    if (label === undefined) return snapshot;
    snapshot.budget = label;
    if (this.#subs === undefined) return snapshot;
    const budgets: Record<string, LimiterSnapshot> = { [label]: { ...snapshot } };
    // A budget's own limiter never queues: the waiters drawing from it are in this limiter's line.
    const set = this.#budgets as BudgetSet;
    for (const [name, sub] of this.#subs) budgets[name] = { ...sub.snapshot(), ...set.queuedOf(name) };
    snapshot.budgets = budgets;
    return snapshot;
  }

  /**
   * @internal Units/min accepted over the last second (see `AcceptedRate.recent`): a shared
   * budget's estimate before its first cut, as this limiter's own first cut reads it.
   */
  [kRecentAcceptedRate](): number | undefined {
    return this.#book.recentAcceptedRate(this.#clock.now());
  }

  /** @internal When the last answer was counted in the measured send rate (ms; see `MeasuredRate.lastAt`). */
  [kLastAnswerAt](): number | undefined {
    return this.#book.measured.lastAt;
  }

  // ---- feedback from permits -------------------------------------------------------------

  /** @internal */
  [kSuccess](permit: LimiterPermit, unitsUsed: number | undefined, given: Quota): void {
    const now = this.#clock.now();
    const quota = this.#own(given);
    const sentAfter = this.#landed(permit);
    const used = unitsCounted(permit, unitsUsed);
    const book = this.#book;
    book.measured.record(used, now);
    book.accepted.record(used, now);
    const crowd = this.#crowd;
    if (typeof crowd === 'number') {
      if (crowd < CROWD_LEARNED) this.#crowd = crowd + 1;
    } else crowd?.success(this.#pause.active(now) || crowd.sentBefore(permit.grantedAt));
    if (used !== permit.units) this.#bucket.charge(used - permit.units, now);
    if (quota !== undefined || this.#ceilings !== undefined)
      this.#announce(quota, used, now, undefined, sentAfter, permit);
    // After the quota is read: the cold start's cap frees units and kicks the line, and a first
    // answer's reading (a fixed window's credit) must hold what it says is spent.
    this.#answered(permit.units, true, now);
    // A refund may let the head go now (kicked when the cold start is over too).
    if (used !== permit.units) this.#line?.kick(now);
    if (this.#pause.active(now) || this.#bucket.unlimited) return;
    // The built-in controllers raise only after a wait: skip building their state otherwise.
    if (!book.waited && book.builtIn) return;
    // Requests that waited for the announced ceiling say nothing about a higher rate.
    if (this.#bucket.rate >= this.#bucket.ceiling) return;
    const rate = book.success(now, this.#bucket.rate);
    if (rate === undefined) return;
    if (rate !== this.#bucket.rate) this.#changeRate(rate, now, 'success');
    this.#line?.kick(now);
  }

  /** @internal */
  [kThrottled](
    permit: LimiterPermit,
    given: number | undefined,
    givenQuota: Quota,
    quotaWait = false,
    noCut = false,
  ): void {
    if (this.#watched !== watchGeneration()) this.#watched = this.#handToWatchers();
    const now = this.#clock.now();
    const quota = this.#own(givenQuota);
    // A wait that is only an exhausted policy's reset is left to the policy (its learned shape).
    const retryAfterMs = quotaWait && quota?.some((q) => q.remaining === 0) ? undefined : given;
    const sentAfter = this.#landed(permit);
    // Counted as a throttle either way; `noCut`: an answer that is no budget's throttle (see
    // `throttledWithoutCut`) only pauses.
    const cut = this.#book.throttled(permit, now) && !noCut;
    // The pause first: a custom controller that throws must not let sends through a Retry-After.
    const pauseMs =
      retryAfterMs !== undefined && retryAfterMs > 0 ? Math.min(retryAfterMs, this.#opts.maxPause) : 0;
    if (pauseMs > 0 && retryAfterMs !== undefined) this.#pauseFor(now, pauseMs, retryAfterMs);
    else if (retryAfterMs === undefined && quota === undefined) this.#crowdWait(now, permit.grantedAt);
    // A throttled request is not counted against the quota: 0 units of this process's part.
    const announced =
      quota !== undefined || this.#ceilings !== undefined
        ? this.#announce(quota, 0, now, retryAfterMs, sentAfter, permit)
        : 0;
    // The wait left to the policy, which set none (the exhausted policy's name announced twice in
    // the answer, and only the first announcement, with more left, is read): the route's wait stands.
    if (retryAfterMs === undefined && announced === 0 && given !== undefined && given > 0)
      this.#pauseFor(now, Math.min(given, this.#opts.maxPause), given);
    try {
      if (cut) {
        const leavingUnlimited = this.#bucket.unlimited;
        const capped = this.#slowStart !== undefined;
        this.#changeRate(this.#book.cut(now, this.#bucket.rate, capped, permit.units), now, 'throttle');
        // Leaving "unlimited": the server just said no, so the bucket starts empty.
        if (leavingUnlimited) this.#bucket.empty(now);
      }
    } finally {
      // After the pause, the quota and the cut (see kSuccess): the cold start's cap frees its
      // units; a kick before them granted a request into what this answer says is spent.
      this.#answered(permit.units, false, now);
      this.emit('throttled', { limiter: this.#shownName, retryAfterMs: given, cut });
      this.#arm(now);
    }
  }

  /** @internal A failed answer: no cut; one that asks for a wait (a 503 with Retry-After) pauses. */
  [kFailed](
    permit: LimiterPermit,
    retryAfterMs: number | undefined,
    given: Quota,
    counted = true,
    answered = true,
  ): void {
    if (this.#watched !== watchGeneration()) this.#watched = this.#handToWatchers();
    if (counted && this.listenerCount('failed') > 0)
      this.emit('failed', { limiter: this.#shownName, retryAfterMs });
    const quota = this.#own(given);
    const sentAfter = this.#landed(permit);
    if (retryAfterMs !== undefined && retryAfterMs > 0) this.pauseFor(retryAfterMs);
    // No HTTP answer (a transport error, a request not sent) left no policy out: not counted.
    if (quota !== undefined || (answered && this.#ceilings !== undefined)) {
      this.#announce(quota, 0, this.#clock.now(), retryAfterMs, sentAfter, permit);
    } else if (!answered && this.#ceilings !== undefined) {
      // Never sent (see `notSent`): its units are in the grant order, but the API never saw them.
      if (!counted) this.#ceilings.uncounted(permit.units);
      // No answer will read it: it no longer holds a fixed window's credit.
      this.#ceilings.unanswered(permit.grantSeq, permit.units);
      this.#line?.kick(this.#clock.now());
    }
    // After the pause and the quota are read (see kSuccess): the cold start's cap frees its units.
    if (this.#slowStart !== undefined) {
      const now = this.#clock.now();
      this.#answered(permit.units, false, now);
      this.#line?.kick(now);
    }
  }

  /**
   * `permit` was answered (or ends unanswered): its units leave the announced bucket's flight. The
   * units granted after it and still in flight (0 without the announced bucket): its answer's
   * `remaining` has not counted them.
   */
  #landed(permit: LimiterPermit): number {
    return this.#flight === undefined ? 0 : this.#flight.landed(permit, permit.units);
  }

  /**
   * The quotas of this limiter's budget: those naming none, or naming it (a limiter of one budget
   * counts requests: `'requests'`).
   */
  #own(quota: Quota): Quota {
    if (quota === undefined || !quota.some((q) => q.budget !== undefined)) return quota;
    const name = this.#budgetName ?? 'requests';
    const own = quota.filter((q) => q.budget === undefined || q.budget === name);
    return own.length === 0 ? undefined : own;
  }

  /** An answer for `units` came back: the cold start's cap frees them (and grows on a success). */
  #answered(units: number, success: boolean, now: number): void {
    const slow = this.#slowStart;
    if (slow === undefined) return;
    if (!slow.answered(units, success, this.#line?.size ?? 0)) this.#slowStart = undefined;
    this.#line?.kick(now);
  }

  /**
   * A 429 with no Retry-After and no quota: a limiter that has not learned a rate, and has never
   * been told a quota, waits a random crowd wait (see crowd-wait.ts).
   */
  #crowdWait(now: number, grantedAt: number): void {
    let crowd = this.#crowd;
    if (crowd === undefined || this.#ceilings !== undefined) return;
    // Nothing is granted while paused: a 429 now answers a request sent before the pause began
    // (one of a burst that met the empty bucket together), not another 429 in a row; so does
    // one answered after the wait for a request granted before it began.
    if (this.#pause.active(now)) return;
    if (typeof crowd !== 'number' && crowd.sentBefore(grantedAt)) return;
    if (typeof crowd === 'number') {
      // A limiter that has learned the rate never needs the state.
      if (crowd >= CROWD_LEARNED) return;
      crowd = new CrowdWait(crowd);
      this.#crowd = crowd;
    }
    // Drawn within `maxPause` too: a wait cut to it would send the whole crowd back together.
    const { maxWait, maxPause } = this.#opts;
    const wait = crowd.throttled(drawFrom(this.#opts.random), Math.min(maxWait, maxPause), now);
    if (wait > 0) this.#pauseFor(now, wait, wait);
  }

  /** @internal A shared budget's local limiter: no crowd wait (the budget's books answer). */
  [kNoCrowdWait](): void {
    this.#crowd = undefined;
  }

  // ---- announced quotas (see ceiling.ts) ----------------------------------------------------

  /**
   * The answer to `permit`, for `ownUnits` units, announced `quota` (or nothing): the ceiling
   * moves, and a policy with nothing left pauses until its reset, unless the answer had a
   * Retry-After, which wins.
   */
  #announce(
    given: Quota,
    ownUnits: number,
    now: number,
    retryAfterMs: number | undefined,
    sentAfter: number,
    permit: LimiterPermit,
  ): number {
    this.#ceilings ??= new Ceilings(this.#announced === undefined);
    const ceilings = this.#ceilings;
    let quota = given;
    // Limits read from `remaining` alone (see limit-floor.ts), kept with the ceilings (one field
    // fewer on every limiter), made at the first such quota.
    if (quota !== undefined && (ceilings.floors !== undefined || quota.some(lowerBound))) {
      ceilings.floors ??= new LimitFloors();
      quota = ceilings.floors.apply(quota);
    }
    // A fixed window's credit used up (see `Ceilings.heldUntil`): a newer reading computes it again.
    const line = this.#line;
    const held = line !== undefined && ceilings.heldUntil(this.#grantedUnits, now, line.headUnits || 1) > now;
    const { pauseMs, requestedMs } = ceilings.answer(
      quota,
      ownUnits,
      now,
      this.#opts,
      permit.grantSeq,
      permit.units,
    );
    if (pauseMs > 0 && retryAfterMs === undefined) {
      this.#pauseFor(now, pauseMs, requestedMs);
      this.#arm(now);
    }
    this.#applyCeiling(now);
    if (this.#announced !== undefined && quota !== undefined) {
      this.#announced.sync(quota, this.#flight?.units ?? 0, now, sentAfter);
      this.#line?.kick(now);
    } else if (held) this.#line?.kick(now);
    return pauseMs;
  }

  /** Gives the bucket the lowest fresh ceiling at `now`; waiters may go sooner or later. */
  #applyCeiling(now: number): void {
    const ceilings = this.#ceilings;
    if (ceilings === undefined) return;
    const ceiling = ceilings.applyTo(this.#bucket, now);
    const quotaRate = ceilings.longRun(now);
    this.#book.announcedQuotaRate = Number.isFinite(quotaRate) ? quotaRate : undefined;
    if (ceiling === undefined) return;
    this.#book.announcedRate = Number.isFinite(ceiling) ? ceiling : undefined;
    this.#line?.kick(now);
  }

  #announcedRate(now: number): number | undefined {
    if (this.#ceilings?.expired(now)) this.#applyCeiling(now);
    return this.#book.announcedRate;
  }

  // ---- internals ---------------------------------------------------------------------------

  #pauseFor(now: number, ms: number, requestedMs: number): void {
    const until = now + ms;
    if (this.#pause.extend(now, until, this.#book.lastCutAt)) {
      this.emit('paused', { limiter: this.#shownName, until, ms, requestedMs });
    }
  }

  #changeRate(rate: number, now: number, cause: 'throttle' | 'success' | 'update'): void {
    const from = this.#bucket.rate;
    // A rate takes over from the cold start's cap.
    if (rate !== Number.POSITIVE_INFINITY) this.#slowStart = undefined;
    this.#bucket.setRate(rate, now);
    // Requests still queued wait under the new rate too (of several budgets: if this one held
    // the head back).
    const holdsHead = this.#member?.holdsHead;
    this.#book.waited = holdsHead === undefined ? !this.#nobodyWaits() : holdsHead();
    if (rate < from) this.emit('decreased', { limiter: this.#shownName, from, to: rate, cause });
    else if (cause !== 'throttle')
      this.emit('increased', { limiter: this.#shownName, from, to: rate, cause });
  }

  #canGrant(units: number, now: number): boolean {
    const ceilings = this.#ceilings;
    if (ceilings !== undefined) {
      if (ceilings.expired(now)) this.#applyCeiling(now);
      // A fixed window's credit used up (see `Ceilings.heldUntil`): held until an answer or its reset.
      if (ceilings.heldUntil(this.#grantedUnits, now, units) > now) return false;
    }
    return (
      !this.#pause.active(now) &&
      this.#bucket.canTake(units, now) &&
      (this.#slowStart === undefined || this.#slowStart.allows(units))
    );
  }

  #grant(units: number, now: number, since: number): LimiterPermit {
    if (this.#watched !== watchGeneration()) this.#watched = this.#handToWatchers();
    this.#book.accepted.open(now);
    this.#slowStart?.granted(units);
    if (this.#bucket.unlimited) this.#book.grantedUnlimited(units, now);
    this.#bucket.take(units, now, since < now);
    this.#grantedUnits += units;
    const permit = new LimiterPermit(this, units, this.#book.epoch, now - since, now, this.#grantedUnits);
    this.#flight?.granted(permit, units);
    if (this.listenerCount('acquired') > 0) {
      this.emit('acquired', { limiter: this.#shownName, units, waited: now - since });
    }
    return permit;
  }

  /** @internal See {@link WaitBound}: this limiter's `maxWait`, refused as its rate wait is (`max-wait`). */
  [kWaitBound](): WaitBound {
    return {
      clock: this.#clock,
      maxWait: this.#opts.maxWait,
      refuse: (units, what, waitedMs) => {
        const max = this.#opts.maxWait;
        const left = waitedMs > 0 ? `the ${Math.max(0, Math.floor(max - waitedMs))} ms left of ` : '';
        return this.#rejection('max-wait', units, `no ${what} within ${left}maxWait ${max} ms`);
      },
      closed: (units) => (this.#closed ? this.#rejection('closed', units, 'closed') : undefined),
      // The admission checks of `acquire`, telling nobody (another budget's wait is not predicted).
      refusesNow: (units, waitedMs) => {
        if (this.#closed) return true;
        const now = this.#clock.now();
        if (this.#waitingAtLimit()) return true;
        return this[kPredictWait](units, this.#line?.queuedUnits ?? 0, now) > this.#opts.maxWait - waitedMs;
      },
      onClose: (listener) => {
        if (this.#closed) return;
        this.#outside ??= { waiting: 0, onClose: undefined };
        this.#outside.onClose ??= new Set();
        this.#outside.onClose.add(listener);
      },
      wait: (units) => {
        const full = this.#full(units);
        if (full !== undefined) return full;
        this.#outside ??= { waiting: 0, onClose: undefined };
        const outside = this.#outside;
        outside.waiting++;
        let waiting = true;
        return () => {
          if (!waiting) return;
          waiting = false;
          outside.waiting--;
        };
      },
    };
  }

  /**
   * The one `queueLimit` rule, for every wait of this limiter's requests: the refusal of `units`
   * (`queue-full`) when the requests waiting already, in its line or for an adapter's
   * `maxConcurrent` slot, reach `queueLimit`; `undefined` while there is room.
   */
  #full(units: number, predicted?: number): RateLimitRejectedError | undefined {
    if (!this.#waitingAtLimit()) return undefined;
    const outside = this.#outside?.waiting ?? 0;
    const waiting = (this.#line?.size ?? 0) + outside;
    const slots = outside > 0 ? ` (${outside} of them for a maxConcurrent slot)` : '';
    const detail = `queue full: ${waiting} of ${this.#opts.queueLimit} waiting${slots}`;
    return this.#rejection('queue-full', units, detail, predicted);
  }

  /** Whether the requests waiting, in the line or for an adapter's slot, reach `queueLimit` (see {@link #full}). */
  #waitingAtLimit(): boolean {
    return (this.#line?.size ?? 0) + (this.#outside?.waiting ?? 0) >= this.#opts.queueLimit;
  }

  #tooLong(units: number, predicted: number, maxWait: number): RateLimitRejectedError {
    const max = this.#opts.maxWait;
    const left = maxWait < max ? `the ${Math.max(0, Math.floor(maxWait))} ms left of ` : '';
    const detail = `predicted wait ${Math.ceil(predicted)} ms is longer than ${left}maxWait ${max} ms`;
    return this.#rejection('max-wait', units, detail, predicted);
  }

  #rejection(
    reason: RejectionReason,
    units: number,
    detail: string,
    waitMs?: number,
  ): RateLimitRejectedError {
    if (this.#watched !== watchGeneration()) this.#watched = this.#handToWatchers();
    return refusal((e) => this.emit('rejected', e), this.#shownName, reason, units, detail, waitMs);
  }

  // ---- the waiting line --------------------------------------------------------------------

  #nobodyWaits(): boolean {
    return this.#line === undefined || this.#line.size === 0;
  }

  /** Arms the one timer for the head's turn or deadline, or a pause's end. */
  #arm(now: number): void {
    // Without a line there is no waiter: only a pause to end needs one (none once closed).
    if (this.#line !== undefined) this.#line.arm(now);
    else if (this.#pause.resumePending && !this.#closed) this.#waitingLine().arm(now);
  }

  /** The line, made at the first wait or pause: an idle limiter carries neither it nor a timer. */
  #waitingLine(): WaitingLine {
    const budgets = this.#budgets;
    const gate = budgets === undefined ? this.#bucket : budgetsGate(this.#bucket, budgets);
    this.#line ??= new WaitingLine(this.#clock, gate, this.#pause, {
      maxWait: () => this.#opts.maxWait,
      canGrant: (units, now) => {
        if (budgets === undefined) return this.#canGrant(units, now);
        const held = this.#refusing(units, budgets.head(), now);
        if (held.length === 0) return true;
        // The head waits on: the budgets that cannot grant it are told.
        this.#heldBack(held);
        budgets.holdHead(held);
        return false;
      },
      heldUntil: (units, now) => {
        if (this.#slowStart !== undefined && !this.#slowStart.allows(units)) return Number.POSITIVE_INFINITY;
        return this.#ceilings?.heldUntil(this.#grantedUnits, now, units) ?? Number.NEGATIVE_INFINITY;
      },
      grant: (units, now, since) => {
        if (budgets === undefined) {
          this.#book.waited = true;
          return this.#grant(units, now, since);
        }
        // Served after its wait: the budgets that held it back are told again.
        this.#heldBack(budgets.headHeld());
        return this.#grantAll(units, budgets.head(), now, since, true);
      },
      rejection: (reason, units, detail, waitMs, behind) => {
        // The line rejects from its head (an expired waiter) or every waiter in order (closed),
        // or a waiter behind the head whose deadline came first.
        if (budgets !== undefined) {
          if (behind === undefined) budgets.shift();
          else budgets.drop(behind.tag as BudgetWaiter);
        }
        return this.#rejection(reason, units, detail, waitMs);
      },
      resumed: () => this.emit('resumed', { limiter: this.#shownName }),
      // Its costs leave the budgets' line too (they listened to its signal; the line could not).
      notQueued: (tag) => budgets?.drop(tag as BudgetWaiter),
      canceled: (units, waited, reason) => {
        if (this.#watched !== watchGeneration()) this.#watched = this.#handToWatchers();
        // An adapter's close refuses its waits (the limiter left open): the caller gets that
        // refusal, and the listeners hear it as one.
        if (reason instanceof RateLimitRejectedError) {
          this.emit('rejected', {
            limiter: this.#shownName,
            units,
            reason: reason.reason,
            message: reason.message,
          });
        } else if (this.listenerCount('canceled') > 0) {
          this.emit('canceled', { limiter: this.#shownName, units, waited });
        }
      },
    });
    return this.#line;
  }
}

type Quota = readonly AnnouncedQuota[] | undefined;

function validUnits(units: unknown): units is number {
  return typeof units === 'number' && units > 0 && units < Number.POSITIVE_INFINITY;
}

function badUnits(method: string, units: unknown): InvalidArgumentError {
  return new InvalidArgumentError(method, 'units', 'must be a positive finite number', units);
}

/** Whether `quota` carries a limit read from its `remaining` (see limit-floor.ts). */
function lowerBound(quota: AnnouncedQuota | undefined): boolean {
  return (quota as ReadQuota | undefined)?.limitIsLowerBound === true;
}
