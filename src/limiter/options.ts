import { z } from 'zod';
import type { Clock } from '../clock.js';
import type { AimdOptions } from '../controllers/aimd.js';
import type { CubicOptions } from '../controllers/cubic.js';
import { type ProbeOptions, probeHoldIssue } from '../controllers/probe.js';
import type { RateController } from '../controllers/types.js';
import { ConfigError, type ConfigIssue, configErrorFrom, configPath, LIMITER_SOURCE } from '../errors.js';
import { issueMessage } from '../issue-message.js';

/** Options of an {@link AdaptiveRateLimiter}. Rates are units per minute for the whole budget. */
export interface AdaptiveLimiterOptions {
  /**
   * Names the limiter in errors, events, diagnostics payloads, snapshots, metrics and `NODE_DEBUG`
   * lines (a registry names the limiters it makes after their key or origin), each time with its
   * secrets masked as every value the library echoes back (an `sk-...` key, a bearer token, a
   * URL's password: see `redactText`); `limiter.name` and a registry's keys keep it as given.
   * Fixed at creation. @default 'default'
   */
  name?: string;
  /**
   * `'probe'`, `'aimd'`, `'cubic'`, or your own {@link RateController} (`'aimd'` is the default of
   * RateLimiting.Adaptive, the .NET library this one ports). @default 'probe'
   */
  controller?: 'aimd' | 'cubic' | 'probe' | RateController;
  /**
   * The starting rate (units/min, whole budget). When unset the limiter starts at
   * `maxUnitsPerMinute` (unlimited when that is unset too, with the `slowStart` cap) until the
   * first throttle, whose cut starts from the rate the server accepted. @default unset
   */
  initialUnitsPerMinute?: number;
  /** The lowest rate a cut can reach (units/min, whole budget, > 0). @default 1 */
  minUnitsPerMinute?: number;
  /** The highest rate an increase can reach (units/min, whole budget). @default Infinity */
  maxUnitsPerMinute?: number;
  /** Processes sharing the budget; each gets 1/n of min, max, initial and of the steps. @default 1 */
  instanceCount?: number;
  /**
   * Longest wait for units (ms); a request predicted to wait longer is rejected at once. One budget
   * per request: the attempt loop's retries wait only what the earlier attempts left of it
   * (`AcquireOptions.waitedMs`), and the HTTP adapters' wait for a `maxConcurrent` slot counts in
   * it and is bounded by it (refused with `'max-wait'` when the time is up). @default 60_000
   */
  maxWait?: number;
  /**
   * Requests that may wait at once; one more is rejected (`'queue-full'`). Those waiting for an
   * HTTP adapter's `maxConcurrent` slot count too. @default 10_000
   */
  queueLimit?: number;
  /** Least time between two cuts (ms). @default 1_000 */
  decreaseCooldown?: number;
  /** Cap on a Retry-After pause (ms); a server can send anything. @default 600_000 */
  maxPause?: number;
  /** Options of the built-in AIMD controller. */
  aimd?: AimdOptions;
  /** Options of the built-in CUBIC controller. */
  cubic?: CubicOptions;
  /** Options of the built-in probe controller. */
  probe?: ProbeOptions;
  /** The time source. @default systemClock */
  clock?: Clock;
  /**
   * How grants are spaced. `'paced'`: at the rate, each request at its own slot; idle time earns
   * at most 10 ms of the rate (one request at once below 6,000 units/min), which strict servers
   * (a leaky bucket such as nginx's `limit_req`) accept. `'second'`: a token bucket holding one
   * second of the rate (at least one unit), full at the start: RateLimiting.Adaptive's bucket, which lets a
   * second's worth go at once after an idle spell. Fixed at creation. @default 'paced'
   */
  burst?: 'paced' | 'second' | 'announced';
  /**
   * With `burst: 'announced'`: the part of the announced bucket kept back, in ms of the rate
   * (1,500 at 40,000 units/min keeps 1,000), at most half the announced `limit` (a bucket of 10 a
   * second keeps 5, not 15): requests granted in one order reach the server in another, and a
   * bucket spent to its last unit draws 429s. An announcement never sets the level below 0. A
   * number >= 0. Fixed at creation. @default 1500
   */
  reserve?: number;
  /**
   * Several budgets metered at once, by name (`{ requests: {...}, tokens: {...} }`): an API that
   * limits requests and tokens per minute together. The first is this limiter's own budget
   * (`acquire(units)` draws from it; its entry's fields override the limiter's); each other has
   * its own rate, controller state, ceiling and pacing, and a request draws from it what
   * `acquire(units, { costs: { tokens: 1200 } })` says (nothing when left out). A request is
   * granted when every budget it draws from can grant it, and takes from all at once; the
   * waiting line stays first in, first out, and no budget is held while another is awaited. A
   * request larger than a whole budget is served when that budget is full and leaves it in debt.
   * A throttled answer cuts only the budgets that ran out (`Permit.throttled`'s `budgets`, or a
   * quota announcing less left than the request drew), every one when that cannot be told; the
   * other budgets get back what it drew from them (the first keeps it: a refused request counts).
   * Fixed at creation. @default one budget
   */
  budgets?: Readonly<Record<string, BudgetOptions>>;
  /**
   * The cold start of a limiter with no initial rate: at most this many units in flight (granted
   * and not yet answered) at first, growing by the units of each success (doubling each round
   * trip), until the first throttle (a rate takes over) or until it no longer binds (an answer
   * finds nobody waiting and less than half of it in flight). `false`: none, everything goes at
   * once until the first throttle. A whole number >= 1, or false. Fixed at creation. @default 10
   */
  slowStart?: number | false;
  /**
   * The source of the random number controllers read (`RateControllerState.random`), drawn at
   * creation and at each cut: a function returning numbers in [0, 1). Give a seeded one for
   * runs that repeat (the simulator does). @default Math.random
   */
  random?: () => number;
}

