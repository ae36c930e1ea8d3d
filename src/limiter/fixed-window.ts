import { z } from 'zod';
import { type Clock, MAX_TIMER_MS, systemClock } from '../clock.js';
import { configErrorFrom, InvalidArgumentError, type RateLimitRejectedError } from '../errors.js';
import { kWaitBound } from '../internal.js';
import { issueMessage } from '../issue-message.js';
import { redactText } from '../redact.js';
import { LazyEmitter, type LimiterEventMap, refusal } from './events.js';
import { Fifo } from './fifo.js';
import { clockSchema, LIMITER_DEFAULTS, limiterFieldsSchema } from './options.js';
import { HeadNudges, type Nudge, type OneTimer, OWN_WAKES, wakeOwn } from './own-wakes.js';
import { badOptions, checkQuota, checkUnitsUsed, checkWait, waitedBefore } from './permit.js';
import type { AcquireOptions, AnnouncedQuota, Permit, RateLimiter, WaitBound } from './types.js';

type Quota = readonly AnnouncedQuota[] | undefined;

/** Permits are counted in floats when units are; a shortfall below this is no shortfall. */
const EPSILON = 1e-9;

/** Options of a {@link FixedWindowRateLimiter} (Resilience4j's `RateLimiterConfig`). */
export interface FixedWindowLimiterOptions {
  /**
   * Names the limiter in errors, events and snapshots, with its secrets masked there (see
   * `AdaptiveLimiterOptions.name`); `limiter.name` keeps it as given. @default 'default'
   */
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
  /** The limiter's name, its secrets masked (`redactText`) as in its events and errors. */
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

const optionsSchema = z
  .object({
    name: limiterFieldsSchema.shape.name,
    limitForPeriod: z.number().int().min(1),
    limitRefreshPeriod: z.number().positive().finite(),
    timeoutDuration: z.number().nonnegative().finite(),
    clock: clockSchema.optional(),
  })
  // A misspelled option (`timeoutDurations`) is a ConfigError naming the one meant, never ignored.
  .strict();
const SOURCE = 'fixed-window limiter options';

interface Waiter {
  readonly units: number;
  /** The cycle whose units it is granted; set when it is queued, and again on a re-plan. */
  cycle: number;
  readonly since: number;
  readonly resolve: (permit: Permit) => void;
  readonly reject: (error: unknown) => void;
  readonly signal: AbortSignal | undefined;
  onAbort?: () => void;
  dead: boolean;
  /** Tells it it is the head, or that the timer moved (`OWN_WAKES`, see `wakeOwn`). */
  nudge?: Nudge;
  /**
   * The latest its cycle may start (ms): when it was queued, plus `timeoutDuration` less what its
   * request waited before (`OWN_WAKES`, see `#replan`).
   */
  deadline?: number;
}

/**
 * Resilience4j's `AtomicRateLimiter`: cycles of `limitRefreshPeriod` counted from creation, each
 * granting `limitForPeriod` units. Idle cycles are added (up to one cycle's worth) on the next
 * call, so nothing runs while idle. A caller whose units are left in the current cycle gets them
 * at once; otherwise it waits, first in first out, for the start of the cycle that holds it, if
 * that is within `timeoutDuration`. If not, it is rejected at once (reason `timeout`) and reserves
 * nothing: Resilience4j parks the thread for the whole timeout first, which only delays a known
 * failure. One timer serves the whole queue.
 *
 * Waiters are packed into cycles in queue order: each goes in the cycle of the waiter before it if
 * it fits in what that cycle has left, else in the next cycle, leaving that rest unused
 * (Resilience4j spends it and so sends more than `limitForPeriod` in the next cycle). Each waiter
 * keeps its cycle, so no cycle is granted more than its limit. A request of more than
 * `limitForPeriod` units that does not fit in the current cycle is rejected at once (reason
 * `timeout`): no cycle can hold it.
 *
 * An aborted waiter gives up its place and the waiters behind it are packed again, so they may
 * move up (a waiter that now fits in the current cycle is granted in a microtask).
 * `changeLimitForPeriod` applies from the next cycle, to current waiters too: they are packed
 * again at the new limit (they may wait longer or shorter than predicted), and a waiter larger
 * than the new limit is rejected (reason `timeout`, "can never be served"), as a new caller of
 * that size would be. `changeTimeoutDuration` applies to new callers only.
 */
export class FixedWindowRateLimiter extends LazyEmitter<FixedWindowEventMap> implements RateLimiter {
  readonly name: string;
  /** The name as the limiter shows it (events, refusals, snapshot): its secrets masked, see `redactText`. */
  readonly #shownName: string;
  readonly #clock: Clock;
  readonly #createdAt: number;
  readonly #period: number;
  #limit: number;
  #timeout: number;
  #cycle = 0;
  /** Units left in the current cycle, not counting what waiters will get in later cycles. */
  #left: number;
  readonly #queue = new Fifo<Waiter>();
  /** The cycle of the last waiter, and the units that cycle has left after it (when any wait). */
  #tailCycle = 0;
  #tailLeft = 0;
  /** An abort left the plan with a gap: pack the waiters again before anything else. */
  #stale = false;
  #updateQueued = false;
  #timer: unknown;
  #timerAt = Number.POSITIVE_INFINITY;
  /** The armed timer's mark: a timer left behind by a wake of a waiter's own does nothing (`OWN_WAKES`). */
  #timerMark: object | undefined;
  #headNudges: HeadNudges | undefined;
  #closed = false;
  /** Told when it closes: the gates whose requests wait for a slot outside the queue. */
  #onClose: Set<() => void> | undefined;

