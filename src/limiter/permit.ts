import type { AnnouncedQuota, Permit } from './types.js';

type Quota = readonly AnnouncedQuota[] | undefined;

/** What a permit reports to: its limiter. */
export interface PermitSink {
  _success(permit: LimiterPermit, unitsUsed: number | undefined, quota: Quota): void;
  _throttled(permit: LimiterPermit, retryAfterMs: number | undefined, quota: Quota): void;
  _failed(retryAfterMs: number | undefined, quota: Quota): void;
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

  success(unitsUsed?: number, quota?: Quota): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?._success(this, unitsUsed, quota);
  }

  throttled(retryAfterMs?: number, quota?: Quota): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?._throttled(this, retryAfterMs, quota);
  }

  failed(retryAfterMs?: number, quota?: Quota): void {
    const sink = this.#sink;
    this.#sink = undefined;
    if (retryAfterMs !== undefined || quota !== undefined) sink?._failed(retryAfterMs, quota);
  }
}
