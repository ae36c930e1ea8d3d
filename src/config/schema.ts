import { z } from 'zod';
import { ConfigError, type ConfigIssue } from '../errors.js';
import { normalizeOrigin, originMatcher } from '../http/origin.js';
import {
  type AdaptiveLimiterOptions,
  CONTROLLER_MESSAGE,
  configErrorFrom,
  limiterFieldsSchema,
  resolveLimiterOptions,
} from '../limiter/options.js';
import type { RateLimiter } from '../limiter/types.js';
import { durationSchema } from './duration.js';

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
}

/** The values {@link parseConfig} fills in for fields a config leaves out. */
export const CONFIG_DEFAULTS = {
  maxAttempts: 4,
  throttleStatuses: [429] as readonly number[],
  maxReplayBodyBytes: 1024 * 1024,
} as const;

/** The key of the seed's `appsettings.json` section (matched without regard to case). */
export const APPSETTINGS_SECTION = 'AdaptiveRateLimiting';

const SOURCE = 'rate limit config';

// ---- the schema: the limiter's own field rules, with JSON's forms of durations and names ----

const fields = limiterFieldsSchema.shape;

/** A duration (ms, or a string such as "10s" or "00:00:10"), then the limiter's own rule for the field. */
function duration<T extends z.ZodType<number, number>>(rule: T) {
  return durationSchema.pipe(rule).optional();
}

/** `'aimd'` or `'cubic'`, in any case (`"Cubic"`, `"AIMD"`), as .NET binds enums. */
const controllerName = z.preprocess(
  (value) => (typeof value === 'string' ? value.toLowerCase() : value),
  z.enum(fields.controller.unwrap().options[0].options, { error: CONTROLLER_MESSAGE }),
);

const aimdFields = fields.aimd.unwrap();
const aimdSchema = aimdFields
  .extend({ increaseInterval: duration(aimdFields.shape.increaseInterval.unwrap()) })
  .strict();
const cubicSchema = fields.cubic.unwrap().strict();

/** One origin pattern, checked as the registry will read it. */
const originPattern = z.string().superRefine((pattern, ctx) => {
  for (const issue of issuesOf(() => originMatcher([pattern]))) {
    ctx.addIssue({ code: 'custom', message: issue.message, input: pattern });
  }
});

const maxConcurrent = z.number().int().min(1);

const limiterOptionsSchema = limiterFieldsSchema.omit({ name: true, clock: true }).extend({
  controller: controllerName.optional(),
  maxWait: duration(fields.maxWait.unwrap()),
  decreaseCooldown: duration(fields.decreaseCooldown.unwrap()),
  maxPause: duration(fields.maxPause.unwrap()),
  aimd: aimdSchema.optional(),
  cubic: cubicSchema.optional(),
  maxConcurrent: maxConcurrent.optional(),
});

/** An issue of a {@link withRule} rule, at a path relative to the object it checks. */
interface RuleIssue {
  path: PropertyKey[];
  message: string;
  input: unknown;
}

/**
 * `schema`, then `rule` on the input whenever it is an object and none of the fields `rule` reads
 * (`reads`, top-level keys) has an issue, whatever the other fields do. A zod refinement would not
 * do: zod skips every refinement of an object once one of its fields fails with an explicit abort
 * (`.int()` does), so a non-integer `instanceCount` would hide `minUnitsPerMinute` > `maxUnitsPerMinute`.
 */
function withRule<T extends z.ZodType>(
  schema: T,
  reads: readonly PropertyKey[],
  rule: (value: Record<string, unknown>) => Iterable<RuleIssue>,
) {
  return z.unknown().transform((input, ctx): z.output<T> => {
    const result = schema.safeParse(input);
    const issues = result.success ? [] : result.error.issues;
    for (const issue of issues) ctx.addIssue(issue as Parameters<typeof ctx.addIssue>[0]);
    if (isRecord(input) && !issues.some((issue) => reads.includes(issue.path[0] ?? ''))) {
      for (const issue of rule(input)) ctx.addIssue({ code: 'custom', ...issue });
    }
    return result.success ? result.data : z.NEVER;
  });
}

const RATE_FIELDS = ['minUnitsPerMinute', 'maxUnitsPerMinute', 'initialUnitsPerMinute'] as const;

/** The limiter's cross-field rules (min <= max, initial within them), as `resolveLimiterOptions` states them. */
function* rateRules(value: Record<string, unknown>): Iterable<RuleIssue> {
  const rates = Object.fromEntries(
    RATE_FIELDS.filter((k) => value[k] !== undefined).map((k) => [k, value[k]]),
  );
  for (const issue of issuesOf(() => resolveLimiterOptions(rates))) {
    yield { path: [issue.path], message: issue.message, input: issue.received };
  }
}

const limiterConfigObject = limiterOptionsSchema
  .extend({ origins: z.array(originPattern).optional() })
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
  })
  .strict();

