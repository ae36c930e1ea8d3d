/** The feedback channel of one granted request. The first call settles it; later calls do nothing. */
export interface Permit {
  /** The units this permit was granted. */
  readonly units: number;
  /** The request succeeded; `unitsUsed` corrects its cost when the answer reports it. */
  success(unitsUsed?: number): void;
  /** The request was throttled; `retryAfterMs` pauses the limiter (capped by `maxPause`). */
  throttled(retryAfterMs?: number): void;
  /**
   * The request failed without an answer about the rate (transport error, 5xx): neither raises nor
   * cuts. `retryAfterMs` (a 503 with `Retry-After` when 503 is not a throttle status) pauses the
   * limiter (capped by `maxPause`) without cutting.
   */
  failed(retryAfterMs?: number): void;
}

export interface AcquireOptions {
  /** Aborting removes the waiter from the queue, returns its units and rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

/** How a call's outcome feeds the limiter. */
export type Outcome =
  | { kind: 'success'; units?: number }
  | { kind: 'throttled'; retryAfterMs?: number }
  | { kind: 'failed'; retryAfterMs?: number };

export interface WrapOptions<R> {
  /** The cost of a call in units, or a function of its arguments. @default 1 */
  units?: number | ((...args: never[]) => number);
  /** Classifies a resolved result. @default every result is a success */
  classify?: (result: R) => Outcome;
  /**
   * Classifies a thrown error. @default an error with `status` or `statusCode` 429 is throttled
   * (with `retryAfterMs` when it has one); anything else failed.
   */
  classifyError?: (error: unknown) => Outcome;
  /** Attempts in all when a call is throttled (a throttled call was not processed). @default 4 */
  maxAttempts?: number;
}

/** The interface both limiter kinds share. */
export interface RateLimiter {
  readonly name: string;
  /** Waits for `units` (default 1), FIFO; rejects with `RateLimitRejectedError` or the abort reason. */
  acquire(units?: number, options?: AcquireOptions): Promise<Permit>;
  /** Takes `units` now if they are free and nobody waits, else returns `undefined`. */
  tryAcquire(units?: number): Permit | undefined;
  /** Decorates an async function: acquire, call, classify the outcome, retry what was throttled. */
  wrap<A extends unknown[], R>(
    fn: (...args: A) => Promise<R>,
    options?: WrapOptions<R>,
  ): (...args: A) => Promise<R>;
}

/** What `AdaptiveRateLimiter.snapshot()` reports. Rates in units/min, times on the limiter's clock (ms). */
export interface LimiterSnapshot {
  name: string;
  /** Current rate of this process; `Infinity` before the first throttle when no initial rate is set. */
  rate: number;
  minRate: number;
  maxRate: number;
  measuredRate: number | undefined;
  /** Units/min of successful responses over the last 3 s; `undefined` before the first success. */
  acceptedRate: number | undefined;
  /** Units in the bucket now (negative: owed by a request larger than the burst). */
  tokens: number;
  /** Burst capacity in units: one second of the rate, at least one unit. */
  capacity: number;
  queued: number;
  queuedUnits: number;
  /** The cold start's cap on units in flight; `undefined` once dropped (or with a rate). */
  inFlightCap: number | undefined;
  /** End of the current Retry-After pause, or `undefined` when not paused. */
  pausedUntil: number | undefined;
  waited: boolean;
  instanceCount: number;
  throttles: number;
  cuts: number;
  closed: boolean;
}
