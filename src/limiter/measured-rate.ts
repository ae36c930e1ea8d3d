/** Width of one bucket of the measured send rate (ms), as in the AWS SDK. */
const BUCKET_MS = 500;
/** Weight of the newest bucket in the moving average, as in the AWS SDK. */
const SMOOTHING = 0.8;

/**
 * The measured send rate: units of responses counted in half-second buckets, each closed bucket
 * (spread over the time since the previous one, so an idle gap lowers it) blended into the
 * average with weight 0.8. Unlike the AWS SDK, the first closed bucket is taken whole rather
 * than blended with a starting value of 0, the response that opens a bucket counts in it, and
 * the first bucket opens at the first response (not at creation).
 */
export class MeasuredRate {
  /** Start of the open bucket (ms); unset until the first response, so that the time before it, when requests were still in flight, does not count as an idle gap. */
  #bucket: number | undefined;
  #units = 0;
  #rate: number | undefined;
  /** Responses in the open bucket, and their smoothed rate (responses/min). */
  #count = 0;
  #requests: number | undefined;
  /** The span of the last closed bucket (ms): the sender's own spacing of responses, at least a bucket. */
  #span = BUCKET_MS;

  /** The smoothed rate of responses (requests/min, whatever their units), `undefined` until a first bucket closes. */
  get requests(): number | undefined {
    return this.#requests;
  }

  /** The smoothed rate in units/min, `undefined` until a first bucket closes. */
  get value(): number | undefined {
    return this.#rate;
  }

  /**
   * The smoothed rate in units/min at `now`: {@link value}, faded for the time since the open
   * bucket began with no response closing it. Each span of the sender's own spacing (the last
   * closed bucket's, at least a bucket) past the first blends in a 0, as `record` would blend
   * empty buckets: a process that sent 13,000 a minute and then nothing for an hour reads near 0,
   * not 13,000 (a shared budget's member gave that as its demand and kept most of the budget).
   */
  valueAt(now: number): number | undefined {
    if (this.#rate === undefined || this.#bucket === undefined) return this.#rate;
    const idle = Math.floor((now - this.#bucket) / this.#span) - 1;
    return idle > 0 ? this.#rate * (1 - SMOOTHING) ** idle : this.#rate;
  }

  /** Counts the units of one response received at `now`. */
  record(units: number, now: number): void {
    const bucket = Math.floor(now / BUCKET_MS) * BUCKET_MS;
    if (this.#bucket === undefined) this.#bucket = bucket;
    else if (bucket > this.#bucket) {
      const perMinute = (this.#units * 60_000) / (bucket - this.#bucket);
      this.#rate =
        this.#rate === undefined ? perMinute : perMinute * SMOOTHING + this.#rate * (1 - SMOOTHING);
      const count = (this.#count * 60_000) / (bucket - this.#bucket);
      this.#requests =
        this.#requests === undefined ? count : count * SMOOTHING + this.#requests * (1 - SMOOTHING);
      this.#span = bucket - this.#bucket;
      this.#bucket = bucket;
      this.#units = 0;
      this.#count = 0;
    }
    this.#units += units;
    this.#count++;
  }
}
