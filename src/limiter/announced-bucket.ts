import type { RateGate } from './bucket.js';
import type { AnnouncedQuota } from './types.js';

/** Tokens are floats; a request that lacks less than this many units is served. */
const EPSILON = 1e-9;

/**
 * The bucket an API announces (`burst: 'announced'`), for APIs that meter a continuously refilling
 * bucket and say how full it is (LLM APIs: `limit` per minute and `remaining`). Before any
 * announcement it is the one-second bucket (unlimited while the rate is). Once a quota with a
 * `limit` and a `remaining` arrives, it holds the announced `limit` less a reserve (`reserveMs` of
 * the rate: calls granted in one order reach the server in another, and a bucket spent to its last
 * unit would draw 429s), starts at `remaining` less that reserve and less the units still in
 * flight, and refills at min(rate, ceiling): the full bucket is spent at the start, then grants
 * are paced by the refill. Each later announcement lowers the level to its `remaining` less the
 * reserve when that is lower (other clients drain the same quota). A request larger than the
 * bucket is served once the bucket is full and leaves it in debt, so the long-run rate holds for
 * any size. Rates are units/min; times ms on the limiter's clock.
 */
export class AnnouncedBucket implements RateGate {
  rate: number;
  capacity: number;
  tokens: number;
  ceiling = Number.POSITIVE_INFINITY;
  readonly #reserveMs: number;
  /** The announced bucket size (units); `undefined` until announced. */
  #limit: number | undefined;
  #refillRate: number;
  #refilledAt: number;

  constructor(rate: number, now: number, reserveMs: number) {
    this.rate = rate;
    this.#refillRate = rate;
    this.#reserveMs = reserveMs;
    this.capacity = this.#capacityOf(rate);
    this.tokens = this.capacity;
    this.#refilledAt = now;
  }

  get unlimited(): boolean {
    return this.rate === Number.POSITIVE_INFINITY;
  }

  get #free(): boolean {
    return this.#refillRate === Number.POSITIVE_INFINITY;
  }

  get sendRate(): number {
    return this.#refillRate;
  }

  /** Units kept back from the announced bucket: `reserveMs` of the refill rate. */
  get reserve(): number {
    return this.#free ? 0 : (this.#reserveMs * this.#refillRate) / 60_000;
  }

  /**
   * Reads an announcement: the first quota with a `limit` and a `remaining` sizes the bucket; the
   * level becomes its `remaining` less the reserve and less `inFlight` (units granted and not yet
   * answered) at the first announcement, and at most that afterwards.
   */
  sync(quotas: readonly AnnouncedQuota[], inFlight: number, now: number): void {
    const quota = quotas.find((q) => finite(q.limit) && (q.limit as number) > 0 && finite(q.remaining));
    if (quota === undefined) return;
    this.refill(now);
    const first = this.#limit === undefined;
    this.#limit = quota.limit as number;
    this.#resize();
    if (this.#free) return;
    const announced = (quota.remaining as number) - this.reserve;
    const level = first ? announced - inFlight : announced;
    this.tokens = Math.min(this.capacity, first ? level : Math.min(this.tokens, level));
  }

  refill(now: number): void {
    const elapsed = now - this.#refilledAt;
    if (elapsed <= 0) return;
    this.#refilledAt = now;
    if (!this.#free)
      this.tokens = Math.min(this.capacity, this.tokens + (elapsed * this.#refillRate) / 60_000);
  }

  setRate(rate: number, now: number): void {
    this.refill(now);
    this.rate = rate;
    this.#resize();
  }

  setCeiling(ceiling: number, now: number): void {
    this.refill(now);
    this.ceiling = ceiling;
    this.#resize();
  }

  #resize(): void {
    const wasFree = this.#free;
    this.#refillRate = Math.min(this.rate, this.ceiling);
    this.capacity = this.#capacityOf(this.#refillRate);
    // Leaving "free": the level is unknown until announced; a full bucket of the new size.
    if (wasFree && !this.#free) this.tokens = this.capacity;
    if (this.tokens > this.capacity) this.tokens = this.capacity;
  }

  #capacityOf(rate: number): number {
    if (rate === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
    if (this.#limit === undefined) return Math.max(rate / 60, 1);
    return Math.max(this.#limit - (this.#reserveMs * rate) / 60_000, 1);
  }

  canTake(units: number, now: number): boolean {
    if (this.#free) return true;
    this.refill(now);
    return this.tokens + EPSILON >= this.#need(units);
  }

  take(units: number, _now?: number): void {
    if (!this.#free) this.tokens -= units;
  }

  empty(now: number): void {
    this.refill(now);
    this.tokens = 0;
  }

  charge(delta: number, now: number): void {
    if (this.#free) return;
    this.refill(now);
    this.tokens = Math.min(this.capacity, this.tokens - delta);
  }

  readyAt(units: number, start: number): number {
    if (this.#free) return start;
    const perMs = this.#refillRate / 60_000;
    const tokensAtStart = Math.min(this.capacity, this.tokens + (start - this.#refilledAt) * perMs);
    return start + Math.max(0, this.#need(units) - tokensAtStart) / perMs;
  }

  predictWait(units: number, queuedUnits: number, pause: number, now: number): number {
    if (this.#free) return pause;
    this.refill(now);
    const perMs = this.#refillRate / 60_000;
    const tokensAfterPause = Math.min(this.capacity, this.tokens + pause * perMs);
    const deficit = queuedUnits + this.#need(units) - tokensAfterPause;
    return pause + Math.max(0, deficit) / perMs;
  }

  #need(units: number): number {
    return Math.min(units, this.capacity);
  }
}

function finite(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}
