import { type Clock, MAX_TIMER_MS, systemClock } from '../clock.js';
import { resolveController } from '../controllers/index.js';
import type { RateController, RateControllerState } from '../controllers/types.js';
import { ConfigError, RateLimitRejectedError, type RejectionReason } from '../errors.js';
import { TokenBucket } from './bucket.js';
import { LazyEmitter, type LimiterEventMap } from './events.js';
import { MeasuredRate } from './measured-rate.js';
import {
  type AdaptiveLimiterOptions,
  type ResolvedLimiterOptions,
  resolveLimiterOptions,
} from './options.js';
import { Pause } from './pause.js';
import { LimiterPermit, type PermitSink } from './permit.js';
import { Fifo } from './queue.js';
import type { AcquireOptions, Permit, RateLimiter, WrapOptions } from './types.js';
import { wrapWithLimiter } from './wrap.js';

/**
 * Real timers fire up to a millisecond off their float target; a head that became ready by its
 * deadline is still served when its timer fires within this slack after it. (A manual clock fires
 * timers exactly, so there the deadline is strict.)
 */
const TIMER_SLACK_MS = 1;
/** The least step of the timer when the head is due now but rounding kept it from going. */
const MIN_STEP_MS = 1e-3;

interface Waiter {
  readonly units: number;
  readonly enqueuedAt: number;
  /** Latest time it may be granted (ms on the clock); it is rejected then. */
  readonly deadline: number;
  readonly resolve: (permit: Permit) => void;
  readonly reject: (error: unknown) => void;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  dead: boolean;
}

/** What {@link AdaptiveRateLimiter.snapshot} reports. Rates in units/min, times on the limiter's clock (ms). */
export interface LimiterSnapshot {
  name: string;
  /** Current rate of this process; `Infinity` before the first throttle when no initial rate is set. */
  rate: number;
  minRate: number;
  maxRate: number;
  measuredRate: number | undefined;
  /** Units in the bucket now (negative: owed by a request larger than the burst). */
  tokens: number;
  /** Burst capacity in units: one second of the rate, at least one unit. */
  capacity: number;
  queued: number;
  queuedUnits: number;
  /** End of the current Retry-After pause, or `undefined` when not paused. */
  pausedUntil: number | undefined;
  waited: boolean;
  instanceCount: number;
  throttles: number;
  cuts: number;
  closed: boolean;
}

/**
 * The adaptive limiter: a token bucket refilled at a rate a {@link RateController} moves, a
 * FIFO queue of waiters, Retry-After pauses, and the cut rules of the spec. Synchronous inside:
 * every state change happens in one call, and at most one timer is armed (none when idle).
 *
 * The bucket holds one second of the rate (at least one unit) and starts full. A request larger
 * than the bucket is served once the bucket is full and leaves it in debt, so the long-run rate
 * holds for any request size.
 */
export class AdaptiveRateLimiter extends LazyEmitter<LimiterEventMap> implements RateLimiter, PermitSink {
  readonly #clock: Clock;
  #opts: ResolvedLimiterOptions;
  #controller: RateController;
  /** AIMD or CUBIC, which answer `undefined` to a success when nothing waited. */
  #builtIn = true;
  #onTimerBound: (() => void) | undefined;
  #minRate = 0;
  #maxRate = 0;

  readonly #bucket: TokenBucket;
  readonly #pause = new Pause();

  // queue and timer
  readonly #queue = new Fifo<Waiter>();
  #queuedUnits = 0;
  #timer: unknown;
  #timerAt = Number.POSITIVE_INFINITY;
  #timerKeepsAlive = false;

  // controller bookkeeping
  readonly #measured: MeasuredRate;
  #lastCutAt: number;
  #lastIncreaseAt: number;
  #rateBeforeLastDecrease: number;
  #measuredAtLastDecrease: number | undefined;
  #cutEpoch = 0;
  #cuts = 0;
  #throttles = 0;
  #waited = false;
  /** Units granted while unlimited, and when the first was: the send rate a first cut starts from. */
  #unlimitedUnits = 0;
  #firstGrantAt: number | undefined;
  #closed = false;

