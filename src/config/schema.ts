import { z } from 'zod';
import type { ProbeOptions } from '../controllers/probe.js';
import { ConfigError, type ConfigIssue, configErrorFrom, configPath } from '../errors.js';
import { issueMessage } from '../issue-message.js';
import {
  budgetsSchema,
  CONTROLLER_MESSAGE,
  limiterFieldsSchema,
  probeBlockIssues,
  RATE_FIELDS,
} from '../limiter/options.js';
import { originMatcher } from '../origin.js';
import { LLM_APIS, type LlmApi } from './api.js';
import {
  APPSETTINGS_SECTION,
  canonicalKeys,
  expandIssues,
  isDotnetSection,
  type Level,
  level,
  unwrapSection,
  writtenPath,
} from './appsettings.js';
import { durationSchema } from './duration.js';
import {
  apiRules,
  headerProfile,
  isRecord,
  issuesOf,
  limiterName,
  maxConcurrent,
  maxConcurrentPer,
  originRules,
  partitionBy,
  type RuleIssue,
  rateRules,
  SOURCE,
  withRule,
} from './rules.js';
import { sharedConfigSchema } from './shared.js';
import type { RateLimitConfig } from './types.js';

export type { LimiterConfig, RateLimitConfig } from './types.js';

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

/** `'paced'`, `'second'` or `'announced'`, in any case (`"Announced"`), as the other names. */
const burstName = z.preprocess(
  (value) => (typeof value === 'string' ? value.toLowerCase() : value),
  fields.burst.unwrap(),
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
/**
 * A `probe` block's `holdTime` and `maxHold` in ms, as the limiter will get them; `null` when
 * either is given and bad (its own rule tells it), `undefined` when there is no block.
 */
function probeHolds(raw: unknown): ProbeOptions | null | undefined {
  if (!isRecord(raw)) return undefined;
  const out: ProbeOptions = {};
  for (const key of ['holdTime', 'maxHold'] as const) {
    if (raw[key] === undefined) continue;
    const parsed = probeSchema.shape[key].safeParse(raw[key], { error: issueMessage });
    if (!parsed.success || parsed.data === undefined) return null;
    out[key] = parsed.data;
  }
  return out;
}

/** The probe controller's own cross-field rule (`maxHold` >= `holdTime`) on a limiter config's probe blocks, as the limiter checks them. */
function* probeRules(value: Record<string, unknown>): Iterable<RuleIssue> {
  const probe = probeHolds(value.probe);
  if (probe === null) return;
  const budgets: Record<string, { probe?: ProbeOptions }> = {};
  if (isRecord(value.budgets)) {
    for (const [name, budget] of Object.entries(value.budgets)) {
      const own = isRecord(budget) ? probeHolds(budget.probe) : undefined;
      if (own === null) return;
      budgets[name] = own === undefined ? {} : { probe: own };
    }
  }
  for (const issue of probeBlockIssues(probe, undefined, budgets)) {
    const input = issue.path.reduce<unknown>((at, key) => (isRecord(at) ? at[key] : undefined), value);
    yield { path: issue.path, message: issue.message, input };
  }
}

const budgetFields = fields.budgets.unwrap().valueType;
/**
 * One budget of `budgets`, read as the limiter's own fields are: durations as strings
 * (`reserve: "1.5s"`, `aimd.increaseInterval: "10s"`) and names in any case (`"Cubic"`). A budget
 * took the code's schema, and refused each of these while its limiter took them.
 */
const budgetConfigSchema = budgetFields.extend({
  controller: controllerName.optional(),
  burst: burstName.optional(),
  reserve: duration(budgetFields.shape.reserve.unwrap()),
  aimd: aimdSchema.optional(),
  cubic: cubicSchema.optional(),
  probe: probeSchema.optional(),
});

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
  burst: burstName.optional(),
  budgets: budgetsSchema(budgetConfigSchema).optional(),
  maxConcurrent: maxConcurrent.optional(),
  maxConcurrentPer: z
    .preprocess((v) => (typeof v === 'string' ? v.toLowerCase() : v), maxConcurrentPer)
    .optional(),
  partitionBy: partitionBy.optional(),
  headers: headerProfile.optional(),
  reserve: duration(fields.reserve.unwrap()),
  api: z
    .preprocess(
      (v) => (typeof v === 'string' ? v.toLowerCase() : v),
      z.enum(LLM_APIS as [LlmApi, ...LlmApi[]], { error: "must be 'openai' or 'anthropic'" }),
    )
    .optional(),
});

const limiterConfigObject = limiterOptionsSchema
  .extend({ origins: z.array(originPattern).optional(), shared: sharedConfigSchema.optional() })
  .strict();
/** The fields `apiRules` reads: a bad one is told alone. */
const API_FIELDS = ['api', 'budgets', 'shared'];
const limiterConfigSchema = withRule(
  withRule(withRule(limiterConfigObject, RATE_FIELDS, rateRules), API_FIELDS, apiRules),
  [],
  probeRules,
);
const defaultConfigObject = limiterOptionsSchema.strict();
const defaultConfigSchema = withRule(
  withRule(withRule(defaultConfigObject, RATE_FIELDS, rateRules), API_FIELDS, apiRules),
  [],
  probeRules,
);

