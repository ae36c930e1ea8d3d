import { z } from 'zod';
import { type Clock, MAX_TIMER_MS, systemClock } from '../clock.js';
import { RateLimitRejectedError, type RejectionReason } from '../errors.js';
import { LazyEmitter, type LimiterEventMap } from './events.js';
import { configErrorFrom, LIMITER_DEFAULTS, limiterFieldsSchema } from './options.js';
import { Fifo } from './queue.js';
import type { AcquireOptions, Permit, RateLimiter, WrapOptions } from './types.js';
import { wrapWithLimiter } from './wrap.js';

/** Permits are counted in floats when units are; a shortfall below this is no shortfall. */
const EPSILON = 1e-9;

/** Options of a {@link FixedWindowRateLimiter} (Resilience4j's `RateLimiterConfig`). */
export interface FixedWindowLimiterOptions {
  /** Names the limiter in errors, events and snapshots. @default 'default' */
  name?: string;
  /** Units granted per cycle (an integer >= 1). */
  limitForPeriod: number;
  /** Length of a cycle (ms, > 0); cycles count from the limiter's creation. */
  limitRefreshPeriod: number;
  /** Longest wait for units (ms, >= 0); a caller that would wait longer is rejected at once. 0: never wait. */
  timeoutDuration: number;
  /** The time source. @default systemClock */
  clock?: Clock;
}

/** The events of a fixed-window limiter: the adaptive limiter's `acquired` and `rejected`. */
export type FixedWindowEventMap = Pick<LimiterEventMap, 'acquired' | 'rejected'>;

/** What {@link FixedWindowRateLimiter.snapshot} reports. */
export interface FixedWindowSnapshot {
  name: string;
  limitForPeriod: number;
  limitRefreshPeriod: number;
  timeoutDuration: number;
  /** Units left in the current cycle; negative: reserved by waiters from later cycles. */
  availablePermissions: number;
  /** The current cycle, counted from 0 at the limiter's creation. */
  activeCycle: number;
  queued: number;
  closed: boolean;
}

const optionsSchema = z.object({
  name: limiterFieldsSchema.shape.name,
  limitForPeriod: z.number().int().min(1),
  limitRefreshPeriod: z.number().positive().finite(),
  timeoutDuration: z.number().nonnegative().finite(),
  clock: limiterFieldsSchema.shape.clock,
});
const SOURCE = 'fixed-window limiter options';

interface Waiter {
  readonly units: number;
  /** Units taken from the permissions: its own, plus the rest of a cycle it did not fit in. */
  readonly reserved: number;
  readonly since: number;
  readonly resolve: (permit: Permit) => void;
  readonly reject: (error: unknown) => void;
  readonly signal: AbortSignal | undefined;
  onAbort?: () => void;
  dead: boolean;
}

/**
 * Resilience4j's `AtomicRateLimiter`: cycles of `limitRefreshPeriod` counted from creation, each
 * granting `limitForPeriod` units. Its state is Resilience4j's: the active cycle and the units left
 * in it, negative when waiters have reserved later cycles' units; idle cycles are added (up to one
 * cycle's worth) on the next call, so nothing runs while idle. A caller whose units are left in
 * the current cycle gets them at once; otherwise it reserves them and waits, first in first out,
 * for the start of the cycle that covers them, if that is within `timeoutDuration`. If not, it is
 * rejected at once (reason `timeout`) and reserves nothing: Resilience4j parks the thread for the
 * whole timeout first, which only delays a known failure. One timer serves the whole queue.
 *
 * Where we differ or go further: a request that does not fit in what is left of a cycle also
 * reserves that rest, unused (Resilience4j spends it and so sends more than `limitForPeriod` in
 * the next cycle). A request of more than `limitForPeriod` units is rejected at once (reason
 * `timeout`): no cycle can hold it. An aborted waiter returns all it reserved and those behind
 * move up. `changeLimitForPeriod` applies from the next cycle, to current waiters too (they may
 * wait longer or shorter than predicted); `changeTimeoutDuration` applies to new callers only.
 */
export class FixedWindowRateLimiter extends LazyEmitter<FixedWindowEventMap> implements RateLimiter {
  readonly name: string;
  readonly #clock: Clock;
  readonly #createdAt: number;
  readonly #period: number;
  #limit: number;
  #timeout: number;
  #cycle = 0;
  #permits: number;
  readonly #queue = new Fifo<Waiter>();
  /** Units reserved by the waiters. */
  #reserved = 0;
  #timer: unknown;
  #timerAt = Number.POSITIVE_INFINITY;
  #closed = false;

