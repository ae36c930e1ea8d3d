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
  #lastAt: number | undefined;

  /** When the last response was counted (ms); `undefined` before the first. */
  get lastAt(): number | undefined {
    return this.#lastAt;
  }

  /** The smoothed rate of responses (requests/min, whatever their units), `undefined` until a first bucket closes. */
  get requests(): number | undefined {
    return this.#requests;
  }

  /** The smoothed rate in units/min, `undefined` until a first bucket closes. */
  get value(): number | undefined {
    return this.#rate;
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
      this.#bucket = bucket;
      this.#units = 0;
      this.#count = 0;
    }
    this.#units += units;
    this.#count++;
    this.#lastAt = now;
  }
}