/** One budget of {@link AdaptiveLimiterOptions.budgets}: its rates, its controller, its bucket. */
export type BudgetOptions = Pick<
  AdaptiveLimiterOptions,
  | 'initialUnitsPerMinute'
  | 'minUnitsPerMinute'
  | 'maxUnitsPerMinute'
  | 'controller'
  | 'burst'
  | 'reserve'
  | 'aimd'
  | 'cubic'
  | 'probe'
>;

/** The limiter's options after defaults, validated. */
export interface ResolvedLimiterOptions {
  name: string;
  controller: 'aimd' | 'cubic' | 'probe' | RateController;
  initialUnitsPerMinute: number | undefined;
  minUnitsPerMinute: number;
  maxUnitsPerMinute: number;
  instanceCount: number;
  maxWait: number;
  queueLimit: number;
  decreaseCooldown: number;
  maxPause: number;
  aimd: AimdOptions | undefined;
  cubic: CubicOptions | undefined;
  probe: ProbeOptions | undefined;
  burst: 'paced' | 'second' | 'announced';
  reserve: number;
  budgets: Readonly<Record<string, BudgetOptions>> | undefined;
  slowStart: number | false;
  random: () => number;
}

const CLOCK_METHODS = ['now', 'setTimeout', 'clearTimeout'] as const;

/** What a bad `clock` is told: the three methods, and those it lacks. */
function clockMessage(value: unknown): string {
  const expected = 'must be a Clock with now(), setTimeout() and clearTimeout()';
  if (typeof value !== 'object' || value === null) return expected;
  const missing = CLOCK_METHODS.filter((m) => typeof (value as Record<string, unknown>)[m] !== 'function');
  return `${expected}; not a function here: ${missing.map((m) => `${m}()`).join(', ')}`;
}

/**
 * The `clock` option of every API that takes one (the limiters, the registry, the HTTP adapters, a
 * shared budget): an object whose `now`, `setTimeout` and `clearTimeout` are functions. A clock
 * without one failed later, with a raw TypeError at the first wait or abort (thrown from a timer
 * or an abort listener: the end of the process).
 * @internal
 */
export const clockSchema = z.custom<Clock>(
  (v) =>
    typeof v === 'object' &&
    v !== null &&
    CLOCK_METHODS.every((m) => typeof (v as Record<string, unknown>)[m] === 'function'),
  { error: (issue) => clockMessage(issue.input) },
);

export const LIMITER_DEFAULTS = {
  name: 'default',
  controller: 'probe',
  minUnitsPerMinute: 1,
  maxUnitsPerMinute: Number.POSITIVE_INFINITY,
  instanceCount: 1,
  maxWait: 60_000,
  queueLimit: 10_000,
  decreaseCooldown: 1_000,
  maxPause: 600_000,
  burst: 'paced',
  reserve: 1_500,
  slowStart: 10,
} as const;

