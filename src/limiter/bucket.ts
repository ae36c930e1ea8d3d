/** Tokens are floats; a request that lacks less than this many units is served. */
const EPSILON = 1e-9;
/** What `owed` reads as nothing: a draw's rounding, far below a unit. */
const OWED_EPSILON = 1e-6;

/**
 * What the limiter asks of its budget of units: the one-second {@link TokenBucket}, or the
 * {@link Pacer}. Rates are units/min (`Infinity`: unlimited); times are ms on the limiter's clock.
 * A `ceiling` (the lowest rate the API announced) caps the rate units are sent at, unlimited or
 * not, without changing `rate` (the controller's): both gates send at min(rate, ceiling).
 */
export interface RateGate {
  rate: number;
  /** The controller's rate is unlimited (a ceiling may still cap what is sent). */
  readonly unlimited: boolean;
  /** The announced ceiling (units/min); `Infinity` when none. */
  readonly ceiling: number;
  /** The rate units are sent at (units/min): the lower of `rate` and `ceiling`. */
  readonly sendRate: number;
  /** Units that may go at once after an idle spell. */
  readonly capacity: number;
  /** Units free now (negative: owed). */
  readonly tokens: number;
  /**
   * Units owed beyond what the gate holds when full, as of its last refill: what a call larger
   * than the bucket, or an answer above its estimate, left to pay back, which a new gate would
   * not know of. 0 for the pacer's next slot after a request of at most its capacity, and for a
   * free gate.
   */
  readonly owed: number;
  refill(now: number): void;
  /** Changes the rate from `now`, after crediting the old rate up to now. */
  setRate(rate: number, now: number): void;
  /** Changes the ceiling from `now` (`Infinity`: none), after crediting the old one up to now. */
  setCeiling(ceiling: number, now: number): void;
  /** Whether `units` may be taken at `now`. */
  canTake(units: number, now: number): boolean;
  /** Takes `units` at `now`; `waited`: for a waiter the timer granted. */
  take(units: number, now: number, waited?: boolean): void;
  /** Nothing free from `now` (leaving "unlimited" on a throttle). */
  empty(now: number): void;
  /**
   * Charges (or refunds, when negative) `delta` units; `uncounted`: units of a request the API
   * never counted (a refused call's draw, given back before its answer is read, or its `usage`,
   * charged in their place).
   */
  charge(delta: number, now: number, uncounted?: boolean): void;
  /** The time (ms) at which `units` may be taken, counting from `start`, if nobody takes any before. */
  readyAt(units: number, start: number): number;
  /**
   * When the waiting line's timer should wake for a head of `units` ready at `ready`, with
   * `queuedUnits` waiting in all (the pacer wakes later to serve several slots at once); none:
   * at `ready`.
   */
  wakeAt?(units: number, ready: number, queuedUnits: number): number;
  /** ms until `units` would be served behind `queuedUnits` waiting units and a pause of `pause` ms. */
  predictWait(units: number, queuedUnits: number, pause: number, now: number): number;
}

/**
 * A token bucket of units refilled at a rate in units/min; times are ms on the limiter's clock.
 * It holds one second of the rate (at least one unit) and starts full. A request larger than the
 * bucket is served once the bucket is full and leaves it in debt (negative tokens), so the
 * long-run rate holds for any request size. An infinite rate is "unlimited": everything may go,
 * except during a pause. A `ceiling` (the lowest rate the API announced) caps the rate the bucket
 * refills at, unlimited or not, without changing `rate` (the controller's). The
 * {@link AnnouncedBucket} is this bucket with the size an API announces ({@link capacityOf} and
 * {@link resize} are what it changes).
 */
export class TokenBucket implements RateGate {
  /** Units/min; `Infinity` when unlimited. */
  rate: number;
  /** Units: one second of the rate, at least one. */
  capacity: number;
  /** Units now available (negative: owed by a request larger than the bucket). */
  tokens: number;
  /** The announced ceiling (units/min); `Infinity` when none. */
  ceiling = Number.POSITIVE_INFINITY;
  /** The rate the bucket refills at: the lower of `rate` and `ceiling` (units/min). */
  #refillRate: number;
  #refilledAt: number;

