/** A permit's grant number, set on the permits of an announced bucket only (other permits keep their shape). */
const kNumber = Symbol('adaptive-rate-limit.flightNumber');
type Numbered = { [kNumber]?: number };

/** Slots made at the first grant. */
const FIRST_CAPACITY = 8;
/** Numbers per slot in {@link Flight}'s flat array: grant number, units, the tree's node. */
const NUMS = 3;
const NUMBER = 0;
const UNITS = 1;
const NODE = 2;
/** The units of a slot whose call left the flight (units are never negative). */
const GONE = -1;

/**
 * The calls an announced bucket (`burst: 'announced'`) granted and that are not answered yet, in
 * the order they were granted, each with its units. An answer's `remaining` has not counted the
 * units granted after its call (they reach the API after it): {@link Flight.landed} tells them.
 * A limiter of another bucket has none (an idle limiter keeps nothing for it).
 *
 * A permit its caller drops without settling it is never answered: a `FinalizationRegistry`
 * takes it out once it is collected, so it is neither kept for the life of the limiter nor
 * walked over by every later answer.
 *
 * The calls sit in slots of one `Float64Array`, in grant order (so sorted by grant number), with
 * a Fenwick tree over the slots' units. An answer to the oldest call costs O(1) amortized, any
 * other O(log n) for n calls in flight (a binary search, a prefix sum, an update). When the slots
 * run out, the calls still in flight are moved to the front and the tree built again in O(n):
 * a call held for ever keeps one slot, not one per later grant. The slots are never more than 8
 * per call in flight (8 at least, 24 bytes each), and are made at the first grant.
 */
export class Flight<P extends object> {
  /** Per slot: grant number, units ({@link GONE} once it left), the Fenwick tree's node. */
  #nums: Float64Array | undefined;
  /** The first slot still in flight (every slot below it is gone), or `#top` when none is. */
  #low = 0;
  /** The next free slot. */
  #top = 0;
  /** Calls in flight (slots not gone). */
  #live = 0;
  /** The units the tree still counts below `#low` (calls that left as the oldest in flight). */
  #below = 0;
  readonly #dropped = new FinalizationRegistry<number>((number) => this.#forget(number));
  #granted = 0;
  /** The units of the calls in flight. */
  #total = 0;
  /** The units granted and not yet answered, dropped permits included (the first announcement's). */
  units = 0;
  /**
   * Loop steps taken by the searches, the tree's walks and the compactions so far: what the tests
   * count, to bound the cost of an order of answers without timing it.
   */
  steps = 0;

  /** Slots made (in flight, gone and free): what the flight holds in memory. */
  get capacity(): number {
    return this.#nums === undefined ? 0 : this.#nums.length / NUMS;
  }

  /** `permit`, of `units`, was granted. */
  granted(permit: P, units: number): void {
    const number = ++this.#granted;
    this.units += units;
    if (this.#nums === undefined) this.#nums = new Float64Array(FIRST_CAPACITY * NUMS);
    else if (this.#top * NUMS === this.#nums.length) this.#compact(slotsFor(this.#live));
    this.#append(this.#nums!, this.#top++, number, units);
    this.#live++;
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
    if (number === undefined) return 0;
    const slot = this.#find(number);
    if (slot < 0) return 0;
    // Answers come mostly in grant order: the oldest call in flight has none before it.
    if (slot === this.#low) {
      this.#leaveFirst();
      const after = this.#total;
      this.#shrink();
      return Math.max(after, 0);
    }
    const before = this.#prefix(slot) - this.#below;
    this.#leave(slot);
    const after = this.#total - before;
    this.#shrink();
    return Math.max(after, 0);
  }

  /**
   * `permit` will never be answered: what the `FinalizationRegistry` does once it is collected
   * (the tests call it to drop permits without waiting for a collection).
   */
  dropped(permit: P): void {
    const number = (permit as Numbered)[kNumber];
    if (number !== undefined) this.#forget(number);
  }

  /** Grant `number` leaves the flight (its permit was collected). */
  #forget(number: number): void {
    const slot = this.#find(number);
    if (slot < 0) return;
    if (slot === this.#low) this.#leaveFirst();
    else this.#leave(slot);
    this.#shrink();
  }

  /** The slot of grant `number` in flight, or -1. */
  #find(number: number): number {
    const nums = this.#nums;
    if (nums === undefined || this.#low === this.#top) return -1;
    let lo = this.#low;
    if (nums[lo * NUMS + NUMBER] !== number) {
      // Binary search in (lo, top): the slots are in grant order.
      let hi = this.#top - 1;
      lo++;
      while (lo <= hi) {
        this.steps++;
        const mid = (lo + hi) >>> 1;
        const at = nums[mid * NUMS + NUMBER]!;
        if (at < number) lo = mid + 1;
        else if (at > number) hi = mid - 1;
        else {
          lo = mid;
          break;
        }
      }
      if (lo > hi) return -1;
    }
    return nums[lo * NUMS + UNITS] === GONE ? -1 : lo;
  }

  /** Puts grant `number` of `units` in `slot` (the next after every slot in use) and its node. */
  #append(nums: Float64Array, slot: number, number: number, units: number): void {
    const at = slot * NUMS;
    nums[at + NUMBER] = number;
    nums[at + UNITS] = units;
    // Node i (slot i - 1) sums the units of the nodes (i - lowbit(i), i]: its own and those of
    // nodes i - 1, i - 2, i - 4, ... below its low bit, all built already.
    const i = slot + 1;
    const low = i & -i;
    let sum = units;
    for (let j = 1; j < low; j <<= 1) {
      this.steps++;
      sum += nums[(i - j - 1) * NUMS + NODE]!;
    }
    nums[at + NODE] = sum;
  }

  /** The units the tree counts in the slots below `slot`. */
  #prefix(slot: number): number {
    const nums = this.#nums!;
    let sum = 0;
    for (let i = slot; i > 0; i -= i & -i) {
      this.steps++;
      sum += nums[(i - 1) * NUMS + NODE]!;
    }
    return sum;
  }