/** What a bad `slowStart` is told. */
const SLOW_START = 'must be a whole number of units >= 1, or false';

/** What a bad `controller` is told, in the TypeScript options and in a config file alike. */
export const CONTROLLER_MESSAGE =
  "must be 'aimd', 'cubic', 'probe' or an object with onThrottled and onSuccess";

/** The fields the cross-field rules of {@link resolveLimiterOptions} read. */
export const RATE_FIELDS = ['minUnitsPerMinute', 'maxUnitsPerMinute', 'initialUnitsPerMinute'] as const;

const rate = z.number().positive().finite();
const ms = z.number().nonnegative().finite();

/** A control character (C0, DEL or C1): a newline forges a `NODE_DEBUG` line, a NUL cuts a log. */
const CONTROL = /\p{Cc}/u;

/**
 * What is wrong with `name` as a limiter's or a budget's name (`kind`), or `undefined`: one rule
 * for both, in code and in JSON. A name shows in errors, `NODE_DEBUG` lines and the metrics'
 * `adaptive_rate_limit.limiter` attribute, so it needs a character other than white space, and
 * none of the control characters that would break those lines (refused with the character's code).
 */
export function nameIssue(kind: 'limiter' | 'budget', name: unknown): string | undefined {
  if (typeof name !== 'string' || !/\S/.test(name)) {
    return `a ${kind} name must be a non-empty string, not white space alone`;
  }
  const at = name.search(CONTROL);
  if (at < 0) return undefined;
  const code = (name.codePointAt(at) as number).toString(16).toUpperCase().padStart(4, '0');
  return `a ${kind} name must be free of control characters (U+${code} at index ${at}): it would break NODE_DEBUG lines and metrics`;
}

/** The zod form of {@link nameIssue}: a limiter's name, or a key of `budgets` or `limiters`. */
export function nameSchema(kind: 'limiter' | 'budget') {
  return z.string().superRefine((name, ctx) => {
    const message = nameIssue(kind, name);
    if (message !== undefined) ctx.addIssue({ code: 'custom', message, input: name });
  });
}

/** The fields of {@link limiterFieldsSchema} but `budgets`. */
const limiterFieldsObject = z.object({
  name: nameSchema('limiter'),
  // The message on the union itself: a failed union reports only its own.
  controller: z.union(
    [
      z.enum(['aimd', 'cubic', 'probe'], { error: CONTROLLER_MESSAGE }),
      z.custom<RateController>(
        (v) =>
          typeof v === 'object' &&
          v !== null &&
          typeof (v as RateController).onThrottled === 'function' &&
          typeof (v as RateController).onSuccess === 'function',
        { error: CONTROLLER_MESSAGE },
      ),
    ],
    { error: CONTROLLER_MESSAGE },
  ),
  initialUnitsPerMinute: rate,
  minUnitsPerMinute: rate,
  // Infinity is the default (unbounded): given, it lifts a cap at run time.
  maxUnitsPerMinute: z.union([z.number().positive(), z.literal(Number.POSITIVE_INFINITY)], {
    error: 'must be a number > 0, or Infinity (unbounded)',
  }),
  instanceCount: z.number().int().positive().finite(),
  maxWait: ms,
  queueLimit: z.number().int().nonnegative(),
  decreaseCooldown: ms,
  maxPause: ms,
  aimd: z
    .object({
      decreaseFactor: z.number().gt(0).lt(1).optional(),
      increaseInterval: z.number().positive().finite().optional(),
      increaseStep: rate.optional(),
    })
    .strict(),
  cubic: z
    .object({
      beta: z.number().gt(0).lt(1).optional(),
      scaleConstant: rate.optional(),
    })
    .strict(),
  // The probe controller checks its own options (and their cross-field rule) when it is built.
  probe: z
    .object({
      cruiseMargin: z.number().min(0).lt(0.5).optional(),
      drainFactor: z.number().gt(0).max(1).optional(),
      drainTime: ms.optional(),
      holdTime: z.number().positive().finite().optional(),
      maxHold: z.number().positive().finite().optional(),
      stableTolerance: z.number().min(0).lt(1).optional(),
      probeStep: rate.optional(),
      probeGrowth: z.number().gt(1).finite().optional(),
      round: z.number().positive().finite().optional(),
      startupGrowth: z.number().gt(1).finite().optional(),
      externalFactor: z.number().gt(0).max(1).optional(),
      appLimitedRatio: z.number().gt(0).max(1).optional(),
      minCutFactor: z.number().gt(0).max(1).optional(),
    })
    .strict(),
  clock: clockSchema,
  burst: z.enum(['paced', 'second', 'announced'], { error: "must be 'paced', 'second' or 'announced'" }),
  reserve: ms,
  // The same words whichever member refused it (zod tells a 0 by the number member's bound).
  slowStart: z.union(
    [z.literal(false), z.number().int({ error: SLOW_START }).positive({ error: SLOW_START })],
    { error: SLOW_START },
  ),
  random: z.custom<() => number>((v) => typeof v === 'function', {
    message: 'must be a function returning numbers in [0, 1)',
  }),
});

