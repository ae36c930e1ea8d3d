import { kFailed, kNoAnswer, kNotSent, kQuotaWait, kSuccess, kThrottled } from '../internal.js';
import { checkQuota, checkUnitsUsed, checkWait, noAnswer, notSent } from '../limiter/permit.js';
import type { AnnouncedQuota, Permit } from '../limiter/types.js';

type Quota = readonly AnnouncedQuota[] | undefined;

/** A shared epoch in the generation of the state it belongs to: what a permit was sent in. */
export interface Era {
  readonly epoch: number;
  readonly generation: string | undefined;
}

/** @internal What a shared permit reports to: its budget. */
export interface SharedPermitSink {
  [kSuccess](inner: Permit, unitsUsed: number | undefined, quota?: Quota): void;
  /** `quotaWait`: `retryAfterMs` is only an exhausted policy's reset (see `throttledByQuota`). */
  [kThrottled](
    inner: Permit,
    sent: Era,
    retryAfterMs: number | undefined,
    quota?: Quota,
    quotaWait?: boolean,
  ): void;
  [kFailed](inner: Permit, retryAfterMs: number | undefined, quota?: Quota): void;
}

/**
 * The permit of a {@link SharedBudget}: the local permit plus the shared era it was sent in. The
 * first call settles it; later calls do nothing.
 */
export class SharedPermit implements Permit {
  #budget: SharedPermitSink | undefined;

  /** @internal */
  constructor(
    budget: SharedPermitSink,
    readonly inner: Permit,
    readonly era: Era,
  ) {
    this.#budget = budget;
  }

  /** The shared epoch it was sent in. */
  get epoch(): number {
    return this.era.epoch;
  }

  get units(): number {
    return this.inner.units;
  }

  get waitedMs(): number | undefined {
    return this.inner.waitedMs;
  }

  success(unitsUsed?: number, quota?: Quota): void {
    checkUnitsUsed(unitsUsed);
    checkQuota('success', quota);
    this.#settle()?.[kSuccess](this.inner, unitsUsed, quota);
  }

  throttled(retryAfterMs?: number, quota?: Quota): void {
    checkWait('throttled', retryAfterMs);
    checkQuota('throttled', quota);
    this.#settle()?.[kThrottled](this.inner, this.era, retryAfterMs, quota);
  }

  /**
   * @internal Throttled, its wait only an exhausted policy's reset (see `throttledByQuota`): the
   * local limiter pauses as the policy's shape says; the budget shares the wait as any other.
   */
  [kQuotaWait](retryAfterMs: number | undefined, quota: Quota): void {
    this.#settle()?.[kThrottled](this.inner, this.era, retryAfterMs, quota, true);
  }

  failed(retryAfterMs?: number, quota?: Quota): void {
    checkWait('failed', retryAfterMs);
    checkQuota('failed', quota);
    this.#settle()?.[kFailed](this.inner, retryAfterMs, quota);
  }

  /**
   * @internal The request never reached the API (see `notSent`): its local permit ends so, no
   * `failed` event, and the budget hears nothing (no answer came).
   */
  [kNotSent](): void {
    if (this.#settle() !== undefined) notSent(this.inner);
  }

  /**
   * @internal The request got no HTTP answer (see `noAnswer`): its local permit ends so (a
   * failure without a wait shares nothing with the budget).
   */
  [kNoAnswer](): void {
    if (this.#settle() !== undefined) noAnswer(this.inner);
  }

  #settle(): SharedPermitSink | undefined {
    const budget = this.#budget;
    this.#budget = undefined;
    return budget;
  }
}
