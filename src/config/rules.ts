import { z } from 'zod';
import { ConfigError, type ConfigIssue, configErrorFrom, configPath, unknownKeyMessage } from '../errors.js';
import { issueMessage } from '../issue-message.js';
import {
  limiterFieldsSchema,
  nameIssue,
  nameSchema,
  RATE_FIELDS,
  resolveLimiterOptions,
} from '../limiter/options.js';
import type { RateLimiter } from '../limiter/types.js';
import { normalizeOrigin, originMatcher, patternKey } from '../origin.js';
import { API_WITH_SHARED, apiBudgetIssues, LLM_APIS } from './api.js';
import { HEADER_PROFILES, type HeaderProfile, type LimiterConfig } from './types.js';

/** The source a config error names. */
export const SOURCE = 'rate limit config';

/** The rule of `maxConcurrent`, in the schema and next to a `limiter` instance. */
export const maxConcurrent = z.number().int().min(1);

/** What an empty or blank limiter name is told (see `nameIssue`: the rule of every name). */
export const LIMITER_NAME_MESSAGE = nameIssue('limiter', '') as string;

/** A limiter's name, as a key of `limiters`: the rule of every limiter's and budget's name. */
export const limiterName = nameSchema('limiter');

/** The rule of `maxConcurrentPer`. */
export const maxConcurrentPer = z.enum(['partition', 'origin']);

/** The rule of `partitionBy`: header names, or `false`. */
export const partitionBy = z.union(
  [z.literal(false), z.array(z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'must be a header name'))],
  { error: 'must be false or a list of header names' },
);

const PROFILES = HEADER_PROFILES.map((p) => `'${p}'`).join(', ');

/** What `headers` takes, as its errors say it (the limiters' and `wrap`'s). */
export const HEADERS_MESSAGE = `must be ${PROFILES} or false`;

/** The rule of `headers` (a profile, in any case in JSON as .NET binds enums, or `false`). */
export const headerProfile = z.preprocess(
  (value) => (typeof value === 'string' ? value.toLowerCase() : value),
  z.union([z.enum(HEADER_PROFILES as [HeaderProfile, ...HeaderProfile[]]), z.literal(false)], {
    error: HEADERS_MESSAGE,
  }),
);

// ---- cross-field rules of the schema -----------------------------------------------------