/** One budget's fields (see {@link AdaptiveLimiterOptions.budgets}). */
const budgetSchema = limiterFieldsObject
  .pick({
    initialUnitsPerMinute: true,
    minUnitsPerMinute: true,
    maxUnitsPerMinute: true,
    controller: true,
    burst: true,
    reserve: true,
    aimd: true,
    cubic: true,
    probe: true,
  })
  .partial()
  .strict();

/**
 * `budgets`, each checked by `budget` (a JSON config's reads durations and checks the probe's
 * cross-field rule): one at least, by name.
 */
export function budgetsSchema<T extends z.ZodType>(budget: T) {
  return z
    .record(nameSchema('budget'), budget)
    .refine((b) => Object.keys(b).length > 0, { message: 'must have at least one budget' });
}

/** The numeric and named fields shared by the TypeScript API and JSON config (ms already parsed). */
export const limiterFieldsSchema = limiterFieldsObject
  .extend({ budgets: budgetsSchema(budgetSchema) })
  .partial()
  // A misspelled option (`maxWiat`) is a ConfigError at its own path, never ignored.
  .strict();

/**
 * Validates limiter options and fills in the defaults; throws {@link ConfigError} listing every bad
 * field: the cross-field rules (min <= max, initial within them) are checked whenever the rates they
 * read are valid, even when other fields are not.
 */
export function resolveLimiterOptions(
  options: AdaptiveLimiterOptions,
  base?: ResolvedLimiterOptions,
): ResolvedLimiterOptions {
  const parsed = limiterFieldsSchema.safeParse(options, { error: issueMessage });
  const start: ResolvedLimiterOptions = base ?? {
    ...LIMITER_DEFAULTS,
    budgets: undefined,
    initialUnitsPerMinute: undefined,
    aimd: undefined,
    cubic: undefined,
    probe: undefined,
    random: Math.random,
  };
  if (!parsed.success) {
    const issues = configErrorFrom(parsed.error, options, LIMITER_SOURCE, '', limiterFieldsSchema).issues;
    // The rates are plain numbers: once valid, the input's are the parsed ones.
    const ratesValid = !issues.some(
      (i) => i.path === '' || (RATE_FIELDS as readonly string[]).includes(i.path),
    );
    const more = ratesValid ? rateIssues(options, start, base === undefined) : [];
    throw new ConfigError([...issues, ...more], LIMITER_SOURCE);
  }
  const o = parsed.data;
  const resolved: ResolvedLimiterOptions = {
    name: o.name ?? start.name,
    controller: o.controller ?? start.controller,
    initialUnitsPerMinute:
      'initialUnitsPerMinute' in o ? o.initialUnitsPerMinute : start.initialUnitsPerMinute,
    minUnitsPerMinute: o.minUnitsPerMinute ?? start.minUnitsPerMinute,
    maxUnitsPerMinute: o.maxUnitsPerMinute ?? start.maxUnitsPerMinute,
    instanceCount: o.instanceCount ?? start.instanceCount,
    maxWait: o.maxWait ?? start.maxWait,
    queueLimit: o.queueLimit ?? start.queueLimit,
    decreaseCooldown: o.decreaseCooldown ?? start.decreaseCooldown,
    maxPause: o.maxPause ?? start.maxPause,
    aimd: o.aimd ? { ...start.aimd, ...o.aimd } : start.aimd,
    cubic: o.cubic ? { ...start.cubic, ...o.cubic } : start.cubic,
    probe: o.probe ? { ...start.probe, ...o.probe } : start.probe,
    burst: o.burst ?? start.burst,
    reserve: o.reserve ?? start.reserve,
    budgets: (o.budgets as ResolvedLimiterOptions['budgets']) ?? start.budgets,
    slowStart: o.slowStart ?? start.slowStart,
    random: o.random ?? start.random,
  };
  const probeIssues = probeBlockIssues(o.probe, start.probe, o.budgets).map((i) => ({
    ...i,
    path: configPath(i.path),
  }));
  const issues = [...rateIssues(o, start, base === undefined), ...probeIssues];
  if (issues.length > 0) throw new ConfigError(issues, LIMITER_SOURCE);
  return resolved;
}

