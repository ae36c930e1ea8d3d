import { z } from 'zod';
import type { Clock } from '../clock.js';
import { unknownKeyMessage } from '../config/rules.js';
import { CONFIG_KEYS, httpConfigFields, type LimiterConfig } from '../config/schema.js';
import type { ConfigIssue } from '../errors.js';
import { clockSchema } from '../limiter/options.js';

/**
 * Options of a {@link RateLimiterRegistry}: a config (`parseConfig`'s result is taken as it is)
 * and the registry's own fields, each bad value a `ConfigError` naming the field and the value.
 * A config's HTTP fields (`maxAttempts`, `throttleStatuses`, `maxReplayBodyBytes`, `rejection`)
 * are checked as `parseConfig` checks them, and not used: the adapters read them from their own
 * options.
 */
export interface RegistryOptions {
  /**
   * Named limiters (an object of limiter configs by name), each with the origins it covers, in
   * declaration order. @default {}
   */
  limiters?: Record<string, LimiterConfig>;
  /**
   * The config for an origin no limiter covers: each such origin gets a limiter of its own, made
   * on first use and named after the normalized origin. `false` passes those origins through
   * (`limiterFor` returns `undefined`); `null` is refused. @default {}
   */
  default?: Omit<LimiterConfig, 'origins'> | false;
  /** The time source of the registry and of every limiter it makes. @default systemClock */
  clock?: Clock;
  /**
   * The most per-origin limiters kept (an integer >= 1). A new origin's limiter takes the place of
   * one of the least recently used: an idle one is dropped; one whose only state is a pause is
   * dropped with its pause kept as a small record (see `maxPausedOrigins`); one with requests
   * queued or in flight is never dropped. When none of those looked at can go (16 at most: the
   * work per new origin is constant), the new origin shares the registry's overflow limiter
   * (named `(overflow)`, made from `default`) until there is room; an origin with a pause record
   * gets its limiter back even then, in the record's place (its pause pauses no one else), so
   * limiters and records together stay within `maxOriginLimiters + maxPausedOrigins`.
   * @default 1_000
   */
  maxOriginLimiters?: number;
  /**
   * The most pauses kept for origins whose limiter was dropped to make room (an integer >= 0): a
   * record of the origin and the pause's end (about 130 B), which the origin's next limiter
   * starts with, so that a `Retry-After` is never lost. When the records are full of running
   * pauses, a paused limiter stays, and new origins without a record use the overflow limiter.
   * @default 10_000
   */
  maxPausedOrigins?: number;
  /**
   * A per-origin limiter that is idle (nothing queued, not paused) and was not used for this long
   * (ms: looked up, or busy when the registry made room for another) is dropped; the next request
   * to its origin starts a fresh one. Checked lazily, during `limiterFor`, at most every
   * `idleTimeout / 10` ms: no timers. @default 600_000
   */
  idleTimeout?: number;
}

/** The name of the limiter shared by new origins that find no room among the per-origin ones. */
export const OVERFLOW = '(overflow)';

export const REGISTRY_DEFAULTS = {
  maxOriginLimiters: 1_000,
  maxPausedOrigins: 10_000,
  idleTimeout: 600_000,
} as const;

const isObject = (v: unknown): v is object => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The registry's options, each checked for its type; the limiter configs of `limiters` and
 * `default` are checked one by one as the registry builds them.
 */
export const registryOptionsSchema = z
  .object({
    maxOriginLimiters: z.number().int().min(1),
    maxPausedOrigins: z.number().int().min(0),
    idleTimeout: z.number().nonnegative(),
    clock: clockSchema,
    limiters: z.custom<Record<string, LimiterConfig>>(isObject, {
      message: 'must be an object of limiter configs by name',
    }),
    default: z.custom<Omit<LimiterConfig, 'origins'> | false>((v) => v === false || isObject(v), {
      message: 'must be false or an object',
    }),
    // Taken with a config (`parseConfig`'s result is given as it is) and checked as it checks
    // them; the adapters read them from their own options, the registry not at all.
    ...httpConfigFields,
  })
  .partial();

/** The registry's own keys, beside a config's. */
const REGISTRY_KEYS = Object.keys(registryOptionsSchema.shape).filter((key) => !CONFIG_KEYS.includes(key));

/**
 * The keys of `options` neither the registry nor a config knows, each with its near miss: a typo
 * (`limiter`, `defaults`, `idleTimout`) dropped what it held with no error, and a registry with no
 * named limiter left the API it was meant to cap uncapped.
 */
export function unknownRegistryKeys(options: unknown): ConfigIssue[] {
  if (typeof options !== 'object' || options === null) return [];
  const known = [...CONFIG_KEYS, ...REGISTRY_KEYS];
  return Object.keys(options)
    .filter((key) => !known.includes(key))
    .map((key) => ({
      path: key,
      message: unknownKeyMessage(key, known),
      received: (options as Record<string, unknown>)[key],
    }));
}