  constructor(options: FixedWindowLimiterOptions) {
    super();
    const parsed = optionsSchema.safeParse(options);
    if (!parsed.success) throw configErrorFrom(parsed.error, options, SOURCE);
    const o = parsed.data;
    this.name = o.name ?? LIMITER_DEFAULTS.name;
    this.#clock = o.clock ?? systemClock;
    this.#createdAt = this.#clock.now();
    this.#period = o.limitRefreshPeriod;
    this.#limit = o.limitForPeriod;
    this.#timeout = o.timeoutDuration;
    this.#permits = o.limitForPeriod;
  }

  acquire(units = 1, options?: AcquireOptions): Promise<Permit> {
    const invalid = checkUnits('acquire', units);
    if (invalid) return Promise.reject(invalid);
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#closed) return Promise.reject(this.#rejection('closed', units, 'closed'));
    const now = this.#clock.now();
    this.#drain(now);
    if (units > this.#limit) {
      const detail = `${units} units can never be served: limitForPeriod is ${this.#limit} per cycle`;
      return Promise.reject(this.#rejection('timeout', units, detail));
    }
    if (this.#queue.size === 0 && units <= this.#permits + EPSILON) {
      this.#permits -= units;
      return Promise.resolve(this.#grant(units, 0));
    }
    const rest = this.#restOfLastCycle();
    const reserved = rest + EPSILON < units ? units + rest : units;
    const cycles = this.#cyclesUntilCovered(reserved - this.#permits);
    const wait = this.#startOf(this.#cycle + cycles) - now;
    if (wait > this.#timeout) {
      const detail = `${units} units would wait ${Math.ceil(wait)} ms for cycle ${this.#cycle + cycles}, longer than timeoutDuration ${this.#timeout} ms`;
      return Promise.reject(this.#rejection('timeout', units, detail));
    }
    this.#permits -= reserved;
    this.#reserved += reserved;
    return new Promise<Permit>((resolve, reject) => {
      const waiter: Waiter = { units, reserved, since: now, resolve, reject, signal, dead: false };
      if (signal) {
        waiter.onAbort = () => this.#abort(waiter);
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.#queue.push(waiter);
      this.#arm(now);
    });
  }

  tryAcquire(units = 1): Permit | undefined {
    const invalid = checkUnits('tryAcquire', units);
    if (invalid) throw invalid;
    if (this.#closed) return undefined;
    this.#drain(this.#clock.now());
    if (this.#queue.size > 0 || units > this.#permits + EPSILON) return undefined;
    this.#permits -= units;
    return this.#grant(units, 0);
  }

  wrap<A extends unknown[], R>(
    fn: (...args: A) => Promise<R>,
    options?: WrapOptions<R>,
  ): (...args: A) => Promise<R> {
    return wrapWithLimiter(this, fn, options);
  }

  /** Sets the units per cycle from the next cycle on; the current cycle's permits stay as they are. */
  changeLimitForPeriod(limitForPeriod: number): void {
    const parsed = optionsSchema.shape.limitForPeriod.safeParse(limitForPeriod);
    if (!parsed.success) throw configErrorFrom(parsed.error, limitForPeriod, SOURCE, 'limitForPeriod');
    this.#drain(this.#clock.now()); // the cycles elapsed so far count at the old limit
    this.#limit = parsed.data;
    this.#update();
  }

  /** Sets the longest wait for callers from now on; current waiters keep their place. */
  changeTimeoutDuration(timeoutDuration: number): void {
    const parsed = optionsSchema.shape.timeoutDuration.safeParse(timeoutDuration);
    if (!parsed.success) throw configErrorFrom(parsed.error, timeoutDuration, SOURCE, 'timeoutDuration');
    this.#timeout = parsed.data;
  }

  snapshot(): FixedWindowSnapshot {
    this.#drain(this.#clock.now());
    return {
      name: this.name,
      limitForPeriod: this.#limit,
      limitRefreshPeriod: this.#period,
      timeoutDuration: this.#timeout,
      availablePermissions: this.#permits,
      activeCycle: this.#cycle,
      queued: this.#queue.size,
      closed: this.#closed,
    };
  }

  /** Rejects every waiter (reason `closed`) and every later acquire; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#clearTimer();
    for (const waiter of this.#queue.drain()) {
      this.#permits += waiter.reserved;
      this.#settle(waiter);
      waiter.reject(this.#rejection('closed', waiter.units, `closed with ${waiter.units} units waiting`));
    }
    this.#reserved = 0;
  }

  #startOf(cycle: number): number {
    return this.#createdAt + cycle * this.#period;
  }

  /** The cycle `now` falls in, consistent with {@link #startOf} despite float rounding. */
  #cycleAt(now: number): number {
    let cycle = Math.floor((now - this.#createdAt) / this.#period);
    if (this.#startOf(cycle + 1) <= now) cycle++;
    else if (this.#startOf(cycle) > now) cycle--;
    return cycle;
  }

  /** Units left in the last cycle with reservations (the current one when nobody waits). */
  #restOfLastCycle(): number {
    if (this.#permits >= 0) return this.#permits;
    const rest = ((this.#permits % this.#limit) + this.#limit) % this.#limit;
    return rest > this.#limit - EPSILON ? 0 : rest;
  }

  /** Full cycles after the current one until `shortfall` units are covered (0: covered now). */
  #cyclesUntilCovered(shortfall: number): number {
    return shortfall <= EPSILON ? 0 : Math.ceil((shortfall - EPSILON) / this.#limit);
  }

  /** Adds the elapsed cycles' permits, then grants the waiters they cover, in order. */
  #drain(now: number): void {
    const cycle = this.#cycleAt(now);
    if (cycle > this.#cycle) {
      this.#permits = Math.min(this.#permits + (cycle - this.#cycle) * this.#limit, this.#limit);
      this.#cycle = cycle;
    }
    // Waiters' units are already taken from `#permits`; the head is covered when what is left
    // without the reservations behind it would hold it.
    for (let head = this.#queue.peek(); head !== undefined; head = this.#queue.peek()) {
      if (this.#cyclesUntilCovered(head.reserved - this.#permits - this.#reserved) > 0) return;
      this.#queue.shift();
      this.#reserved -= head.reserved;
      this.#settle(head);
      head.resolve(this.#grant(head.units, now - head.since));
    }
  }

  /** Arms the one timer for the start of the cycle that covers the head; none when nobody waits. */
  #arm(now: number): void {
    const head = this.#queue.peek();
    if (this.#closed || head === undefined) {
      this.#clearTimer();
      return;
    }
    const shortfall = head.reserved - this.#permits - this.#reserved;
    const at = this.#startOf(this.#cycle + Math.max(1, this.#cyclesUntilCovered(shortfall)));
    if (this.#timer !== undefined && this.#timerAt <= at) return;
    this.#clearTimer();
    this.#timerAt = at;
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, at - now));
    this.#timer = this.#clock.setTimeout(() => this.#onTimer(), delay);
  }

  #onTimer(): void {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    this.#update();
  }

  /** Grants what is due, then arms the timer for the next in line. */
  #update(now = this.#clock.now()): void {
    this.#drain(now);
    this.#arm(now);
  }

  #clearTimer(): void {
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
  }

  #abort(waiter: Waiter): void {
    if (waiter.dead) return;
    this.#queue.kill(waiter);
    this.#reserved -= waiter.reserved;
    this.#permits += waiter.reserved;
    this.#settle(waiter);
    waiter.reject(waiter.signal?.reason);
    this.#update(); // a smaller next in line may be covered already
  }

  #settle(waiter: Waiter): void {
    waiter.dead = true;
    if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort);
  }

  #grant(units: number, waited: number): Permit {
    this.emit('acquired', { limiter: this.name, units, waited });
    return permitOf(units);
  }

  #rejection(reason: RejectionReason, units: number, detail: string): RateLimitRejectedError {
    const error = new RateLimitRejectedError(reason, this.name, detail);
    this.emit('rejected', { limiter: this.name, units, reason, message: error.message });
    return error;
  }
}

function checkUnits(method: string, units: number): RangeError | undefined {
  if (units > 0 && units < Number.POSITIVE_INFINITY) return undefined;
  return new RangeError(`${method}: units must be a positive finite number, received ${units}`);
}

const ignore = (): void => {};

/** A fixed window does not adapt: the feedback is accepted and ignored. */
function permitOf(units: number): Permit {
  return { units, success: ignore, throttled: ignore, failed: ignore };
}
