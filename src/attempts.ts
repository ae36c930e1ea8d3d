import type { Outcome, Permit, RateLimiter } from './limiter/types.js';

/** One transport's way of making and judging an attempt; see {@link runAttempts}. */
export interface AttemptPlan<T> {
  limiter: RateLimiter;
  /** Units charged for each attempt. */
  units: number;
  /** Attempts in all, the first included (>= 1). */
  maxAttempts: number;
  signal?: AbortSignal | undefined;
  /** Sends attempt `attempt` (1-based). A rejection is classified by `classifyError`. */
  send(attempt: number): Promise<T>;
  /** How a result feeds the limiter. */
  classify(result: T): Outcome;
  /** How a thrown error feeds the limiter. @default failed */
  classifyError?(error: unknown): Outcome;
  /** Whether a throttled result may be sent again (its body can be replayed). @default true */
  canRetry?(result: T): boolean;
  /** Drops a throttled result that is about to be retried (drain its body). */
  discard?(result: T): void;
  /** Whether a throttled error may be sent again. @default true */
  canRetryError?(error: unknown): boolean;
}

/**
 * The attempt loop every adapter shares: acquire units, send, classify the answer, feed the
 * permit, and send a throttled attempt again through the limiter, up to `maxAttempts` in all.
 * When the attempts run out the caller gets the last answer itself (the 429 response, or the
 * last error), never a new error of ours. A rejection by the limiter (queue full, max wait,
 * closed) or an abort rejects with that error.
 */
export async function runAttempts<T>(plan: AttemptPlan<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const permit = await plan.limiter.acquire(plan.units, { signal: plan.signal });
    let result: T;
    try {
      result = await plan.send(attempt);
    } catch (error) {
      const outcome = plan.classifyError ? plan.classifyError(error) : ({ kind: 'failed' } as const);
      feed(permit, outcome);
      if (
        outcome.kind === 'throttled' &&
        attempt < plan.maxAttempts &&
        (plan.canRetryError?.(error) ?? true)
      ) {
        continue;
      }
      throw error;
    }
    const outcome = plan.classify(result);
    feed(permit, outcome);
    if (outcome.kind !== 'throttled' || attempt >= plan.maxAttempts || !(plan.canRetry?.(result) ?? true)) {
      return result;
    }
    plan.discard?.(result);
  }
}

/** Settles a permit with an outcome. */
export function feed(permit: Permit, outcome: Outcome): void {
  if (outcome.kind === 'success') permit.success(outcome.units);
  else if (outcome.kind === 'throttled') permit.throttled(outcome.retryAfterMs);
  else permit.failed(outcome.retryAfterMs);
}
