import type { AcquireOptions, Permit, RateLimiter } from '../limiter/types.js';

const NO_OP_PERMIT: Permit = {
  units: 1,
  success() {},
  throttled() {},
  failed() {},
};

/**
 * The `none` mode: no limiter at all. Every acquire is granted at once and the feedback goes
 * nowhere, so a 429's `Retry-After` is ignored and a throttled request is sent again as soon as
 * its answer is in, up to the attempt loop's `maxAttempts`: a client with plain retries.
 */
export class PassThroughLimiter implements RateLimiter {
  readonly #permit: Promise<Permit> = Promise.resolve(NO_OP_PERMIT);

  constructor(readonly name: string) {}

  acquire(_units?: number, options?: AcquireOptions): Promise<Permit> {
    if (options?.signal?.aborted) return Promise.reject(options.signal.reason);
    return this.#permit;
  }

  tryAcquire(): Permit | undefined {
    return NO_OP_PERMIT;
  }
}
