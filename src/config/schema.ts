import { z } from 'zod';
import { ConfigError, type ConfigIssue } from '../errors.js';
import {
  type AdaptiveLimiterOptions,
  CONTROLLER_MESSAGE,
  configErrorFrom,
  limiterFieldsSchema,
} from '../limiter/options.js';
import type { RateLimiter } from '../limiter/types.js';
import { originMatcher } from '../origin.js';
import { canonicalKeys, expandIssues, type Level, level, unwrapSection, writtenPath } from './appsettings.js';
import { durationSchema } from './duration.js';
import { issuesOf, maxConcurrent, originRules, RATE_FIELDS, rateRules, SOURCE, withRule } from './rules.js';
import { type SharedConfig, sharedConfigSchema } from './shared.js';

export { APPSETTINGS_SECTION } from './appsettings.js';
export {
  conflictMessage,
  exactOrigin,
  exactOriginConflicts,
  issuesOf,
  limiterConfigIssues,
  type OriginConflict,
} from './rules.js';

/** One named limiter: the limiter's options plus what it covers and how requests are sent. */
export interface LimiterConfig extends Omit<AdaptiveLimiterOptions, 'clock' | 'name'> {
  /**
   * The origins this limiter covers: exact origins (`https://api.example.com`) and wildcards
   * (`*.example.com`, `https://*.example.com`). An exact origin beats a wildcard; among
   * wildcards the limiter declared first wins. An exact origin may belong to one limiter only.
   */
  origins?: string[];
  /** Requests in flight at once (an integer >= 1). @default unset: no cap */
  maxConcurrent?: number;
  /**
   * A limiter you own, to put behind `origins` instead of one the registry makes: typically a
   * `SharedBudget` (`adaptive-rate-limit/redis`), so that every process's requests to these
   * origins are metered against one budget; any {@link RateLimiter} will do (the HTTP adapters
   * use only its `tryAcquire` and `acquire`, and feed its permits).
   *
   * - It carries its own options: with it, only `origins` and `maxConcurrent` (the adapter's
   *   concurrency gate) are allowed; a rate option next to it is a `ConfigError` naming the field.
   * - Named limiters only (not `default`), and in code only: JSON config cannot hold an instance,
   *   so `parseConfig` rejects the key.
   * - The registry never closes it (not in `remove`, not in `close`) and never drops it: its
   *   owner closes it (`await budget.close()`), after the adapters that use it.
   * - `registry.get(name)` and `limiterFor(origin)` answer its `AdaptiveRateLimiter`: the instance
   *   itself when it is one, else its `.limiter` when that is one (a `SharedBudget`'s local
   *   limiter: this process's share, snapshot and events), else `undefined`.
   *   `registry.configFor(name).limiter` is the instance.
   *
   * @default unset: the registry makes an `AdaptiveRateLimiter` from this config
   */
  limiter?: RateLimiter;
  /**
   * A budget shared through Redis by every process that declares it (JSON config or code):
   * `{ "redis": "redis://...", "name": "github" }`. The limiter's rate options are the whole
   * budget's. The registry makes the `SharedBudget`, opens it at the first request and closes it
   * with the registry; not with `limiter`, and not in `default`. See {@link SharedConfig}.
   * @default unset: a limiter of this process alone
   */
  shared?: SharedConfig;
}

/** A parsed config file, or the registry and interceptor options it stands for. */
export interface RateLimitConfig {
  /** Named limiters, each with the origins it covers. @default {} */
  limiters: Record<string, LimiterConfig>;
  /**
   * The config for an origin no limiter names: each such origin gets a limiter of its own made
   * from it; `false` lets those origins pass through unlimited. @default {}
   */
  default: Omit<LimiterConfig, 'origins'> | false;
  /** Attempts in all for a throttled request whose body can be replayed (an integer >= 1). @default 4 */
  maxAttempts?: number;
  /** The response statuses that count as throttling, each 400..599. @default [429] */
  throttleStatuses?: number[];
  /** The largest request body (bytes) kept for a replay; a larger one is sent once. @default 1 MiB */
  maxReplayBodyBytes?: number;
  /** How a refused request ends: `'error'` or a local 429 (`'response'`), any case. @default 'error' */
  rejection?: 'error' | 'response';
}

/** The values {@link parseConfig} fills in for fields a config leaves out. */
export const CONFIG_DEFAULTS = {
  maxAttempts: 4,
  throttleStatuses: [429] as readonly number[],
  maxReplayBodyBytes: 1024 * 1024,
} as const;

// ---- the schema: the limiter's own field rules, with JSON's forms of durations and names ----

const fields = limiterFieldsSchema.shape;

/** A duration (ms, or a string such as "10s" or "00:00:10"), then the limiter's own rule for the field. */
function duration<T extends z.ZodType<number, number>>(rule: T) {
  return durationSchema.pipe(rule).optional();
}

/** `'aimd'`, `'cubic'` or `'probe'`, in any case (`"Cubic"`, `"AIMD"`), as .NET binds enums. */
const controllerName = z.preprocess(
  (value) => (typeof value === 'string' ? value.toLowerCase() : value),
  z.enum(fields.controller.unwrap().options[0].options, { error: CONTROLLER_MESSAGE }),
);