  constructor(rate: number, now: number) {
    this.rate = rate;
    this.#refillRate = rate;
    this.capacity = oneSecondOf(rate);
    this.tokens = this.capacity;
    this.#refilledAt = now;
  }

  /** The controller's rate is unlimited (a ceiling may still cap what is sent). */
  get unlimited(): boolean {
    return this.rate === Number.POSITIVE_INFINITY;
  }

  /** Nothing caps what is sent: neither the rate nor a ceiling. */
  get owed(): number {
    // Past the draw's rounding (`canTake` lets a draw leave EPSILON owed).
    return this.free || this.tokens >= -OWED_EPSILON ? 0 : -this.tokens;
  }

  protected get free(): boolean {
    return this.#refillRate === Number.POSITIVE_INFINITY;
  }

  /** The rate units are sent at (units/min): the lower of the rate and the ceiling. */
  get sendRate(): number {
    return this.#refillRate;
  }

  refill(now: number): void {
    const elapsed = now - this.#refilledAt;
    if (elapsed <= 0) return;
    this.#refilledAt = now;
    if (!this.free)
      this.tokens = Math.min(this.capacity, this.tokens + (elapsed * this.#refillRate) / 60_000);
  }

  /** Changes the rate from `now`, after crediting the old rate up to now. */
  setRate(rate: number, now: number): void {
    this.refill(now);
    this.rate = rate;
    this.resize();
  }

  /** Changes the ceiling from `now` (`Infinity`: none), after crediting the old one up to now. */
  setCeiling(ceiling: number, now: number): void {
    this.refill(now);
    this.ceiling = ceiling;
    this.resize();
  }

  /** Sets the refill rate and the size from `rate` and `ceiling`; the level is kept within the size. */
  protected resize(): void {
    this.#refillRate = Math.min(this.rate, this.ceiling);
    this.capacity = this.capacityOf(this.#refillRate);
    if (this.tokens > this.capacity) this.tokens = this.capacity;
  }

  /** The size of the bucket at a refill rate of `rate` units/min. */
  protected capacityOf(rate: number): number {
    return oneSecondOf(rate);
  }

  /** Whether `units` may be taken at `now`: enough units, or a full bucket. */
  canTake(units: number, now: number): boolean {
    if (this.free) return true;
    this.refill(now);
    return this.tokens + EPSILON >= this.#need(units);
  }

  take(units: number, _now?: number): void {
    if (!this.free) this.tokens -= units;
  }

  empty(now: number): void {
    this.refill(now);
    this.tokens = 0;
  }

  /** Charges (or refunds, when negative) `delta` units: a permit whose answer corrected its cost. */
  charge(delta: number, now: number): void {
    if (this.free) return;
    this.refill(now);
    this.tokens = Math.min(this.capacity, this.tokens - delta);
  }

  /** The time (ms) at which `units` may be taken, counting from `start` (now, or a pause's end), if nobody takes any before. */
  readyAt(units: number, start: number): number {
    if (this.free) return start;
    const perMs = this.#refillRate / 60_000;
    const tokensAtStart = Math.min(this.capacity, this.tokens + (start - this.#refilledAt) * perMs);
    return start + Math.max(0, this.#need(units) - tokensAtStart) / perMs;
  }

  /** ms until a request of `units` would be served behind `queuedUnits` waiting units and a pause of `pause` ms. */
  predictWait(units: number, queuedUnits: number, pause: number, now: number): number {
    if (this.free) return pause;
    this.refill(now);
    const perMs = this.#refillRate / 60_000;
    const tokensAfterPause = Math.min(this.capacity, this.tokens + pause * perMs);
    const deficit = queuedUnits + this.#need(units) - tokensAfterPause;
    return pause + Math.max(0, deficit) / perMs;
  }

  /** Units a request needs in the bucket to be served: all of them, or a full bucket. */
  #need(units: number): number {
    return Math.min(units, this.capacity);
  }
}

/** One second of `rate` units/min, at least one unit (`Infinity` for an infinite rate). */
function oneSecondOf(rate: number): number {
  return rate === Number.POSITIVE_INFINITY ? Number.POSITIVE_INFINITY : Math.max(rate / 60, 1);
}
