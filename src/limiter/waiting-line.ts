import { type Clock, MAX_TIMER_MS } from '../clock.js';
import type { RateLimitRejectedError, RejectionReason } from '../errors.js';
import type { RateGate } from './bucket.js';
import { Fifo } from './fifo.js';
import type { Pause } from './pause.js';
import type { Permit } from './types.js';

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

/** What a {@link WaitingLine} asks of its limiter. Times are ms on the limiter's clock. */
export interface LineOwner {
  /** The longest wait (ms) the options give now: the rejection of an expired waiter names it. */
  maxWait(): number;
  /** Whether `units` may be granted at `now`: no pause, and the bucket has them. */
  canGrant(units: number, now: number): boolean;
  /** Whether `units` are held back by something only an answer frees (the cold start's cap): no timer for them. */
  heldBack(units: number): boolean;
  /** Grants `units` at `now` to a waiter queued at `since`. */
  grant(units: number, now: number, since: number): Permit;
  /** The error that refuses `units`; tells the listeners (`rejected`). */
  rejection(reason: RejectionReason, units: number, detail: string, waitMs?: number): RateLimitRejectedError;
  /** A pause ended (the `resumed` event). */
  resumed(): void;
}

/**
 * The waiters of a limiter, first in first out, and the one timer that wakes it: for the head's
 * turn, the head's deadline, or the end of a pause. A waiter that is served, expires, is aborted
 * (it gives its units back) or is closed out is settled once and forgets its signal. The timer
 * keeps the process alive only while someone waits, and none is armed when there is nothing to
 * wait for.
 */
export class WaitingLine {
  readonly #clock: Clock;
  readonly #bucket: RateGate;
  readonly #pause: Pause;
  readonly #owner: LineOwner;
  readonly #queue = new Fifo<Waiter>();
  #queuedUnits = 0;
  #timer: unknown;
  #timerAt = Number.POSITIVE_INFINITY;
  #timerKeepsAlive = false;
  #onTimerBound: (() => void) | undefined;
  #closed = false;

  constructor(clock: Clock, bucket: RateGate, pause: Pause, owner: LineOwner) {
    this.#clock = clock;
    this.#bucket = bucket;
    this.#pause = pause;
    this.#owner = owner;
  }

  /** Live waiters. */
  get size(): number {
    return this.#queue.size;
  }

  /** Units of every live waiter. */
  get queuedUnits(): number {
    return this.#queuedUnits;
  }

  /** Queues `units` from `now` until `deadline` (ms); an abort of `signal` takes them out again. */
  enqueue(units: number, now: number, deadline: number, signal: AbortSignal | undefined): Promise<Permit> {
    return new Promise<Permit>((resolve, reject) => {
      const waiter: Waiter = {
        units,
        enqueuedAt: now,
        deadline,
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
      this.arm(now);
    });
  }

  /** Serves whoever may go now, then arms the timer for the rest. */
  kick(now: number): void {
    this.#drain(now);
    this.arm(now);
  }

  /** Arms the one timer for the next event: the head's turn, its deadline, or a pause's end. */
  arm(now: number): void {
    if (this.#closed) return;
    let at = this.#pause.resumePending ? this.#pause.until : Number.POSITIVE_INFINITY;
    const head = this.#queue.peek();
    if (head !== undefined) {
      at = Math.min(at, head.deadline);
      if (!this.#owner.heldBack(head.units)) {
        at = Math.min(at, this.#bucket.readyAt(head.units, Math.max(now, this.#pause.until)));
      }
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

  /** Clears the timer and rejects every waiter (reason `closed`); the line arms no timer again. */
  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    for (const waiter of this.#queue.drain()) {
      this.#queuedUnits -= waiter.units;
      this.#settle(waiter);
      const detail = `closed with ${waiter.units} units waiting`;
      waiter.reject(this.#owner.rejection('closed', waiter.units, detail));
    }
    this.#queuedUnits = 0;
  }

  #onTimer(): void {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = this.#clock.now();
    if (this.#pause.resumePending && !this.#pause.active(now)) {
      this.#pause.resumePending = false;
      this.#owner.resumed();
    }
    this.kick(now);
  }

  #drain(now: number): void {
    for (let head = this.#queue.peek(); head !== undefined; head = this.#queue.peek()) {
      if (this.#owner.canGrant(head.units, now)) {
        if (now > head.deadline + TIMER_SLACK_MS) {
          this.#expire(head);
          continue;
        }
        this.#queue.shift();
        this.#queuedUnits -= head.units;
        this.#settle(head);
        head.resolve(this.#owner.grant(head.units, now, head.enqueuedAt));
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
    this.#settle(waiter);
    const now = this.#clock.now();
    const waited = now - waiter.enqueuedAt;
    const detail = `waited ${Math.round(waited)} ms, maxWait is ${this.#owner.maxWait()} ms`;
    // It was the head: the wait left is its own turn.
    const left = this.#bucket.predictWait(waiter.units, 0, this.#pause.left(now), now);
    waiter.reject(this.#owner.rejection('max-wait', waiter.units, detail, left));
  }

  #abort(waiter: Waiter): void {
    if (waiter.dead) return;
    this.#queue.kill(waiter);
    this.#queuedUnits -= waiter.units;
    this.#settle(waiter);
    waiter.reject(waiter.signal?.reason);
    // The next in line may be served sooner now.
    this.kick(this.#clock.now());
  }

  #settle(waiter: Waiter): void {
    waiter.dead = true;
    if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort);
  }
}