/** An exact origin listed by two limiters; bad patterns are skipped (they are reported on their own). */
function* originRules(config: Record<string, unknown>): Iterable<RuleIssue> {
  if (!isRecord(config.limiters)) return;
  for (const c of exactOriginConflicts(
    Object.entries(config.limiters) as Parameters<typeof exactOriginConflicts>[0],
  )) {
    yield { path: ['limiters', c.name, 'origins', c.index], message: conflictMessage(c), input: c.pattern };
  }
}

const configSchema = withRule(configObject, [], originRules);

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
  const input = canonicalKeys(section, ROOT, written, issues);
  const result = configSchema.safeParse(input);
  if (result.success && issues.length === 0) return result.data;

  const zodIssues = result.success ? [] : expandIssues(result.error.issues);
  const converted = configErrorFrom(new z.ZodError(zodIssues), input, SOURCE).issues;
  zodIssues.forEach((issue, i) => {
    const path = [...prefix, ...writtenPath(input, issue.path, written)].join('.');
    issues.push({ path, message: issue.message, received: converted[i]?.received });
  });
  throw new ConfigError(issues, SOURCE);
}

function unwrapSection(json: unknown): { section: unknown; prefix: string[] } {
  if (isRecord(json)) {
    const key = Object.keys(json).find((k) => k.toLowerCase() === APPSETTINGS_SECTION.toLowerCase());
    if (key !== undefined) return { section: json[key], prefix: [key] };
  }
  return { section: json, prefix: [] };
}

/** The known keys of one object level of the config, and the levels below it. */
interface Level {
  /** Lower-case key to its canonical (camelCase) spelling. */
  keys: ReadonlyMap<string, string>;
  /** Keys whose value is an object of this kind. */
  objects?: Readonly<Record<string, Level>>;
  /** Keys whose value maps names (kept as written) to objects of this kind. */
  records?: Readonly<Record<string, Level>>;
}

function level(schema: { shape: object }, more: Omit<Level, 'keys'> = {}): Level {
  return { keys: new Map(Object.keys(schema.shape).map((k) => [k.toLowerCase(), k])), ...more };
}

const CONTROLLERS = { aimd: level(aimdSchema), cubic: level(cubicSchema) };
const LIMITER: Level = level(limiterConfigObject, { objects: CONTROLLERS });
const DEFAULT: Level = level(defaultConfigObject, { objects: CONTROLLERS });
const ROOT: Level = level(configObject, { objects: { default: DEFAULT }, records: { limiters: LIMITER } });

/**
 * A copy of `value` with the keys of `lvl` in their canonical spelling. `written` remembers, per
 * copied object, how each key was written, so issues name the path as the user wrote it.
 */
function canonicalKeys(
  value: unknown,
  lvl: Level,
  written: WeakMap<object, ReadonlyMap<string, string>>,
  issues: ConfigIssue[],
  path: readonly string[] = [],
): unknown {
  if (!isRecord(value)) return value;
  const out: Record<string, unknown> = {};
  const spelled = new Map<string, string>();
  for (const [key, v] of Object.entries(value)) {
    const name = lvl.keys.get(key.toLowerCase()) ?? key;
    const other = spelled.get(name);
    if (other !== undefined) {
      issues.push({ path: [...path, key].join('.'), message: `duplicates key "${other}"`, received: v });
      continue;
    }
    spelled.set(name, key);
    const objectLevel = lvl.objects?.[name];
    const recordLevel = lvl.records?.[name];
    if (objectLevel) out[name] = canonicalKeys(v, objectLevel, written, issues, [...path, key]);
    else if (recordLevel && isRecord(v)) {
      const entries = Object.entries(v).map(([k, item]) => [
        k,
        canonicalKeys(item, recordLevel, written, issues, [...path, key, k]),
      ]);
      out[name] = Object.fromEntries(entries);
    } else out[name] = v;
  }
  written.set(out, spelled);
  return out;
}

/** The issue path as the user wrote it: each canonical key back in its own spelling. */
function writtenPath(
  input: unknown,
  path: readonly PropertyKey[],
  written: WeakMap<object, ReadonlyMap<string, string>>,
): string[] {
  const out: string[] = [];
  let node = input;
  for (const key of path) {
    const name = String(key);
    out.push((isRecord(node) ? written.get(node)?.get(name) : undefined) ?? name);
    node = isRecord(node) || Array.isArray(node) ? (node as Record<string, unknown>)[name] : undefined;
  }
  return out;
}

type ZodIssue = z.core.$ZodIssue;

/**
 * One issue per bad field: an unknown key becomes an issue at that key, and a failed union
 * (`default`: `false` or an object) reports the errors of the branch the value was meant for.
 */
