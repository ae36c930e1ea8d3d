import { z } from 'zod';
import type { Clock } from '../clock.js';
import type { LimiterConfig } from '../config/schema.js';

/** Options of a {@link RateLimiterRegistry}. */
export interface RegistryOptions {
  /** Named limiters, each with the origins it covers, in declaration order. @default {} */
  limiters?: Record<string, LimiterConfig>;
  /**
   * The config for an origin no limiter covers: each such origin gets a limiter of its own, made
   * on first use and named after the normalized origin. `false` passes those origins through
   * (`limiterFor` returns `undefined`). @default {}
   */
  default?: Omit<LimiterConfig, 'origins'> | false;
  /** The time source of the registry and of every limiter it makes. @default systemClock */
  clock?: Clock;
  /**
   * The most per-origin limiters kept (an integer >= 1); making one more drops the least recently
   * used idle one. Limiters with requests queued or a pause running are never dropped, so the
   * count can exceed this while that many are busy. @default 1_000
   */
  maxOriginLimiters?: number;
  /**
   * A per-origin limiter that is idle (nothing queued, not paused) and was not looked up for this
   * long (ms) is dropped; the next request to its origin starts a fresh one. Checked lazily,
   * during `limiterFor`, at most every `idleTimeout / 10` ms: no timers. @default 600_000
   */
  idleTimeout?: number;
}

export const REGISTRY_DEFAULTS = { maxOriginLimiters: 1_000, idleTimeout: 600_000 } as const;

export const registryOptionsSchema = z
  .object({
    maxOriginLimiters: z.number().int().min(1),
    idleTimeout: z.number().nonnegative(),
  })
  .partial();