  constructor(options: AdaptiveLimiterOptions = {}) {
    super();
    this.#opts = resolveLimiterOptions(options);
    this.#controller = resolveController(this.#opts.controller, this.#opts);
    this.#builtIn = typeof this.#opts.controller === 'string';
    this.#clock = options.clock ?? systemClock;
    const now = this.#clock.now();
    this.#lastCutAt = now;
    this.#lastIncreaseAt = now;
    this.#measured = new MeasuredRate();
    this.#applyShares();
    const initial = this.#opts.initialUnitsPerMinute;
    const rate = initial === undefined ? this.#maxRate : initial / this.#opts.instanceCount;
    this.#bucket = new TokenBucket(rate, now);
    this.#rateBeforeLastDecrease = rate;
  }

  get name(): string {
    return this.#opts.name;
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
    if (!validUnits(units)) return Promise.reject(badUnits(units));
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#closed) return Promise.reject(this.#rejection('closed', units, 'closed'));
    const now = this.#clock.now();
    if (this.#queue.size === 0 && this.#canGrant(units, now)) {
      return Promise.resolve(this.#grant(units, now, now));
    }
    this.#waited = true;
    if (this.#queue.size >= this.#opts.queueLimit) {
      const detail = `queue full: ${this.#queue.size} of ${this.#opts.queueLimit} waiting`;
      return Promise.reject(this.#rejection('queue-full', units, detail));
    }
    const predicted = this.#bucket.predictWait(units, this.#queuedUnits, this.#pause.left(now), now);
    if (predicted > this.#opts.maxWait) {
      const detail = `predicted wait ${Math.ceil(predicted)} ms is longer than maxWait ${this.#opts.maxWait} ms`;
      return Promise.reject(this.#rejection('max-wait', units, detail));
    }
    return new Promise<Permit>((resolve, reject) => {
      const waiter: Waiter = {
        units,
        enqueuedAt: now,
        deadline: now + this.#opts.maxWait,
        resolve,
        reject,
        signal,
        onAbort: undefined,
        dead: false,
      };
      if (signal) {
        waiter.onAbort = () => this.#abort(waiter);
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.#queue.push(waiter);
      this.#queuedUnits += units;
      this.#arm(now);
    });
  }

  tryAcquire(units = 1): Permit | undefined {
    if (!validUnits(units)) throw badUnits(units);
    if (this.#closed) return undefined;
    const now = this.#clock.now();
    if (this.#queue.size === 0 && this.#canGrant(units, now)) return this.#grant(units, now, now);
    this.#waited = true;
    return undefined;
  }

  wrap<A extends unknown[], R>(
    fn: (...args: A) => Promise<R>,
    options?: WrapOptions<R>,
  ): (...args: A) => Promise<R> {
    return wrapWithLimiter(this, fn, options);
  }

  /** Changes options at run time; the rate, the bucket, the queue and the cut bookkeeping are kept. */
  update(options: Partial<AdaptiveLimiterOptions>): void {
    if (options.clock !== undefined && options.clock !== this.#clock) {
      throw new ConfigError([
        { path: 'clock', message: 'cannot change at run time', received: options.clock },
      ]);
    }
    const next = resolveLimiterOptions(options, this.#opts);
    const controller =
      options.controller !== undefined || options.aimd !== undefined || options.cubic !== undefined
        ? resolveController(next.controller, next)
        : this.#controller;
    const now = this.#clock.now();
    const share = this.#opts.instanceCount / next.instanceCount;
    this.#opts = next;
    this.#controller = controller;
    this.#builtIn = typeof next.controller === 'string';
    this.#applyShares();
    // A new instance count rescales this process's share of what was learned.
    let rate = this.#bucket.rate * share;
    this.#rateBeforeLastDecrease *= share;
    if (this.#bucket.unlimited && next.initialUnitsPerMinute !== undefined) {
      rate = next.initialUnitsPerMinute / next.instanceCount;
    }
    rate = clamp(rate, this.#minRate, this.#maxRate);
    if (rate !== this.#bucket.rate) this.#changeRate(rate, now, 'update');
    this.#kick(now);
  }

  /**
   * Sets the current rate (units/min of this process, clamped to [min, max]) without asking the
   * controller: for an operator, or a coordinator that shares one budget between processes.
   * Like any change of rate it clears `waited`; the cut bookkeeping is kept.
   */
  setRate(rate: number): void {
    if (!(rate > 0))
      throw new ConfigError([{ path: 'rate', message: 'expected a positive number', received: rate }]);
    const now = this.#clock.now();
    const next = clamp(rate, this.#minRate, this.#maxRate);
    if (next !== this.#bucket.rate) this.#changeRate(next, now, 'update');
    this.#kick(now);
  }

  /**
   * Pauses every send for `ms` (capped by `maxPause`), as a Retry-After does, without a cut.
   * A shorter pause than the current one changes nothing.
   */
  pauseFor(ms: number): void {
    if (!(ms >= 0)) throw new ConfigError([{ path: 'ms', message: 'expected a number >= 0', received: ms }]);
    const now = this.#clock.now();
    const capped = Math.min(ms, this.#opts.maxPause);
    if (capped > 0) this.#pauseFor(now, capped, ms);
    this.#arm(now);
  }

  /** Rejects every waiter (reason `closed`) and every later acquire; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    for (const waiter of this.#queue.drain()) {
      this.#queuedUnits -= waiter.units;
      this.#settleWaiter(waiter);
      waiter.reject(this.#rejection('closed', waiter.units, `closed with ${waiter.units} units waiting`));
    }
    this.#queuedUnits = 0;
  }

  snapshot(): LimiterSnapshot {
    const now = this.#clock.now();
    const bucket = this.#bucket;
    bucket.refill(now);
    return {
      name: this.#opts.name,
      rate: bucket.rate,
      minRate: this.#minRate,
      maxRate: this.#maxRate,
      measuredRate: this.#measured.value,
      tokens: bucket.tokens,
      capacity: bucket.capacity,
      queued: this.#queue.size,
      queuedUnits: this.#queuedUnits,
      pausedUntil: this.#pause.active(now) ? this.#pause.until : undefined,
      waited: this.#waited,
      instanceCount: this.#opts.instanceCount,
      throttles: this.#throttles,
      cuts: this.#cuts,
      closed: this.#closed,
    };
  }

  // ---- feedback from permits -------------------------------------------------------------

  /** @internal */
  _success(permit: LimiterPermit, unitsUsed: number | undefined): void {
    const now = this.#clock.now();
    const used =
      unitsUsed !== undefined && unitsUsed >= 0 && Number.isFinite(unitsUsed) ? unitsUsed : permit.units;
    this.#measured.record(used, now);
    if (used !== permit.units) {
      this.#bucket.charge(used - permit.units, now);
      this.#kick(now); // a refund may let the head go now
    }
    if (this.#pause.active(now) || this.#bucket.unlimited) return;
    // The built-in controllers raise only after a wait: skip building their state otherwise.
    if (!this.#waited && this.#builtIn) return;
    const next = this.#controller.onSuccess(this.#state(now, this.#bucket.rate));
    if (next === undefined || !Number.isFinite(next)) return;
    this.#lastIncreaseAt = now;
    this.#waited = false;
    const rate = clamp(next, this.#minRate, this.#maxRate);
    if (rate !== this.#bucket.rate) this.#changeRate(rate, now, 'success');
    this.#kick(now);
  }

  /** @internal */
  _throttled(permit: LimiterPermit, retryAfterMs: number | undefined): void {
    const now = this.#clock.now();
    this.#measured.record(permit.units, now);
    this.#throttles++;
    this.#lastIncreaseAt = now;
    const cut =
      permit.epoch === this.#cutEpoch &&
      (this.#cuts === 0 || now - this.#lastCutAt >= this.#opts.decreaseCooldown);
    // The pause first: a custom controller that throws must not let sends through a Retry-After.
    const pauseMs =
      retryAfterMs !== undefined && retryAfterMs > 0 ? Math.min(retryAfterMs, this.#opts.maxPause) : 0;
    if (pauseMs > 0 && retryAfterMs !== undefined) this.#pauseFor(now, pauseMs, retryAfterMs);
    try {
      if (cut) this.#cut(now);
    } finally {
      this.emit('throttled', { limiter: this.#opts.name, retryAfterMs, cut });
      this.#arm(now);
    }
  }

  /** @internal A failed answer that asks for a wait (a 503 with Retry-After): pause, no cut. */
  _failed(retryAfterMs: number): void {
    if (retryAfterMs > 0) this.pauseFor(retryAfterMs);
  }

  // ---- internals ---------------------------------------------------------------------------

  #applyShares(): void {
    const n = this.#opts.instanceCount;
    this.#minRate = this.#opts.minUnitsPerMinute / n;
    this.#maxRate = this.#opts.maxUnitsPerMinute / n;
  }

  #cut(now: number): void {
    const leavingUnlimited = this.#bucket.unlimited;
    let base = this.#bucket.rate;
    let measured = this.#measured.value;
    if (leavingUnlimited) {
      // Unlimited until now: start from what was sent. The smoothed rate may hold a bucket that
      // closed while the first burst was still in flight, so the units sent since the first
      // grant (over at least a second) are a floor.
      const since = this.#firstGrantAt ?? now;
      const average = (this.#unlimitedUnits * 60_000) / Math.max(now - since, 1_000);
      base = clamp(Math.max(measured ?? 0, average), this.#minRate, this.#maxRate);
      // That estimate stands as the measured rate too, so CUBIC's W is not cut twice.
      measured = base;
    }
    const state = this.#state(now, base);
    const proposed = this.#controller.onThrottled(
      measured === state.measuredRate ? state : { ...state, measuredRate: measured },
    );
    const target = Number.isFinite(proposed) ? Math.min(proposed, base) : base;
    this.#rateBeforeLastDecrease = base;
    this.#measuredAtLastDecrease = measured;
    this.#pause.cut();
    this.#lastCutAt = now;
    this.#cutEpoch++;
    this.#cuts++;
    this.#changeRate(clamp(target, this.#minRate, this.#maxRate), now, 'throttle');
    // Leaving "unlimited": the server just said no, so the bucket starts empty.
    if (leavingUnlimited) this.#bucket.tokens = 0;
  }

  #pauseFor(now: number, ms: number, requestedMs: number): void {
    const until = now + ms;
    if (this.#pause.extend(now, until, this.#lastCutAt)) {
      this.emit('paused', { limiter: this.#opts.name, until, ms, requestedMs });
    }
  }

  #state(now: number, rate: number): RateControllerState {
    return {
      rate,
      minRate: this.#minRate,
      maxRate: this.#maxRate,
      rateBeforeLastDecrease: this.#rateBeforeLastDecrease,
      measuredRateAtLastDecrease: this.#measuredAtLastDecrease,
      sinceLastDecrease: now - this.#lastCutAt,
      pauseSinceLastDecrease: this.#pause.sinceCut(now, this.#lastCutAt),
      sinceLastIncrease: now - this.#pause.increaseClockFrom(now, this.#lastIncreaseAt),
      waited: this.#waited,
      instanceCount: this.#opts.instanceCount,
      measuredRate: this.#measured.value,
    };
  }

  #changeRate(rate: number, now: number, cause: 'throttle' | 'success' | 'update'): void {
    const from = this.#bucket.rate;
    this.#bucket.setRate(rate, now);
    // Requests still queued wait under the new rate too.
    this.#waited = this.#queue.size > 0;
    if (rate < from) this.emit('decreased', { limiter: this.#opts.name, from, to: rate, cause });
    else if (cause !== 'throttle')
      this.emit('increased', { limiter: this.#opts.name, from, to: rate, cause });
  }

  #canGrant(units: number, now: number): boolean {
    return !this.#pause.active(now) && this.#bucket.canTake(units, now);
  }

  #grant(units: number, now: number, since: number): Permit {
    if (this.#bucket.unlimited) {
      this.#unlimitedUnits += units;
      this.#firstGrantAt ??= now;
    }
    this.#bucket.take(units);
    if (this.listenerCount('acquired') > 0) {
      this.emit('acquired', { limiter: this.#opts.name, units, waited: now - since });
    }
    return new LimiterPermit(this, units, this.#cutEpoch);
  }

  /** Serves whoever may go now, then arms the timer for the rest. */
  #kick(now: number): void {
    this.#drain(now);
    this.#arm(now);
  }

  /** Arms the one timer for the next event: the head's turn, its deadline, or a pause's end. */
  #arm(now: number): void {
    if (this.#closed) return;
    let at = this.#pause.resumePending ? this.#pause.until : Number.POSITIVE_INFINITY;
    const head = this.#queue.peek();
    if (head !== undefined) {
      at = Math.min(at, head.deadline, this.#bucket.readyAt(head.units, Math.max(now, this.#pause.until)));
    }
    if (at === Number.POSITIVE_INFINITY) {
      // Nothing to wait for (the last waiter left): no timer when idle.
      if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#timerAt = Number.POSITIVE_INFINITY;
      return;
    }
    // The head could not go now (drain ran first): float rounding at large clock values may put
    // its turn at `now`, so step at least a microsecond to make progress.
    if (at <= now) at = now + MIN_STEP_MS;
    // A waiter keeps the process alive until it is served: an exit must not drop it silently.
    const keepAlive = head !== undefined;
    if (this.#timer !== undefined) {
      if (this.#timerAt <= at && (this.#timerKeepsAlive || !keepAlive)) return;
      this.#clock.clearTimeout(this.#timer);
    }
    this.#timerAt = at;
    this.#timerKeepsAlive = keepAlive;
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, at - now));
    this.#onTimerBound ??= () => this.#onTimer();
    this.#timer = this.#clock.setTimeout(this.#onTimerBound, delay, keepAlive);
  }

  #onTimer(): void {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = this.#clock.now();
    if (this.#pause.resumePending && !this.#pause.active(now)) {
      this.#pause.resumePending = false;
      this.emit('resumed', { limiter: this.#opts.name });
    }
    this.#kick(now);
  }

  #drain(now: number): void {
    for (let head = this.#queue.peek(); head !== undefined; head = this.#queue.peek()) {
      if (this.#canGrant(head.units, now)) {
        if (now > head.deadline + TIMER_SLACK_MS) {
          this.#expire(head);
          continue;
        }
        this.#queue.shift();
        this.#queuedUnits -= head.units;
        this.#settleWaiter(head);
        this.#waited = true;
        head.resolve(this.#grant(head.units, now, head.enqueuedAt));
      } else if (now >= head.deadline) {
        this.#expire(head);
      } else {
        return;
      }
    }
  }

  #expire(waiter: Waiter): void {
    this.#queue.shift();
    this.#queuedUnits -= waiter.units;
    this.#settleWaiter(waiter);
    const waited = this.#clock.now() - waiter.enqueuedAt;
    const detail = `waited ${Math.round(waited)} ms, maxWait is ${this.#opts.maxWait} ms`;
    waiter.reject(this.#rejection('max-wait', waiter.units, detail));
  }

  #abort(waiter: Waiter): void {
    if (waiter.dead) return;
    this.#queue.kill(waiter);
    this.#queuedUnits -= waiter.units;
    this.#settleWaiter(waiter);
    waiter.reject(waiter.signal?.reason);
    // The next in line may be served sooner now.
    this.#kick(this.#clock.now());
  }

  #settleWaiter(waiter: Waiter): void {
    waiter.dead = true;
    if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort);
  }

  #rejection(reason: RejectionReason, units: number, detail: string): RateLimitRejectedError {
    const error = new RateLimitRejectedError(reason, this.#opts.name, detail);
    this.emit('rejected', { limiter: this.#opts.name, units, reason, message: error.message });
    return error;
  }
}

function validUnits(units: unknown): units is number {
  return typeof units === 'number' && units > 0 && units < Number.POSITIVE_INFINITY;
}

function badUnits(units: unknown): ConfigError {
  return new ConfigError(
    [{ path: 'units', message: 'expected a positive finite number', received: units }],
    'acquire arguments',
  );
}

function clamp(value: number, min: number, max: number): number {
  return value < min ? min : Math.min(value, max);
}
