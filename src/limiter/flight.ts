/** A permit's grant number, set on the permits of an announced bucket only (other permits keep their shape). */
const kNumber = Symbol('adaptive-rate-limit.flightNumber');
type Numbered = { [kNumber]?: number };

/**
 * The calls an announced bucket (`burst: 'announced'`) granted and that are not answered yet, in
 * the order they were granted, each with its units. An answer's `remaining` has not counted the
 * units granted after its call (they reach the API after it): {@link Flight.landed} tells them.
 * A limiter of another bucket has none (an idle limiter keeps nothing for it).
 *
 * A permit its caller drops without settling it is never answered: a `FinalizationRegistry`
 * takes it out once it is collected, so it is neither kept for the life of the limiter nor
 * walked over by every later answer.
 */
export class Flight<P extends object> {
  /** Units by grant number, in grant order. */
  readonly #units = new Map<number, number>();
  readonly #dropped = new FinalizationRegistry<number>((number) => this.#forget(number));
  #granted = 0;
  /** The units of `#units`. */
  #total = 0;
  /** The units granted and not yet answered, dropped permits included (the first announcement's). */
  units = 0;

  /** `permit`, of `units`, was granted. */
  granted(permit: P, units: number): void {
    const number = ++this.#granted;
    this.units += units;
    this.#units.set(number, units);
    this.#total += units;
    // On the permit, not in a WeakMap: a WeakMap's table kept the size of the most permits ever
    // in flight after they were collected (4 MB for 100,000 dropped).
    (permit as Numbered)[kNumber] = number;
    this.#dropped.register(permit, number);
  }

  /**
   * `permit`, of `units`, was answered (or ends unanswered): the units granted after it and still
   * in flight. Its answer's `remaining` has not counted them.
   */
  landed(permit: P, units: number): number {
    this.units -= units;
    const number = (permit as Numbered)[kNumber];
    if (number === undefined || !this.#units.has(number)) return 0;
    this.#forget(number);
    // Answers come mostly in grant order: the calls granted before this one and still in flight
    // are few, so count those and take them from the total.
    let before = 0;
    for (const [n, held] of this.#units) {
      if (n > number) break;
      before += held;
    }
    return this.#total - before;
  }

  /** Grant `number` leaves the flight. */
  #forget(number: number): void {
    const units = this.#units.get(number);
    if (units === undefined) return;
    this.#units.delete(number);
    this.#total -= units;
  }
}
