/**
 * The cold start of an unlimited limiter (no initial rate): a cap on the units in flight (granted,
 * not yet answered) that starts at `initial` and grows by the units of each success, so it
 * doubles each round trip without a throttle, as TCP's slow start does. A burst goes out in
 * rounds that double, not all at once. The limiter drops it at the first throttle (the rate takes
 * over) and once it no longer binds: an answer finds nobody waiting and less than half the cap in
 * flight.
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
