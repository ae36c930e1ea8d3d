/**
 * The wait after a 429 that says nothing (no `Retry-After`, no quota headers) while the limiter
 * has not learned the server's rate yet: a fresh process, maybe one of a crowd of short-lived
 * ones (serverless functions, CI jobs, cron workers) sharing one quota. None of them lives long
 * enough to learn the quota alone, and all of them meet the empty bucket at about the same time,
 * so each waits a random time drawn over a window (exponential backoff with full jitter, as in the
 * adaptive token bucket of Farkiani, Liu and Crowley): the crowd's retries spread over the time
 * the quota needs to serve them.
 *
 * The window is {@link CROWD_FIRST_WINDOW} for a limiter with no success yet, shorter by the part
 * of {@link CROWD_LEARNED} successes it has had (what got through says the quota is not that
 * scarce), doubled for each such 429 in a row, at least {@link CROWD_MIN_WAIT} and at most the
 * cap (`maxWait`, so the wait alone never makes a retry refused, and at most
 * {@link CROWD_MAX_WINDOW}). Once the limiter has had {@link CROWD_LEARNED} successes it has
 * learned a rate: its cut and pacing recover from a 429 without this wait. Times are ms.
 */
export class CrowdWait {
  /** Successes since creation. */
  #successes = 0;
  /** Such 429s since the last success. */
  #inARow = 0;

  /** A success: the next 429 starts the windows again. */
  success(): void {
    this.#successes++;
    this.#inARow = 0;
  }

  /** Whether the limiter has learned the server's rate (a 429 then needs no crowd wait). */
  get learned(): boolean {
    return this.#successes >= CROWD_LEARNED;
  }

  /**
   * A 429 that said nothing: the ms to wait (0 once learned), `random` in [0, 1) placing it in the
   * window, whose cap is `cap` ms.
   */
  throttled(random: number, cap: number): number {
    if (this.learned) return 0;
    this.#inARow++;
    const first = CROWD_FIRST_WINDOW * (1 - this.#successes / CROWD_LEARNED);
    const window = Math.min(CROWD_MAX_WINDOW, cap, first * 2 ** (this.#inARow - 1));
    return window <= CROWD_MIN_WAIT
      ? Math.max(window, 0)
      : CROWD_MIN_WAIT + random * (window - CROWD_MIN_WAIT);
  }
}

/** Successes after which a limiter has learned the server's rate. */
export const CROWD_LEARNED = 30;
/** The window of the first crowd wait of a limiter with no success (ms). */
const CROWD_FIRST_WINDOW = 60_000;
/** The longest window (ms). */
const CROWD_MAX_WINDOW = 60_000;
/** The shortest crowd wait (ms), unless the cap is shorter. */
const CROWD_MIN_WAIT = 1_000;