function expandIssues(issues: readonly ZodIssue[], base: readonly PropertyKey[] = []): ZodIssue[] {
  return issues.flatMap((issue): ZodIssue[] => {
    const path = [...base, ...issue.path];
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({
        code: 'custom',
        path: [...path, key],
        message:
          key.toLowerCase() === 'limiter' && path.length === 2 && path[0] === 'limiters'
            ? 'a limiter instance cannot come from JSON config: set `limiter` in code (RateLimiterRegistry or the HTTP adapters)'
            : `unknown key (expected one of: ${knownKeys(path).join(', ')})`,
      }));
    }
    if (issue.code === 'invalid_union') {
      const meant = issue.errors.find(
        (branch) => !branch.some((i) => i.path.length === 0 && isTypeMismatch(i)),
      );
      if (meant) return expandIssues(meant, path);
      return [{ ...issue, path, message: 'expected false or an object' }];
    }
    return [{ ...issue, path }];
  });
}

function isTypeMismatch(issue: ZodIssue): boolean {
  return issue.code === 'invalid_type' || issue.code === 'invalid_value';
}

/** The canonical keys of the object at `path` of the config. */
function knownKeys(path: readonly PropertyKey[]): string[] {
  let lvl: Level | undefined = ROOT;
  for (let i = 0; i < path.length && lvl; i++) {
    const key = String(path[i]);
    if (lvl.records?.[key]) {
      lvl = lvl.records[key];
      i++;
    } else lvl = lvl.objects?.[key];
  }
  return lvl ? [...lvl.keys.values()] : [];
}

// ---- helpers shared with the registry ----------------------------------------------------

/** An exact origin that a later limiter lists although an earlier one (`owner`) already covers it. */
export interface OriginConflict {
  name: string;
  index: number;
  pattern: string;
  origin: string;
  owner: string;
}

/**
 * Exact origins listed by more than one limiter, in declaration order: the first limiter owns
 * the origin, each later listing is a conflict. Wildcards may overlap (the first declared wins);
 * bad patterns are skipped (they are reported on their own).
 */
export function exactOriginConflicts(
  limiters: Iterable<readonly [string, { origins?: readonly unknown[] | undefined } | undefined]>,
): OriginConflict[] {
  const owners = new Map<string, string>();
  const conflicts: OriginConflict[] = [];
  for (const [name, config] of limiters) {
    const origins = isRecord(config) && Array.isArray(config.origins) ? config.origins : [];
    origins.forEach((pattern, index) => {
      if (typeof pattern !== 'string' || pattern.includes('*')) return;
      const origin = exactOrigin(pattern);
      if (origin === undefined) return;
      const owner = owners.get(origin);
      if (owner === undefined) owners.set(origin, name);
      else if (owner !== name) conflicts.push({ name, index, pattern, origin, owner });
    });
  }
  return conflicts;
}

export function conflictMessage(conflict: OriginConflict): string {
  return `${conflict.origin} is already covered by limiter "${conflict.owner}"`;
}

/** The normalized origin of an exact (non-wildcard) pattern, or `undefined` when it is not one. */
export function exactOrigin(pattern: string): string | undefined {
  if (pattern.includes('*') || issuesOf(() => originMatcher([pattern])).length > 0) return undefined;
  return normalizeOrigin(pattern);
}

/** The keys of a {@link LimiterConfig} allowed next to a `limiter` instance. */
const WITH_INSTANCE: ReadonlySet<string> = new Set(['origins', 'maxConcurrent', 'limiter']);

/**
 * What a {@link LimiterConfig} adds to the limiter's options (`origins`, `maxConcurrent`,
 * `limiter`), checked; the limiter checks the rest when it is made. Issues name
 * `${path}.origins.0` and so on.
 */
export function limiterConfigIssues(config: LimiterConfig, path: string): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  if (config.limiter !== undefined) {
    if (!isRateLimiter(config.limiter))
      issues.push({
        path: `${path}.limiter`,
        message: 'expected a RateLimiter (an object with acquire() and tryAcquire())',
        received: config.limiter,
      });
    for (const [key, value] of Object.entries(config)) {
      if (value === undefined || WITH_INSTANCE.has(key)) continue;
      issues.push({
        path: `${path}.${key}`,
        message: 'not allowed with `limiter`: the limiter instance carries its own options',
        received: value,
      });
    }
  }
  if (config.origins !== undefined) {
    if (Array.isArray(config.origins))
      issues.push(...issuesOf(() => originMatcher(config.origins ?? [], `${path}.origins`)));
    else
      issues.push({
        path: `${path}.origins`,
        message: 'expected an array of origins',
        received: config.origins,
      });
  }
  if (config.maxConcurrent !== undefined) {
    const result = maxConcurrent.safeParse(config.maxConcurrent);
    if (!result.success)
      issues.push(
        ...configErrorFrom(result.error, config.maxConcurrent, SOURCE, `${path}.maxConcurrent`).issues,
      );
  }
  return issues;
}

/** The issues of the {@link ConfigError} `fn` throws, or none; any other error is rethrown. */
export function issuesOf(fn: () => unknown): readonly ConfigIssue[] {
  try {
    fn();
    return [];
  } catch (error) {
    if (error instanceof ConfigError) return error.issues;
    throw error;
  }
}

function isRateLimiter(value: unknown): value is RateLimiter {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as RateLimiter).acquire === 'function' &&
    typeof (value as RateLimiter).tryAcquire === 'function'
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