/**
 * The HTTP adapters' fields of a config: checked where a config is read (`parseConfig`, a
 * `RateLimiterRegistry`), their defaults filled by the adapters (HTTP_DEFAULTS).
 */
export const httpConfigFields = {
  maxAttempts: z.number().int().min(1).optional(),
  throttleStatuses: z.array(z.number().int().min(400).max(599)).optional(),
  maxReplayBodyBytes: z.number().int().nonnegative().optional(),
  rejection: z
    .preprocess((v) => (typeof v === 'string' ? v.toLowerCase() : v), z.enum(['error', 'response']))
    .optional(),
};

const configObject = z
  .object({
    limiters: z.record(limiterName, limiterConfigSchema).default(() => ({})),
    default: z
      .union([z.literal(false), defaultConfigSchema], { error: 'must be false or an object' })
      .default(() => ({})),
    ...httpConfigFields,
  })
  .strict();

const configSchema = withRule(configObject, [], originRules);

/** The keys of a config's top level (what `parseConfig` reads there). */
export const CONFIG_KEYS: readonly string[] = Object.keys(configObject.shape);

// ---- the keys of each level, for the appsettings mapping --------------------------------

const CONTROLLERS = { aimd: level(aimdSchema), cubic: level(cubicSchema), probe: level(probeSchema) };
/** One budget of `budgets` (its name kept as written), its controller options below it. */
const BUDGET: Level = level(budgetConfigSchema, { objects: CONTROLLERS });
const LIMITER: Level = level(limiterConfigObject, {
  objects: { ...CONTROLLERS, shared: level(sharedConfigSchema) },
  records: { budgets: BUDGET },
});
const DEFAULT: Level = level(defaultConfigObject, { objects: CONTROLLERS, records: { budgets: BUDGET } });
const ROOT: Level = level(configObject, { objects: { default: DEFAULT }, records: { limiters: LIMITER } });
/**
 * The keys a config's top level may hold when it came without an `AdaptiveRateLimiting` section:
 * ours, or that section (for the unknown keys' messages). An appsettings.json whose section was
 * missing or misspelt (`"AdaptiveRateLimitting"`) was told only our keys, no word of the section.
 */
const FILE_ROOT: Level = {
  ...ROOT,
  keys: new Map([...ROOT.keys, [APPSETTINGS_SECTION.toLowerCase(), APPSETTINGS_SECTION]]),
};

// ---- parseConfig -------------------------------------------------------------------------

/**
 * Validates a rate limit config and fills in its defaults. Takes our camelCase shape, or the
 * RateLimiting.Adaptive's `appsettings.json`: the whole file (`{ "AdaptiveRateLimiting": { ... } }`, other sections
 * ignored) or that section alone, with PascalCase keys (`"MaxWait"`) and controller names in any
 * case (`"Cubic"`). Keys match without regard to case, as .NET binds them; limiter names are kept
 * as written. Durations are ms or strings (`"500ms"`, `"10s"`, `"2m"`, `"00:00:10"`). In an
 * appsettings.json section (the `AdaptiveRateLimiting` key, or PascalCase keys at its top), numbers
 * and booleans may be written as strings (`"2700"`, `"true"`), as .NET's binder reads them (and
 * environment variables give them), and a duration may not be a
 * bare number in a string (`"30"`: 30 days to .NET, 30 ms here), which is refused with its path.
 *
 * @throws {ConfigError} listing every bad field at once: its path as written in the input
 * (`limiters.github.maxWait`, or `AdaptiveRateLimiting.Limiters.orders-api.MaxWait`), what was
 * expected and the value received. Unknown keys are errors, so a typo does not go unnoticed.
 */
export function parseConfig(json: unknown): RateLimitConfig {
  const written = new WeakMap<object, ReadonlyMap<string, string>>();
  const issues: ConfigIssue[] = [];
  const { section, prefix } = unwrapSection(json, issues);
  const input = canonicalKeys(section, ROOT, written, issues, prefix, isDotnetSection(section, prefix));
  const result = configSchema.safeParse(input, { error: issueMessage });
  if (result.success && issues.length === 0) return result.data;

  const zodIssues = result.success
    ? []
    : expandIssues(result.error.issues, prefix.length === 0 ? FILE_ROOT : ROOT);
  const converted = configErrorFrom(new z.ZodError(zodIssues), input, SOURCE).issues;
  // A value canonicalKeys told already (`"QueueLimit": "5.0"`) is told once, with its reason.
  const told = new Set(issues.map((issue) => issue.path));
  zodIssues.forEach((issue, i) => {
    const path = configPath([...prefix, ...writtenPath(input, issue.path, written)]);
    if (told.has(path)) return;
    issues.push({ path, message: converted[i]?.message ?? issue.message, received: converted[i]?.received });
  });
  throw new ConfigError(issues, SOURCE);
}