  constructor(options: FixedWindowLimiterOptions) {
    super();
    const parsed = optionsSchema.safeParse(options, { error: issueMessage });
    if (!parsed.success) throw configErrorFrom(parsed.error, options, SOURCE, '', optionsSchema);
    const o = parsed.data;
    this.name = o.name ?? LIMITER_DEFAULTS.name;
    this.#shownName = redactText(this.name);
    this.#clock = o.clock ?? systemClock;
    this.#createdAt = this.#clock.now();
    this.#period = o.limitRefreshPeriod;
    this.#limit = o.limitForPeriod;
    this.#timeout = o.timeoutDuration;
    this.#left = o.limitForPeriod;
  }

  acquire(units = 1, options?: AcquireOptions): Promise<Permit> {
    const invalid = checkUnits('acquire', units);
    if (invalid) return Promise.reject(invalid);
    const bad = badOptions('acquire', options);
    if (bad) return Promise.reject(bad);
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#closed)
      return Promise.reject(
        refusal((e) => this.emit('rejected', e), this.#shownName, 'closed', units, 'closed'),
      );
    const now = this.#clock.now();
    this.#drain(now);
    if (this.#queue.size === 0 && units <= this.#left + EPSILON) {
      this.#left -= units;
      return Promise.resolve(this.#grant(units, 0));
    }
    const place = this.#placeOf(units);
    if (place === undefined) return Promise.reject(this.#neverServed(units));
    const { cycle, left } = place;
    const wait = this.#startOf(cycle) - now;
    const within = this.#timeout - waitedBefore(options);
    if (wait > within) {
      const detail = `${units} units would wait ${Math.ceil(wait)} ms for cycle ${cycle}, longer than timeoutDuration ${this.#timeout} ms`;
      return Promise.reject(
        refusal((e) => this.emit('rejected', e), this.#shownName, 'timeout', units, detail, wait),
      );
    }
    this.#tailCycle = cycle;
    this.#tailLeft = left - units;
    let queued: Waiter | undefined;
    const waiting = new Promise<Permit>((resolve, reject) => {
      const waiter: Waiter = { units, cycle, since: now, resolve, reject, signal, dead: false };
      if (signal) {
        waiter.onAbort = () => this.#abort(waiter);
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.#queue.push(waiter);
      this.#arm(now);
      queued = waiter;
    });
    // Its own wakes (see wakeOwn): a timer at the start of the cycle before its own (it moves up a
    // cycle when the waiters ahead of it leave; its deadline only refuses it once a missed cycle
    // put it past it, see #replan), and while it is the head or the one behind it, a timer at the
    // limiter's.
    const waiter = queued;
    if (OWN_WAKES && waiter !== undefined) {
      waiter.deadline = now + within;
      waiter.nudge = wakeOwn(
        this.#clock,
        waiting,
        this.#asOneTimer(),
        Number.POSITIVE_INFINITY,
        () => this.#queue.peek() === waiter || this.#queue.peekSecond() === waiter,
        () => (waiter.dead ? undefined : this.#startOf(waiter.cycle - 1)),
      );
    }
    return waiting;
  }

  /** The limiter as its waiters' own wakes see it (`OWN_WAKES`). */
  #asOneTimer(): OneTimer {
    const limiter = this;
    return {
      get timerAt() {
        return limiter.#timerAt;
      },
      get closed() {
        return limiter.#closed;
      },
      fire() {
        limiter.#timerMark = undefined;
        limiter.#onTimer();
      },
    };
  }

  tryAcquire(units = 1): Permit | undefined {
    const invalid = checkUnits('tryAcquire', units);
    if (invalid) throw invalid;
    if (this.#closed) return undefined;
    this.#drain(this.#clock.now());
    if (this.#queue.size > 0 || units > this.#left + EPSILON) return undefined;
    this.#left -= units;
    return this.#grant(units, 0);
  }

  /**
   * Sets the units per cycle from the next cycle on; the current cycle's permits stay as they are.
   * Current waiters are packed again at the new limit; one larger than it is rejected (reason `timeout`).
   */
  changeLimitForPeriod(limitForPeriod: number): void {
    const parsed = optionsSchema.shape.limitForPeriod.safeParse(limitForPeriod, { error: issueMessage });
    if (!parsed.success)
      throw badArgument('changeLimitForPeriod', 'limitForPeriod', parsed.error, limitForPeriod);
    this.#drain(this.#clock.now()); // the cycles elapsed so far count at the old limit
    this.#limit = parsed.data;
    this.#replan();
    this.#update();
  }

  /** Sets the longest wait for callers from now on; current waiters keep their place. */
  changeTimeoutDuration(timeoutDuration: number): void {
    const parsed = optionsSchema.shape.timeoutDuration.safeParse(timeoutDuration, { error: issueMessage });
    if (!parsed.success)
      throw badArgument('changeTimeoutDuration', 'timeoutDuration', parsed.error, timeoutDuration);
    this.#timeout = parsed.data;
  }

  snapshot(): FixedWindowSnapshot {
    this.#drain(this.#clock.now());
    return {
      name: this.#shownName,
      limitForPeriod: this.#limit,
      limitRefreshPeriod: this.#period,
      timeoutDuration: this.#timeout,
      availablePermissions: this.#available(),
      activeCycle: this.#cycle,
      queued: this.#queue.size,
      closed: this.#closed,
    };
  }

  /**
   * @internal See {@link WaitBound}: `timeoutDuration`, refused as a permit's wait is (`timeout`);
   * its close, told to the gates (`closed`), as its queue's waiters are refused.
   */
  [kWaitBound](): WaitBound {
    return {
      clock: this.#clock,
      maxWait: this.#timeout,
      refuse: (units, what, waitedMs) => {
        const max = this.#timeout;
        const left = waitedMs > 0 ? `the ${Math.max(0, Math.floor(max - waitedMs))} ms left of ` : '';
        const detail = `no ${what} within ${left}timeoutDuration ${max} ms`;
        return refusal((e) => this.emit('rejected', e), this.#shownName, 'timeout', units, detail);
      },
      closed: (units) =>
        this.#closed
          ? refusal((e) => this.emit('rejected', e), this.#shownName, 'closed', units, 'closed')
          : undefined,
      // The checks of `acquire` that refuse at once, telling nobody.
      refusesNow: (units, waitedMs) => {
        if (this.#closed) return true;
        const now = this.#clock.now();
        this.#drain(now);
        if (this.#queue.size === 0 && units <= this.#left + EPSILON) return false;
        const place = this.#placeOf(units);
        return place === undefined || this.#startOf(place.cycle) - now > this.#timeout - waitedMs;
      },
      onClose: (listener) => {
        if (this.#closed) return;
        this.#onClose ??= new Set();
        this.#onClose.add(listener);
      },
    };
  }

  /** Rejects every waiter (reason `closed`) and every later acquire; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#clearTimer();
    for (const waiter of this.#queue.drain()) {
      this.#settle(waiter);
      waiter.reject(
        refusal(
          (e) => this.emit('rejected', e),
          this.#shownName,
          'closed',
          waiter.units,
          `closed with ${waiter.units} units waiting`,
        ),
      );
    }
    this.#stale = false;
    const listeners = this.#onClose;
    this.#onClose = undefined;
    for (const listener of listeners ?? []) listener();
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

  /**
   * Resilience4j's available permissions: the units left in the current cycle less those the
   * waiters hold, counting the unused rest of a cycle a waiter did not fit in as held.
   */
  #available(): number {
    if (this.#queue.size === 0) return this.#left;
    return -((this.#tailCycle - this.#cycle - 1) * this.#limit + (this.#limit - this.#tailLeft));
  }

  /**
   * Where a request of `units` queued now goes: its cycle (the tail's, or the next when the tail's
   * has too little left) and what that cycle has left before it; `undefined` when it fits in no
   * cycle (more units than the limit). For `acquire` and the refusal it is asked for beforehand.
   */
  #placeOf(units: number): { cycle: number; left: number } | undefined {
    let cycle = this.#queue.size === 0 ? this.#cycle : this.#tailCycle;
    let left = this.#queue.size === 0 ? this.#left : this.#tailLeft;
    if (units > left + EPSILON) {
      if (units > this.#limit) return undefined;
      cycle++;
      left = this.#limit;
    }
    return { cycle, left };
  }

  /**
   * Packs the waiters into cycles again, in queue order, from what the current cycle has left; a
   * waiter that fits in no cycle at the current limit is rejected. O(waiters): it runs after an
   * abort, a limit change or a missed cycle only.
   *
   * After a missed cycle (`missed`), where waiters wake the limiter too (`OWN_WAKES`), a waiter
   * whose cycle now starts past its deadline is rejected too (reason `timeout`), as a caller that
   * would wait past `timeoutDuration` is at once: in a Worker a cycle is missed when nobody woke
   * at its start (the requests of the two waiters ahead ended while they waited, their timers
   * with them), which put each waiter behind a cycle later, and served one past its
   * `timeoutDuration`. On Node a missed cycle (an event loop busy for a whole cycle) still serves
   * it late, as before.
   */
  #replan(missed = false): void {
    this.#stale = false;
    let cycle = this.#cycle;
    let left = this.#left;
    const dropped: Waiter[] = [];
    let late: [Waiter, number][] | undefined;
    for (const waiter of this.#queue.drain()) {
      if (waiter.units > left + EPSILON) {
        if (waiter.units > this.#limit) {
          dropped.push(waiter);
          continue;
        }
        cycle++;
        left = this.#limit;
      }
      if (missed && waiter.deadline !== undefined && this.#startOf(cycle) > waiter.deadline) {
        // Its place is given up: the waiters behind it are packed from here.
        late ??= [];
        late.push([waiter, cycle]);
        continue;
      }
      waiter.cycle = cycle;
      left -= waiter.units;
      this.#queue.push(waiter);
    }
    this.#tailCycle = cycle;
    this.#tailLeft = left;
    // Rejected once the queue is whole again: a listener of `rejected` may call back in.
    for (const waiter of dropped) {
      this.#settle(waiter);
      waiter.reject(this.#neverServed(waiter.units));
    }
    for (const [waiter, at] of late ?? []) {
      this.#settle(waiter);
      const wait = this.#startOf(at) - waiter.since;
      const detail = `${waiter.units} units would wait ${Math.ceil(wait)} ms for cycle ${at} (a cycle passed with nobody awake), longer than the ${Math.ceil((waiter.deadline as number) - waiter.since)} ms they may wait`;
      const left = this.#startOf(at) - this.#clock.now();
      waiter.reject(
        refusal((e) => this.emit('rejected', e), this.#shownName, 'timeout', waiter.units, detail, left),
      );
    }
  }

  /** Starts the cycle `now` falls in, then grants the waiters of the cycles begun, in order. */
  #drain(now: number): void {
    const cycle = this.#cycleAt(now);
    if (cycle > this.#cycle) {
      this.#cycle = cycle;
      this.#left = this.#limit;
    }
    // A timer that fired late (a busy event loop) skipped a cycle its waiters were packed into.
    const first = this.#queue.peek();
    const missed = first !== undefined && first.cycle < this.#cycle;
    if (this.#stale || missed) this.#replan(missed);
    for (let head = this.#queue.peek(); head !== undefined; head = this.#queue.peek()) {
      if (head.cycle > this.#cycle) return;
      this.#queue.shift();
      this.#left -= head.units;
      this.#settle(head);
      head.resolve(this.#grant(head.units, now - head.since));
    }
  }

  /**
   * Arms the one timer for the start of the cycle that covers the head; none when nobody waits.
   * Where waiters wake the limiter too (`OWN_WAKES`), then nudges the head and the one behind it,
   * each if it is another or the timer moved (see `wakeOwn`).
   */
  #arm(now: number): void {
    this.#armTimer(now);
    if (OWN_WAKES && !this.#closed) {
      const head = this.#queue.peek();
      const second = this.#queue.peekSecond();
      this.#headNudges ??= new HeadNudges();
      this.#headNudges.tell(head, head?.nudge, this.#timerAt, second, second?.nudge);
    }
  }

  #armTimer(now: number): void {
    const head = this.#queue.peek();
    if (this.#closed || head === undefined) {
      this.#clearTimer();
      return;
    }
    const at = this.#startOf(Math.max(this.#cycle + 1, head.cycle));
    if (this.#timer !== undefined && this.#timerAt <= at) return;
    this.#clearTimer();
    this.#timerAt = at;
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, at - now));
    const mark = {};
    this.#timerMark = mark;
    // Only waiters arm it: it keeps the process alive until they are served.
    this.#timer = this.#clock.setTimeout(
      () => {
        if (this.#timerMark === mark) this.#onTimer();
      },
      delay,
      true,
    );
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
    this.#settle(waiter);
    // The waiters behind move up: packed again on the next call, or in a microtask, which also
    // grants those that now fit in the current cycle. Many aborts at once re-pack once.
    this.#stale = true;
    if (!this.#updateQueued) {
      this.#updateQueued = true;
      queueMicrotask(() => {
        this.#updateQueued = false;
        if (!this.#closed) this.#update();
      });
    }
    waiter.reject(waiter.signal?.reason);
  }

  #settle(waiter: Waiter): void {
    waiter.dead = true;
    if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort);
  }

  #grant(units: number, waited: number): Permit {
    this.emit('acquired', { limiter: this.#shownName, units, waited });
    return permitOf(units, waited);
  }

  #neverServed(units: number): RateLimitRejectedError {
    const detail = `${units} units can never be served: limitForPeriod is ${this.#limit} per cycle`;
    return refusal((e) => this.emit('rejected', e), this.#shownName, 'timeout', units, detail);
  }
}

function checkUnits(method: string, units: unknown): InvalidArgumentError | undefined {
  if (typeof units === 'number' && units > 0 && units < Number.POSITIVE_INFINITY) return undefined;
  return new InvalidArgumentError(method, 'units', 'must be a positive finite number', units);
}

/** The first issue of a run-time argument that fails its option's schema, as an {@link InvalidArgumentError}. */
function badArgument(
  method: string,
  argument: string,
  error: z.ZodError,
  received: unknown,
): InvalidArgumentError {
  const issue = configErrorFrom(error, received, SOURCE, argument).issues[0];
  return new InvalidArgumentError(method, argument, issue?.message ?? 'invalid', received);
}

/**
 * A fixed window does not adapt: the feedback is checked as the `Permit` contract says (a bad
 * argument is an {@link InvalidArgumentError}, as on an adaptive limiter's permit) and ignored.
 */
const FEEDBACK: Pick<Permit, 'success' | 'throttled' | 'failed'> = {
  success(unitsUsed?: number, quota?: Quota) {
    checkUnitsUsed(unitsUsed);
    checkQuota('success', quota);
  },
  throttled(retryAfterMs?: number, quota?: Quota) {
    checkWait('throttled', retryAfterMs);
    checkQuota('throttled', quota);
  },
  failed(retryAfterMs?: number, quota?: Quota) {
    checkWait('failed', retryAfterMs);
    checkQuota('failed', quota);
  },
};

function permitOf(units: number, waitedMs: number): Permit {
  return {
    units,
    waitedMs,
    success: FEEDBACK.success,
    throttled: FEEDBACK.throttled,
    failed: FEEDBACK.failed,
  };
}
