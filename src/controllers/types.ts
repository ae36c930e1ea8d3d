/**
 * What a controller sees. All rates are this process's share, in units per minute; all times
 * are milliseconds. A controller you write gets an object of its own at each call, and may keep it.
 */
export interface RateControllerState {
  /** The current rate (units/min). */
  readonly rate: number;
  /** This process's share of `minUnitsPerMinute` (units/min). */
  readonly minRate: number;
  /** This process's share of `maxUnitsPerMinute` (units/min; `Infinity` when unbounded). */
  readonly maxRate: number;
  /** The rate just before the last cut; before any cut, the initial rate (units/min). */
  readonly rateBeforeLastDecrease: number;
  /** The measured send rate at the last cut (units/min); `undefined` before any cut or measurement. */
  readonly measuredRateAtLastDecrease: number | undefined;
  /** ms since the last cut; before any cut, since the limiter was created. */
  readonly sinceLastDecrease: number;
  /** ms of Retry-After pause since the last cut. */
  readonly pauseSinceLastDecrease: number;
  /** ms since the last change from `onSuccess` or the last throttle; after a pause, from its end. */
  readonly sinceLastIncrease: number;
  /** True when a request had to wait for units since the last change of rate. */
  readonly waited: boolean;
  /** Processes sharing the budget; divide whole-budget steps by it. */
  readonly instanceCount: number;
  /** Units/min of responses (0.5 s buckets smoothed by 0.8); `undefined` before the first bucket closes. */
  readonly measuredRate: number | undefined;
  /**
   * Responses/min, whatever their units (the same half-second buckets); `undefined` before the
   * first bucket closes, or where the state's maker does not count requests.
   */
  readonly measuredRequestRate?: number | undefined;
  /**
   * Units/min of the responses classified as success over the last 3 s (not sent, not throttled),
   * less the time a Retry-After pause took of them; `undefined` before the first success. At the
   * first cut, the last second's when higher (the 3 s may still hold the slow start). While the server throttles, this process's share of the
   * quota: the estimate a cut should start from.
   */
  readonly acceptedRate: number | undefined;
  /**
   * Units/min of the responses classified as success since the last cut, over that time less its
   * Retry-After pauses (at least 1 s):
   * over a whole cycle it forgives a server's burst, which inflates the 3 s window right after
   * it was drained. `undefined` before the first cut.
   */
  readonly acceptedRateSinceLastDecrease: number | undefined;
  /**
   * True at the cut after a burst of calls at once (the one cut so far made unlimited while the
   * cold start's cap held them back), when `acceptedRate` is the server's bucket refill read since
   * that cut, the Retry-After pause included: a lower bound of the server's rate, not a window
   * (see docs/how-it-works.md). Absent otherwise.
   */
  readonly acceptedRateIsRefill?: boolean;
  /** The last cuts, oldest first, at most 8; empty before the first cut. */
  readonly decreases: readonly DecreaseRecord[];
  /**
   * A random number in [0, 1), drawn by the limiter at its creation and at each cut (from its
   * `random` option): a controller that wants jitter reads it here and stays pure.
   */
  readonly random: number;
  /**
   * The lowest fresh ceiling the API announced for this process (units/min; RateLimit headers or a
   * vendor's), or `undefined` when none is fresh. The limiter never sends faster than it, whatever
   * the rate; a controller may start from it instead of probing for the quota.
   */
  readonly announcedRate?: number | undefined;
}

/** What the limiter recorded at one cut. Rates in units/min of this process. */
export interface DecreaseRecord {
  /** The rate the cut started from. */
  readonly rateBefore: number;
  /** The accepted rate then (the 3 s window; without any success yet, the rate the cut started from). */
  readonly acceptedRate: number;
  /** The accepted rate since the cut before it, less its pauses; `undefined` at the first cut. */
  readonly acceptedRateSincePrevious: number | undefined;
  /**
   * True when the cut was the first and its accepted rate is only a floor: it came while the cold
   * start's cap on requests in flight still held the sends back (the rate read is the cap's, not
   * the server's), or in the first second after fewer than 16 answers (read over a slot at least).
   */
  readonly startCapped?: boolean;
  /**
   * True when the cut was the first and the limiter was unlimited until then (no rate, no cap
   * holding the sends back): its accepted rate was read at full speed, over windows the sends
   * filled, not over a ramp.
   */
  readonly unlimited?: boolean;
  /**
   * True when the cut read the server's bucket refill since a burst's first cut, the Retry-After
   * pause included (the probe's `burstRefill`); absent otherwise.
   */
  readonly refill?: boolean;
  /** Requests/min measured at the cut (`measuredRequestRate`); absent when none was measured (and in a budget shared through Redis). */
  readonly requestRate?: number;
  /**
   * ms sent between the end of the Retry-After pauses since the cut before and this cut (pauses
   * not counted); absent at the first cut, without a pause since the cut before, and in a budget
   * shared through Redis.
   */
  readonly sentAfterPause?: number;
}

/**
 * Decides the next rate. Pure: no clock, no timers, no I/O. The limiter applies the result:
 * it clamps to [minRate, maxRate], never raises on a throttle, and calls `onThrottled` only when
 * the cut rules allow.
 */
export interface RateController {
  /** The new rate after a throttle (units/min). */
  onThrottled(state: RateControllerState): number;
  /** The new rate after a success (units/min), or `undefined` for no change. */
  onSuccess(state: RateControllerState): number | undefined;
}
