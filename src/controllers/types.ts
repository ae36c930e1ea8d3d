/**
 * What a controller sees. All rates are this process's share, in units per minute; all times
 * are milliseconds.
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
   * The lowest fresh ceiling the API announced for this process (units/min; RateLimit headers or a
   * vendor's), or `undefined` when none is fresh. The limiter never sends faster than it, whatever
   * the rate; a controller may start from it instead of probing for the quota.
   */
  readonly announcedRate?: number | undefined;
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