/**
 * The probe's own cross-field rule (`probeHoldIssue`) on each `probe` block given, as the
 * controllers will get them, whatever the controller: the limiter's merged over `base` (its
 * probe before an `update`), the first budget's over the limiter's (its fields are the limiter's
 * own), each other budget's alone (it replaces the limiter's). Paths from the options' root.
 * @internal
 */
export function probeBlockIssues(
  probe: ProbeOptions | undefined,
  base: ProbeOptions | undefined,
  budgets: Readonly<Record<string, { readonly probe?: ProbeOptions | undefined }>> | undefined,
): { path: string[]; message: string; received: unknown }[] {
  const issues: { path: string[]; message: string; received: unknown }[] = [];
  const check = (given: ProbeOptions | undefined, under: ProbeOptions | undefined, at: string[]) => {
    const issue = given === undefined ? undefined : probeHoldIssue({ ...under, ...given }, given);
    if (issue !== undefined)
      issues.push({ path: [...at, issue.key], message: issue.message, received: issue.received });
  };
  check(probe, base, ['probe']);
  const limiterProbe = probe === undefined ? base : { ...base, ...probe };
  Object.entries(budgets ?? {}).forEach(([name, budget], i) => {
    check(budget.probe, i === 0 ? limiterProbe : undefined, ['budgets', name, 'probe']);
  });
  return issues;
}

/**
 * The cross-field rules on valid rates: min <= max, and (at construction only: at run time the
 * rate is clamped instead) initial within them.
 */
function rateIssues(
  rates: Pick<AdaptiveLimiterOptions, 'minUnitsPerMinute' | 'maxUnitsPerMinute' | 'initialUnitsPerMinute'>,
  start: Pick<ResolvedLimiterOptions, 'minUnitsPerMinute' | 'maxUnitsPerMinute' | 'initialUnitsPerMinute'>,
  construction: boolean,
): ConfigIssue[] {
  const min = rates.minUnitsPerMinute ?? start.minUnitsPerMinute;
  const max = rates.maxUnitsPerMinute ?? start.maxUnitsPerMinute;
  const issues: ConfigIssue[] = [];
  if (min > max) {
    issues.push({
      path: 'minUnitsPerMinute',
      message: `must not be above maxUnitsPerMinute (${max})`,
      received: min,
    });
  }
  const initial = !construction
    ? undefined
    : 'initialUnitsPerMinute' in rates
      ? rates.initialUnitsPerMinute
      : start.initialUnitsPerMinute;
  if (initial !== undefined && (initial < min || initial > max)) {
    issues.push({
      path: 'initialUnitsPerMinute',
      message: `must be within minUnitsPerMinute (${min}) and maxUnitsPerMinute (${max})`,
      received: initial,
    });
  }
  return issues;
}

/**
 * Whether two parsed `budgets` are the same (an `update()` may give the ones the limiter was made
 * with): the same names in the same order (the first is the limiter's own), each budget's fields
 * equal in any order, a function (a custom controller's method) or a class's instance being itself.
 */
export function sameBudgets(
  a: ResolvedLimiterOptions['budgets'],
  b: ResolvedLimiterOptions['budgets'],
): boolean {
  if (a === undefined || b === undefined) return a === b;
  const names = Object.keys(a);
  return names.join('\0') === Object.keys(b).join('\0') && names.every((name) => sameValue(a[name], b[name]));
}

function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  // An instance of a class (a custom controller's methods on its prototype) is only itself.
  if (!plain(a) || !plain(b)) return false;
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  const fields = (o: Record<string, unknown>) => Object.keys(o).filter((k) => o[k] !== undefined);
  const keys = fields(x);
  return keys.length === fields(y).length && keys.every((k) => sameValue(x[k], y[k]));
}

/** Whether `o` is a plain object (an object literal, or made with no prototype). */
function plain(o: object): boolean {
  const proto = Object.getPrototypeOf(o);
  return proto === Object.prototype || proto === null;
}
