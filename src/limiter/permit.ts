import type { AcquireOptions, Permit } from './types.js';

/** @internal What a permit reports to: its limiter. */
export interface PermitSink {
  _success(permit: LimiterPermit, unitsUsed: number | undefined): void;
  _throttled(permit: LimiterPermit, retryAfterMs: number | undefined): void;
  _failed(permit: LimiterPermit, retryAfterMs: number | undefined): void;
}

/** The permit an `AdaptiveRateLimiter` grants. The first call settles it; later calls do nothing. */
export class LimiterPermit implements Permit {
  #sink: PermitSink | undefined;

  /** @internal */
  constructor(
    sink: PermitSink,
    readonly units: number,
    /** The cut count when it was granted: a throttle cuts only for requests sent after the last cut. */
    readonly epoch: number,
    /** ms it waited in the queue. */
    readonly waitedMs = 0,
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

/** `waitedMs` of acquire options when valid (a finite number >= 0), else 0. */
export function waitedBefore(options: AcquireOptions | undefined): number {
  const waited = options?.waitedMs;
  return typeof waited === 'number' && waited >= 0 && Number.isFinite(waited) ? waited : 0;
}
