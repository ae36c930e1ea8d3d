/**
 * The cold start of an unlimited limiter (no initial rate): a cap on the units in flight (granted,
 * not yet answered) that starts at `initial` and grows by the units of each success, so it
 * doubles each round trip without a throttle, as TCP's slow start does. A burst goes out in
 * rounds that double, not all at once. The limiter drops it at the first throttle (the rate takes
 * over) and once it no longer binds: an answer finds nobody waiting and less than half the cap in
 * flight.
 *
 * Chosen: the cap goes before any answer for an API that announces a fixed window too (GitHub),
 * though fewer than the cap may be left of it (10 at once with 8 left: 2 are refused; nothing
 * goes past 0 after the first answers, see `Ceilings.heldUntil`). Sending one request first and
 * the rest once its answer told what is left kept those 2 out, but slowed every first batch by a
 * round trip (two, before a second reading told the window apart from a bucket) and held a whole
 * batch behind a slow first call (40 at once, the first one slow: 1 sent in 3 s, not 40).
 * `slowStart: 1` asks for that: one in flight first; the window's credit read from its answer
 * holds the rest (each success then lets two go, as the cap grows by one).
 */
export class SlowStart {
  /** The most units in flight at once. */
  cap: number;
  /** Units granted and not yet answered. */
  inFlight = 0;

  constructor(initial: number) {
    this.cap = initial;
  }

  /** Whether `units` may go now; a request larger than the cap goes alone. */
  allows(units: number): boolean {
    return this.inFlight === 0 || this.inFlight + units <= this.cap;
  }

  granted(units: number): void {
    this.inFlight += units;
  }

  /** An answer came for `units`; a success grows the cap by them. Whether the cap still binds. */
  answered(units: number, success: boolean, waiting: number): boolean {
    this.inFlight = Math.max(0, this.inFlight - units);
    if (!success) return true;
    this.cap += units;
    return waiting > 0 || this.inFlight * 2 >= this.cap;
  }
}
