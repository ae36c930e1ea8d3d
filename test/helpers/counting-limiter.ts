import { kFailed, kSuccess, kThrottled } from '../../src/internal.js';
import { AdaptiveRateLimiter } from '../../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../../src/limiter/options.js';
import type { LimiterPermit } from '../../src/limiter/permit.js';
import type { AnnouncedQuota } from '../../src/limiter/types.js';

// The books of a limiter the test owns: the permits it grants (the `acquired` event) and the
// answers told to it (every way a permit settles ends in `kSuccess`, `kThrottled` or `kFailed`),
// so that `open` is the number of permits granted and never settled: units still counted in flight.

type Quota = readonly AnnouncedQuota[] | undefined;

/** An adaptive limiter that counts its grants and its settled permits. */
export class CountingLimiter extends AdaptiveRateLimiter {
  granted = 0;
  answered = { success: 0, throttled: 0, failed: 0 };

  constructor(options: AdaptiveLimiterOptions) {
    super(options);
    this.on('acquired', () => this.granted++);
  }

  /** Permits granted and not settled. */
  get open(): number {
    return this.granted - this.answered.success - this.answered.throttled - this.answered.failed;
  }

  override [kSuccess](permit: LimiterPermit, unitsUsed: number | undefined, quota: Quota): void {
    this.answered.success++;
    super[kSuccess](permit, unitsUsed, quota);
  }

  override [kThrottled](
    permit: LimiterPermit,
    retryAfterMs: number | undefined,
    quota: Quota,
    quotaWait?: boolean,
    noCut?: boolean,
  ): void {
    this.answered.throttled++;
    super[kThrottled](permit, retryAfterMs, quota, quotaWait, noCut);
  }

  override [kFailed](
    permit: LimiterPermit,
    retryAfterMs: number | undefined,
    quota: Quota,
    counted?: boolean,
    answered?: boolean,
  ): void {
    this.answered.failed++;
    super[kFailed](permit, retryAfterMs, quota, counted, answered);
  }
}
