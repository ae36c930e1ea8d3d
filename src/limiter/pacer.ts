import type { RateGate } from './bucket.js';

/**
 * How much of the rate idle time earns, and how late a timer may fire and still be caught up
 * exactly (ms). After an idle spell one request goes at once, plus as many as fit in these ms
 * of the rate (none below 6,000 units/min; 1 more at 12,000); for requests of one unit from
 * 24,000 units/min on, at most 4 more, or a 4 ms tick of the rate when that is more (10 at
 * 150,000).
 */
export const PACING_SLACK_MS = 10;
/**
 * A waiter granted late by its timer (a busy event loop) keeps its slot if it is at most this many
 * ms late: the slots after it stay on schedule, so the rate holds under event-loop lag; several
 * late slots may then go at once (at most these ms of the rate, and at most 4 requests of the
 * granted size or a 4 ms tick of the rate). Idle time and pauses earn only {@link PACING_SLACK_MS}.
 */
const PACING_CATCH_UP_MS = 100;
/**
 * At high rates a grant's idle credit and catch-up are bounded by requests, not only by ms:
 * late slots and idle credit let at most this many requests of the granted size go at once (or
 * a {@link TICK_MS} of the rate, when that is more). A strict leaky bucket (nginx's `limit_req`
 * with `burst=10`) refuses a bunch larger than its burst, and 100 ms of 150,000 requests/min is
 * 250 requests at once: 429s and, with `Retry-After`, a pause. A request of many units (tokens)
 * is bounded as before: four of its gaps are longer than the bounds in ms.
 */
const BUNCH_REQUESTS = 4;
/** The timer granularity: slots closer than this go several per tick at any rate (ms). */
const TICK_MS = 4;
/**
 * How late the line's timer wakes for the head, past its slot, to serve several slots at once:
 * when slots are closer than {@link WAKE_GAP_MS} and the waiters queued span at least this many
 * ms of the rate. The late slots keep their places (a grant up to a {@link TICK_MS} late keeps
 * its slot), so the rate and the bunch bound are those of {@link Pacer.take}; this leaves
 * {@link TICK_MS} less these ms for the timer's own lateness. (A wake 1 ms past the slot saves
 * nothing: Node's timers fire on whole milliseconds, about every 1.25 ms at such rates anyway.)
 */
export const WAKE_BATCH_MS = 2;
/**
 * Slots closer than this (ms) are served {@link WAKE_BATCH_MS} at a wake: 4 requests of one unit
 * a millisecond, 240,000 units/min, where a timer wake already sends {@link BUNCH_REQUESTS} or
 * more. Below it, a wake's bunch stays what a timer firing about every millisecond sends (two
 * processes at 150,000/min each against nginx's `burst=10`: 3 each, not 6-8).
 */
export const WAKE_GAP_MS = 0.25;
/** Float slots within this many ms of now count as due. */
const EPSILON_MS = 1e-6;

/**
 * Pacing (GCRA): grants spaced at the rate. `tat` is the time the next grant is due; each grant
 * reserves its own slot (`units` at the rate) after the one before, so waiters go one at a time
 * at their own slots, never a group at once. When the slots are closer than the timer fires,
 * several go per tick and `tat` stays exact, as it does for a timer that fires up to
 * {@link PACING_CATCH_UP_MS} late. Idle time earns at most {@link PACING_SLACK_MS} of the rate.
 * A request of any size goes at its slot and pushes the next slot back by its units, so the
 * long-run rate holds for any size. An infinite rate is "unlimited". A `ceiling` (the lowest rate
 * the API announced) spaces the slots at min(rate, ceiling), unlimited or not, without changing
 * `rate` (the controller's). Times are ms on the limiter's clock; rates units/min.
 */
export class Pacer implements RateGate {
  rate: number;
  /** The announced ceiling (units/min); `Infinity` when none. */
  ceiling = Number.POSITIVE_INFINITY;
  /** The rate the slots are spaced at: the lower of `rate` and `ceiling` (units/min). */
  #sendRate: number;
  /** The time the next grant is due (ms). */
  #tat: number;
  /** The last `now` seen, for `tokens`. */
  #now: number;

  constructor(rate: number, now: number) {
    this.rate = rate;
    this.#sendRate = rate;
    this.#tat = now - PACING_SLACK_MS;
    this.#now = now;
  }

  /** The controller's rate is unlimited (a ceiling may still cap what is sent). */
  get unlimited(): boolean {
    return this.rate === Number.POSITIVE_INFINITY;
  }

  /** The rate the slots are spaced at (units/min): the lower of the rate and the ceiling. */
  get sendRate(): number {
    return this.#sendRate;
  }