/** An issue of a {@link withRule} rule, at a path relative to the object it checks. */
export interface RuleIssue {
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
export function withRule<T extends z.ZodType>(
  schema: T,
  reads: readonly PropertyKey[],
  rule: (value: Record<string, unknown>) => Iterable<RuleIssue>,
) {
  return z.unknown().transform((input, ctx): z.output<T> => {
    const result = schema.safeParse(input, { error: issueMessage });
    const issues = result.success ? [] : result.error.issues;
    for (const issue of issues) ctx.addIssue(issue as Parameters<typeof ctx.addIssue>[0]);
    if (isRecord(input) && !issues.some((issue) => reads.includes(issue.path[0] ?? ''))) {
      for (const issue of rule(input)) ctx.addIssue({ code: 'custom', ...issue });
    }
    return result.success ? result.data : z.NEVER;
  });
}

/**
 * `api`'s cross-field rules, as the registry states them (limiterConfigIssues, makeSharedBudget):
 * `budgets` names the API's budgets, each once; `shared` does not go with it.
 */
export function* apiRules(value: Record<string, unknown>): Iterable<RuleIssue> {
  if (value.api === undefined) return;
  const api = typeof value.api === 'string' ? value.api.toLowerCase() : value.api;
  for (const issue of apiBudgetIssues(api, value.budgets)) {
    yield { path: ['budgets', issue.budget], message: issue.message, input: issue.received };
  }
  if (value.shared !== undefined) yield { path: ['api'], message: API_WITH_SHARED, input: value.api };
}

/** The limiter's cross-field rules (min <= max, initial within them), as `resolveLimiterOptions` states them. */
export function* rateRules(value: Record<string, unknown>): Iterable<RuleIssue> {
  const rates = Object.fromEntries(
    RATE_FIELDS.filter((k) => value[k] !== undefined).map((k) => [k, value[k]]),
  );
  for (const issue of issuesOf(() => resolveLimiterOptions(rates))) {
    yield { path: [issue.path], message: issue.message, input: issue.received };
  }
}

/** An exact origin listed by two limiters; bad patterns are skipped (they are reported on their own). */
export function* originRules(config: Record<string, unknown>): Iterable<RuleIssue> {
  if (!isRecord(config.limiters)) return;
  for (const c of originConflicts(Object.entries(config.limiters) as Parameters<typeof originConflicts>[0])) {
    yield { path: ['limiters', c.name, 'origins', c.index], message: conflictMessage(c), input: c.pattern };
  }
}

// ---- helpers shared with the registry ----------------------------------------------------

/** An origin or wildcard that a later limiter lists although an earlier one (`owner`) already covers it. */
export interface OriginConflict {
  name: string;
  index: number;
  pattern: string;
  /** The pattern normalized (see `patternKey`): an origin, or a wildcard such as `*.example.com`. */
  origin: string;
  owner: string;
}

/**
 * Exact origins, and wildcards written alike (`*.example.com`, `*.EXAMPLE.com.`), listed by more
 * than one limiter, in declaration order: the first limiter owns it, each later listing is a
 * conflict (an exact origin goes to one limiter, and so does a wildcard: the same wildcard in a
 * later limiter would never match). Wildcards that only overlap (`*.example.com`,
 * `*.api.example.com`) are no conflict: the closest match wins; bad patterns are skipped (they are
 * reported on their own).
 */
export function originConflicts(
  limiters: Iterable<readonly [string, { origins?: readonly unknown[] | undefined } | undefined]>,
): OriginConflict[] {
  const owners = new Map<string, string>();
  const conflicts: OriginConflict[] = [];
  for (const [name, config] of limiters) {
    const origins = isRecord(config) && Array.isArray(config.origins) ? config.origins : [];
    origins.forEach((pattern, index) => {
      if (typeof pattern !== 'string') return;
      const origin = patternKey(pattern);
      if (origin === undefined) return;
      const owner = owners.get(origin);
      if (owner === undefined) owners.set(origin, name);
      else if (owner !== name) conflicts.push({ name, index, pattern, origin, owner });
    });
  }
  return conflicts;
}

export function conflictMessage(conflict: OriginConflict): string {
  return conflict.origin.includes('*')
    ? `${conflict.origin} is already covered by limiter "${conflict.owner}" (the same wildcard: here it would match nothing)`
    : `${conflict.origin} is already covered by limiter "${conflict.owner}"`;
}

/** The normalized origin of an exact (non-wildcard) pattern, or `undefined` when it is not one. */
export function exactOrigin(pattern: string): string | undefined {
  if (pattern.includes('*') || issuesOf(() => originMatcher([pattern])).length > 0) return undefined;
  return normalizeOrigin(pattern);
}

export { nearMiss, unknownKeyMessage } from '../errors.js';

/** What a `__proto__` key is told: an object literal or `JSON.parse` would set the prototype with it, or drop it. */
export const PROTO_MESSAGE =
  '"__proto__" cannot be a key or a limiter name: objects treat it as their prototype';

/** The keys of a {@link LimiterConfig} in code: the limiter's options but `name` and `clock`, and what the config adds. */
const LIMITER_KEYS: readonly string[] = [
  ...Object.keys(limiterFieldsSchema.shape).filter((key) => key !== 'name' && key !== 'clock'),
  'origins',
  'maxConcurrent',
  'maxConcurrentPer',
  'partitionBy',
  'limiter',
  'shared',
  'headers',
  'quotaFromHeaders',
  'api',
];

/** The keys of the controllers' option objects. */
const CONTROLLER_KEYS: Readonly<Record<'aimd' | 'cubic' | 'probe', readonly string[]>> = {
  aimd: Object.keys(limiterFieldsSchema.shape.aimd.unwrap().shape),
  cubic: Object.keys(limiterFieldsSchema.shape.cubic.unwrap().shape),
  probe: Object.keys(limiterFieldsSchema.shape.probe.unwrap().shape),
};

/**
 * An issue for each own key of `value` that `known` does not list, as JSON config reports it: a
 * misspelled field (`origin` for `origins`) must not be ignored. `__proto__` included.
 */
function unknownKeyIssues(value: object, known: readonly string[], path: string): ConfigIssue[] {
  return Object.keys(value)
    .filter((key) => !known.includes(key))
    .map((key) => ({
      path: `${path}.${configPath([key])}`,
      message: unknownKeyMessage(key, known),
      received: (value as Record<string, unknown>)[key],
    }));
}

/** The keys of a {@link LimiterConfig} allowed next to a `limiter` instance. */
const WITH_INSTANCE: ReadonlySet<string> = new Set([
  'origins',
  'maxConcurrent',
  'limiter',
  'headers',
  'quotaFromHeaders',
]);

/**
 * Unknown keys (of the config, and of its `aimd`, `cubic` and `probe` objects), and what a
 * {@link LimiterConfig} adds to the limiter's options (`origins`, `maxConcurrent`, `limiter`,
 * `headers`, `quotaFromHeaders`), checked; the limiter checks the rest when it is made. Issues
 * name `${path}.origins.0` and so on.
 */
export function limiterConfigIssues(config: LimiterConfig, path: string): ConfigIssue[] {
  const issues: ConfigIssue[] = unknownKeyIssues(config, LIMITER_KEYS, path);
  for (const name of ['aimd', 'cubic', 'probe'] as const) {
    const options = config[name];
    if (isRecord(options))
      issues.push(...unknownKeyIssues(options, CONTROLLER_KEYS[name], `${path}.${name}`));
  }
  if (config.limiter !== undefined) {
    if (!isRateLimiter(config.limiter))
      issues.push({
        path: `${path}.limiter`,
        message: 'must be a RateLimiter (an object with acquire() and tryAcquire())',
        received: config.limiter,
      });
    for (const [key, value] of Object.entries(config)) {
      if (value === undefined || WITH_INSTANCE.has(key) || !LIMITER_KEYS.includes(key)) continue;
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
        message: 'must be an array of origins',
        received: config.origins,
      });
  }
  if (config.maxConcurrent !== undefined) {
    const result = maxConcurrent.safeParse(config.maxConcurrent, { error: issueMessage });
    if (!result.success)
      issues.push(
        ...configErrorFrom(result.error, config.maxConcurrent, SOURCE, `${path}.maxConcurrent`).issues,
      );
  }
  for (const [key, rule] of [
    ['maxConcurrentPer', maxConcurrentPer],
    ['partitionBy', partitionBy],
  ] as const) {
    const value = config[key];
    if (value === undefined) continue;
    const result = rule.safeParse(value, { error: issueMessage });
    if (!result.success)
      issues.push(...configErrorFrom(result.error, value, SOURCE, `${path}.${key}`).issues);
  }
  if (config.headers !== undefined) {
    const result = headerProfile.safeParse(config.headers, { error: issueMessage });
    if (!result.success || result.data !== config.headers)
      issues.push({ path: `${path}.headers`, message: HEADERS_MESSAGE, received: config.headers });
  }
  if (config.api !== undefined && !(LLM_APIS as readonly unknown[]).includes(config.api)) {
    issues.push({ path: `${path}.api`, message: "must be 'openai' or 'anthropic'", received: config.api });
  }
  for (const issue of apiBudgetIssues(config.api, config.budgets)) {
    issues.push({
      path: `${path}.budgets.${issue.budget}`,
      message: issue.message,
      received: issue.received,
    });
  }
  if (config.quotaFromHeaders !== undefined && typeof config.quotaFromHeaders !== 'function') {
    issues.push({
      path: `${path}.quotaFromHeaders`,
      message: 'must be a function (headers => { remaining, resetMs, limit, windowMs } | undefined)',
      received: config.quotaFromHeaders,
    });
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

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