  /** The oldest call in flight leaves: the slots up to the next in flight are passed over. */
  #leaveFirst(): void {
    const nums = this.#nums!;
    let low = this.#low;
    const units = nums[low * NUMS + UNITS]!;
    // The tree keeps its units: they count in `#below` from now on.
    this.#below += units;
    this.#total -= units;
    this.#live--;
    nums[low * NUMS + UNITS] = GONE;
    const top = this.#top;
    // A slot that left out of order was taken out of the tree: it counts nothing in `#below`.
    while (++low < top && nums[low * NUMS + UNITS] === GONE) this.steps++;
    this.#low = low;
  }

  /** The call in `slot` (not the oldest) leaves: its units are taken out of the tree. */
  #leave(slot: number): void {
    const nums = this.#nums!;
    const units = nums[slot * NUMS + UNITS]!;
    this.#total -= units;
    this.#live--;
    nums[slot * NUMS + UNITS] = GONE;
    // The nodes past the last slot in use are built again when their slot is.
    const top = this.#top;
    for (let i = slot + 1; i <= top; i += i & -i) {
      this.steps++;
      nums[(i - 1) * NUMS + NODE]! -= units;
    }
  }

  /** Gives back slots once at most an eighth of them is in flight. */
  #shrink(): void {
    const capacity = this.#nums!.length / NUMS;
    if (this.#live === 0) {
      // Nothing in flight: the sums start again from 0 (no rounding carried over).
      this.#low = this.#top = 0;
      this.#below = this.#total = 0;
      if (capacity > FIRST_CAPACITY) this.#nums = new Float64Array(FIRST_CAPACITY * NUMS);
    } else if (capacity > FIRST_CAPACITY && this.#live * 8 <= capacity) {
      this.#compact(slotsFor(this.#live));
    }
  }

  /** Moves the calls in flight to the front of `capacity` slots and builds the tree again. */
  #compact(capacity: number): void {
    const from = this.#nums!;
    const to = capacity * NUMS === from.length ? from : new Float64Array(capacity * NUMS);
    let slot = 0;
    let total = 0;
    // Forward: a slot is only ever moved down, over one already copied.
    for (let s = this.#low; s < this.#top; s++) {
      this.steps++;
      const units = from[s * NUMS + UNITS]!;
      if (units === GONE) continue;
      this.#append(to, slot++, from[s * NUMS + NUMBER]!, units);
      total += units;
    }
    this.#nums = to;
    this.#low = 0;
    this.#top = slot;
    this.#below = 0;
    // Summed again from the calls in flight: no rounding carried over from those that left.
    this.#total = total;
  }
}

/** Slots for `live` calls in flight: a power of two, at least twice as many, 8 at least. */
function slotsFor(live: number): number {
  let capacity = FIRST_CAPACITY;
  while (capacity < 2 * live) capacity *= 2;
  return capacity;
}