  /** Nothing caps what is sent: neither the rate nor a ceiling. */
  get #free(): boolean {
    return this.#sendRate === Number.POSITIVE_INFINITY;
  }

  /** Units that may go at once after an idle spell (at least one request). */
  get capacity(): number {
    return this.#free ? Number.POSITIVE_INFINITY : Math.max(1, this.#units(PACING_SLACK_MS));
  }

  /**
   * Units owed past the next slot's wait for a request of the capacity (one at low rates): a
   * request larger than that, or an answer above its estimate (see `RateGate.owed`).
   */
  get owed(): number {
    const tokens = this.tokens;
    return tokens >= -this.capacity ? 0 : -this.tokens - this.capacity;
  }

  /** Units free now (negative: the time until the next slot, in units of the rate). */
  get tokens(): number {
    if (this.#free) return Number.POSITIVE_INFINITY;
    return Math.min(this.#units(PACING_SLACK_MS), this.#units(this.#now - this.#tat));
  }

  refill(now: number): void {
    if (now > this.#now) this.#now = now;
  }

  setRate(rate: number, now: number): void {
    this.rate = rate;
    this.#respace(now);
  }

  /** Changes the ceiling from `now` (`Infinity`: none); slots already reserved are respaced. */
  setCeiling(ceiling: number, now: number): void {
    this.ceiling = ceiling;
    this.#respace(now);
  }

  /** Spaces the slots from `now` at min(rate, ceiling). */
  #respace(now: number): void {
    this.refill(now);
    const next = Math.min(this.rate, this.ceiling);
    if (!this.#free && Number.isFinite(next) && this.#tat > now) {
      // Slots already reserved are units owed: they take longer at a lower rate.
      const owed = this.#units(this.#tat - now);
      this.#sendRate = next;
      this.#tat = now + this.#ms(owed);
      return;
    }
    this.#sendRate = next;
    if (this.#tat < now - PACING_SLACK_MS) this.#tat = now - PACING_SLACK_MS;
  }

  /**
   * Moves the next slot by at most half a gap (one unit at the send rate) onto the grid of times
   * `t` where `(t + offset) / gap - phase` is a whole number, and never before `now` less
   * {@link PACING_SLACK_MS}. Members of a shared budget sending at the same rate use it with
   * `phase` = index / members and the offset to a clock they share: their slots interleave
   * instead of falling together. The slots after it keep the gap, so they stay on the grid while
   * the rate holds. Only a busy pacer (its next slot still ahead) is aligned: an idle one's next
   * request goes at once, not up to half a gap later. Nothing to align while unlimited.
   */
  align(phase: number, offset: number, now: number): void {
    if (this.#free || this.#tat <= now) return;
    this.refill(now);
    const gap = this.#ms(1);
    const floor = now - PACING_SLACK_MS;
    const next = Math.max(this.#tat, floor);
    let t = (Math.round((next + offset) / gap - phase) + phase) * gap - offset;
    if (t < floor) t += gap;
    this.#tat = t;
  }

  canTake(_units: number, now: number): boolean {
    this.refill(now);
    return this.#free || this.#tat <= now + EPSILON_MS;
  }

  /** Takes the next slot for `units` at `now`; `waited`: a waiter the timer granted (maybe late). */
  take(units: number, now: number, waited = false): void {
    if (this.#free) return;
    const gap = this.#ms(units);
    // The bunch a grant may end: BUNCH_REQUESTS of its size, or a tick, within the bounds in ms.
    const bunch = Math.max(TICK_MS, BUNCH_REQUESTS * gap);
    const late = waited && this.#tat >= now - Math.min(PACING_CATCH_UP_MS, bunch);
    this.#tat = (late ? this.#tat : Math.max(this.#tat, now - Math.min(PACING_SLACK_MS, bunch))) + gap;
  }

  /** The next slot one unit after `now`. */
  empty(now: number): void {
    if (!this.#free) this.#tat = now + this.#ms(1);
  }

  charge(delta: number, now: number): void {
    if (this.#free) return;
    const floor = now - PACING_SLACK_MS;
    this.#tat = Math.max(floor, Math.max(this.#tat, floor) + this.#ms(delta));
  }

  readyAt(_units: number, start: number): number {
    return this.#free ? start : Math.max(start, this.#tat);
  }

  /**
   * When the line's timer wakes for a head of `units` whose turn is at `ready`, with `queuedUnits`
   * waiting in all: at its turn, or {@link WAKE_BATCH_MS} later when slots are closer than
   * {@link WAKE_GAP_MS} and the queue fills that batch. A timer wake costs about as much CPU as
   * sending a request (31-38 us here), so a long queue at a high rate is served in fewer, larger
   * wakes instead of one per millisecond.
   */
  wakeAt(units: number, ready: number, queuedUnits: number): number {
    if (this.#free || this.#ms(units) >= WAKE_GAP_MS || this.#ms(queuedUnits) < WAKE_BATCH_MS) return ready;
    return ready + WAKE_BATCH_MS;
  }

  predictWait(_units: number, queuedUnits: number, pause: number, now: number): number {
    if (this.#free) return pause;
    const first = Math.max(this.#tat, now + pause - PACING_SLACK_MS);
    return Math.max(pause, first + this.#ms(queuedUnits) - now);
  }

  #units(ms: number): number {
    return (ms * this.#sendRate) / 60_000;
  }

  #ms(units: number): number {
    return (units * 60_000) / this.#sendRate;
  }
}
