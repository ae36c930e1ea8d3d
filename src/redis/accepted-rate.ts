/** Width of one bucket of the window (ms). */
const BUCKET_MS = 250;
/** Buckets in the window: 8 × 250 ms = 2 s. */
const BUCKETS = 8;
/** The window the accepted rate is measured over (ms). */
export const ACCEPTED_WINDOW_MS = BUCKET_MS * BUCKETS;

/**
 * The accepted rate of one member of a shared budget: units of its responses classified as
 * success (not sent, not throttled, not failed) per minute, over the last {@link
 * ACCEPTED_WINDOW_MS} (2 s), counted from the member's own permits. While the budget is
 * throttled, the members' accepted rates add up to the quota the server grants them: the rate
 * a cut of the shared budget starts from (docs/redis.md).
 *
 * A member measures it here for now; once the local limiter measures its own accepted rate
 * (`snapshot().acceptedRate`, issue 10), the member reads that instead and this module goes.
 * Times are ms on the member's clock; the window slides in 250 ms buckets.
 */
export class AcceptedRate {
  readonly #units = new Float64Array(BUCKETS);
  /** Index (time / BUCKET_MS) of the newest bucket written. */
  #newest = Number.NEGATIVE_INFINITY;
  /** When the measure started (the member's start): a younger window is divided by its age. */
  readonly #since: number;

  constructor(now: number) {
    this.#since = now;
  }

  /**
   * `units` of responses classified as success, received at `at` (a time before the newest
   * one recorded counts in its own bucket, or in the oldest still in the window).
   */
  record(units: number, at: number): void {
    this.#advance(at);
    const index = Math.max(Math.floor(at / BUCKET_MS), this.#newest - (BUCKETS - 1));
    this.#units[slot(index)]! += units;
  }

  /**
   * Units/min accepted over the window that ends at `now` (the open bucket and the 7 before it:
   * 1.75 to 2 s); over the time since the start while that is shorter (at least one bucket).
   */
  value(now: number): number {
    this.#advance(now);
    let total = 0;
    for (const units of this.#units) total += units;
    // The window: the open bucket so far and the 7 before it.
    const window = now - (Math.floor(now / BUCKET_MS) - (BUCKETS - 1)) * BUCKET_MS;
    const span = Math.min(window, Math.max(BUCKET_MS, now - this.#since));
    return (total * 60_000) / span;
  }

  /** Empties the buckets that fell out of the window between the newest one and `now`. */
  #advance(now: number): void {
    const index = Math.floor(now / BUCKET_MS);
    if (index <= this.#newest) return;
    const stale = Math.min(BUCKETS, index - this.#newest);
    for (let i = 1; i <= stale; i++) this.#units[slot(index - stale + i)] = 0;
    this.#newest = index;
  }
}

/** The bucket of time index `index` in the ring (times before 0 too). */
function slot(index: number): number {
  return ((index % BUCKETS) + BUCKETS) % BUCKETS;
}