const aimdFields = fields.aimd.unwrap();
const aimdSchema = aimdFields
  .extend({ increaseInterval: duration(aimdFields.shape.increaseInterval.unwrap()) })
  .strict();
const cubicSchema = fields.cubic.unwrap().strict();
const probeFields = fields.probe.unwrap();
const probeSchema = probeFields
  .extend({
    drainTime: duration(probeFields.shape.drainTime.unwrap()),
    holdTime: duration(probeFields.shape.holdTime.unwrap()),
    maxHold: duration(probeFields.shape.maxHold.unwrap()),
    round: duration(probeFields.shape.round.unwrap()),
  })
  .strict();

/** One origin pattern, checked as the registry will read it. */
const originPattern = z.string().superRefine((pattern, ctx) => {
  for (const issue of issuesOf(() => originMatcher([pattern]))) {
    ctx.addIssue({ code: 'custom', message: issue.message, input: pattern });
  }
});

const limiterOptionsSchema = limiterFieldsSchema.omit({ name: true, clock: true, random: true }).extend({
  controller: controllerName.optional(),
  maxWait: duration(fields.maxWait.unwrap()),
  decreaseCooldown: duration(fields.decreaseCooldown.unwrap()),
  maxPause: duration(fields.maxPause.unwrap()),
  aimd: aimdSchema.optional(),
  cubic: cubicSchema.optional(),
  probe: probeSchema.optional(),
  maxConcurrent: maxConcurrent.optional(),
});

const limiterConfigObject = limiterOptionsSchema
  .extend({ origins: z.array(originPattern).optional(), shared: sharedConfigSchema.optional() })
  .strict();
const limiterConfigSchema = withRule(limiterConfigObject, RATE_FIELDS, rateRules);
const defaultConfigObject = limiterOptionsSchema.strict();
const defaultConfigSchema = withRule(defaultConfigObject, RATE_FIELDS, rateRules);

const configObject = z
  .object({
    limiters: z.record(z.string().min(1), limiterConfigSchema).default(() => ({})),
    default: z.union([z.literal(false), defaultConfigSchema]).default(() => ({})),
    maxAttempts: z.number().int().min(1).default(CONFIG_DEFAULTS.maxAttempts),
    throttleStatuses: z
      .array(z.number().int().min(400).max(599))
      .default(() => [...CONFIG_DEFAULTS.throttleStatuses]),
    maxReplayBodyBytes: z.number().int().nonnegative().default(CONFIG_DEFAULTS.maxReplayBodyBytes),
    rejection: z
      .preprocess((v) => (typeof v === 'string' ? v.toLowerCase() : v), z.enum(['error', 'response']))
      .optional(),
  })
  .strict();

const configSchema = withRule(configObject, [], originRules);

// ---- the keys of each level, for the appsettings mapping --------------------------------

const CONTROLLERS = { aimd: level(aimdSchema), cubic: level(cubicSchema), probe: level(probeSchema) };
const LIMITER: Level = level(limiterConfigObject, {
  objects: { ...CONTROLLERS, shared: level(sharedConfigSchema) },
});
const DEFAULT: Level = level(defaultConfigObject, { objects: CONTROLLERS });
const ROOT: Level = level(configObject, { objects: { default: DEFAULT }, records: { limiters: LIMITER } });

// ---- parseConfig -------------------------------------------------------------------------

/**
 * Validates a rate limit config and fills in its defaults. Takes our camelCase shape, or the
 * seed's `appsettings.json`: the whole file (`{ "AdaptiveRateLimiting": { ... } }`, other sections
 * ignored) or that section alone, with PascalCase keys (`"MaxWait"`) and controller names in any
 * case (`"Cubic"`). Keys match without regard to case, as .NET binds them; limiter names are kept
 * as written. Durations are ms or strings (`"500ms"`, `"10s"`, `"2m"`, `"00:00:10"`).
 *
 * @throws {ConfigError} listing every bad field at once: its path as written in the input
 * (`limiters.github.maxWait`, or `AdaptiveRateLimiting.Limiters.orders-api.MaxWait`), what was
 * expected and the value received. Unknown keys are errors, so a typo does not go unnoticed.
 */
export function parseConfig(json: unknown): RateLimitConfig {
  const written = new WeakMap<object, ReadonlyMap<string, string>>();
  const issues: ConfigIssue[] = [];
  const { section, prefix } = unwrapSection(json);
  const input = canonicalKeys(section, ROOT, written, issues, prefix);
  const result = configSchema.safeParse(input);
  if (result.success && issues.length === 0) return result.data;

  const zodIssues = result.success ? [] : expandIssues(result.error.issues, ROOT);
  const converted = configErrorFrom(new z.ZodError(zodIssues), input, SOURCE).issues;
  zodIssues.forEach((issue, i) => {
    const path = [...prefix, ...writtenPath(input, issue.path, written)].join('.');
    issues.push({ path, message: issue.message, received: converted[i]?.received });
  });
  throw new ConfigError(issues, SOURCE);
}
