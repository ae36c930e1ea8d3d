import type { Permit } from './types.js';

/** What a permit reports to: its limiter. */
export interface PermitSink {
  _success(permit: LimiterPermit, unitsUsed: number | undefined): void;
  _throttled(permit: LimiterPermit, retryAfterMs: number | undefined): void;
  _failed(permit: LimiterPermit, retryAfterMs: number | undefined): void;
}

/** The permit an `AdaptiveRateLimiter` grants. The first call settles it; later calls do nothing. */
export class LimiterPermit implements Permit {
  #sink: PermitSink | undefined;

  constructor(
    sink: PermitSink,
    readonly units: number,
    /** The cut count when it was granted: a throttle cuts only for requests sent after the last cut. */
    readonly epoch: number,
  ) {
    this.#sink = sink;
  }

  success(unitsUsed?: number): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?._success(this, unitsUsed);
  }

  throttled(retryAfterMs?: number): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?._throttled(this, retryAfterMs);
  }

  failed(retryAfterMs?: number): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?._failed(this, retryAfterMs);
  }
}
