import type { Clock } from '../clock.js';
import { apiLimiterOptions } from '../config/api.js';
import {
  conflictMessage,
  exactOrigin,
  LIMITER_NAME_MESSAGE,
  limiterConfigIssues,
  originConflicts,
  PROTO_MESSAGE,
} from '../config/rules.js';
import type { LimiterConfig } from '../config/schema.js';
import { ConfigError, type ConfigIssue, configPath } from '../errors.js';
import { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { RateLimiter } from '../limiter/types.js';
import { setLimiterOrigins } from '../limiter/watch.js';
import { wildcardRanker } from '../origin.js';
import { OVERFLOW } from './options.js';
import { makeSharedBudget, retireSharedBudget } from './shared.js';

/** A named limiter of the registry, built from its config by {@link buildEntry}. */
export interface NamedEntry {
  readonly config: LimiterConfig;
  /** What its requests go through: the limiter made from `config`, or `config.limiter`. */
  readonly instance: RateLimiter;
  /** Its `AdaptiveRateLimiter`: the one made, or the instance's (see {@link adaptiveOf}). */
  readonly limiter: AdaptiveRateLimiter | undefined;
  /** Whether the registry made it, and so closes it; a `limiter` instance is its owner's. */
  readonly owned: boolean;
  /**
   * Closes what the registry made: the limiter, or a `shared` budget (which leaves the budget and
   * closes its Redis connection in the background). Nothing for a `limiter` instance.
   */
  readonly close: () => void;
  /**
   * What `replace` does to it: nothing (requests holding it are served by it, and it is garbage
   * once nothing holds it), but a `shared` budget is closed once nothing waits in it.
   */
  readonly retire: () => void;
  /** Its exact origins, normalized. */
  readonly exact: readonly string[];
  /** How closely its wildcard patterns match an origin (-1: not at all), if it has any. */
  readonly wildcard: ((origin: string) => number) | undefined;
}

/** The limiter `name` made from `config` on the registry's `clock`. */
export function makeLimiter(name: string, config: LimiterConfig, clock: Clock): AdaptiveRateLimiter {
  const {
    origins: _origins,
    maxConcurrent: _maxConcurrent,
    maxConcurrentPer: _maxConcurrentPer,
    partitionBy: _partitionBy,
    limiter: _limiter,
    shared: _s,
    headers: _headers,
    quotaFromHeaders: _quotaFromHeaders,
    api,
    ...options
  } = config;
  // `api` sets the budgets and their buckets; the config's own fields override them (`budgets`:
  // the fields of the API's budgets).
  if (api === undefined) return new AdaptiveRateLimiter({ ...options, name, clock });
  const { budgets, ...rest } = options;
  return new AdaptiveRateLimiter({ ...apiLimiterOptions(api, budgets), ...rest, name, clock });
}

/** A limiter and its origin index for `config`, or every issue of the config. */
export function buildEntry(
  name: string,
  config: LimiterConfig,
  clock: Clock,
): NamedEntry | { issues: ConfigIssue[] } {
  const path = configPath(['limiters', name]);
  const issues: ConfigIssue[] = [];
  if (typeof name !== 'string' || name.trim() === '') {
    issues.push({ path, message: LIMITER_NAME_MESSAGE, received: name });
  } else if (name === '__proto__') {
    issues.push({ path, message: PROTO_MESSAGE, received: name });
  } else if (name === OVERFLOW || name.endsWith(`#${OVERFLOW}`)) {
    // The registry's own limiters for origins and partitions that find no room (`(overflow)`, a
    // named limiter's `<name>#(overflow)`): `get` gave this one, and both were counted as one series.
    issues.push({
      path,
      message: `${name} is the name of one of the registry's own limiters`,
      received: name,
    });
  }
  if (typeof config !== 'object' || config === null) {
    return { issues: [...issues, { path, message: 'must be a limiter config object', received: config }] };
  }
  // A bad name is told once: the limiter is not made, so its options do not repeat it.
  const badName = issues.length > 0;
  issues.push(...limiterConfigIssues(config, path));
  if (badName) return { issues };
  const given = config.limiter;
  // A limiter instance carries its own options: nothing to make (limiterConfigIssues checked it).
  const shared =
    given === undefined && config.shared !== undefined
      ? collect(issues, path, () => makeSharedBudget(name, config, clock))
      : undefined;
  const made =
    given === undefined && config.shared === undefined
      ? collect(issues, path, () => makeLimiter(name, config, clock))
      : undefined;
  const instance = given ?? shared ?? made;
  if (issues.length > 0 || instance === undefined) {
    void shared?.close(); // never opened: nothing to wait for
    return { issues };
  }
  const origins = config.origins ?? [];
  const wildcards = origins.filter((pattern) => pattern.includes('*'));
  const exact = origins.map(exactOrigin).filter((origin) => origin !== undefined);
  const limiter = made ?? adaptiveOf(instance);
  if (limiter !== undefined) setLimiterOrigins(limiter, exact);
  else shared?.onLimiter((local) => setLimiterOrigins(local, exact));
  return {
    config: { ...config, origins: [...origins] },
    instance,
    // A shared budget's local limiter is there once the Redis code has loaded.
    get limiter() {
      return made ?? adaptiveOf(instance);
    },
    owned: given === undefined,
    close: shared !== undefined ? () => void shared.close().catch(() => undefined) : () => made?.close(),
    retire: shared !== undefined ? () => retireSharedBudget(shared) : () => {},
    exact,
    wildcard: wildcards.length > 0 ? wildcardRanker(wildcards) : undefined,
  };
}

/**
 * {@link buildEntry}, checked also against the exact origins of the `others` entries.
 * @throws {ConfigError} listing every issue.
 */
export function buildEntryOrThrow(
  name: string,
  config: LimiterConfig,
  others: Iterable<readonly [string, NamedEntry]>,
  clock: Clock,
): NamedEntry {
  const built = buildEntry(name, config, clock);
  const existing = [...others].map(([n, entry]) => [n, entry.config] as const);
  const conflicts = conflictIssues([...existing, [name, config]]).filter((issue) =>
    issue.path.startsWith(`${configPath(['limiters', name, 'origins'])}.`),
  );
  const issues = 'issues' in built ? [...built.issues, ...conflicts] : conflicts;
  if (issues.length > 0 || 'issues' in built) throw new ConfigError(issues, 'rate limiter registry');
  return built;
}

/** The issues of the registry's `default` config. */
export function defaultConfigIssues(config: Omit<LimiterConfig, 'origins'>, clock: Clock): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  if (typeof config !== 'object' || config === null) {
    return [{ path: 'default', message: 'must be a limiter config object or false', received: config }];
  }
  if ('origins' in config) {
    issues.push({
      path: 'default.origins',
      message: 'the default covers every origin no limiter names; it takes no origins',
      received: (config as LimiterConfig).origins,
    });
  }
  const { limiter, shared, ...options } = config;
  if (shared !== undefined) {
    issues.push({
      path: 'default.shared',
      message:
        'the default makes a limiter per origin; declare a shared budget in a named limiter, with its origins',
      received: shared,
    });
  }
  if (limiter !== undefined) {
    issues.push({
      path: 'default.limiter',
      message:
        'the default makes a limiter per origin; put a limiter instance in a named limiter, with its origins',
      received: limiter,
    });
  }
  issues.push(...limiterConfigIssues(options, 'default'));
  collect(issues, 'default', () => makeLimiter('default', options, clock));
  return issues;
}

/** An issue for each exact origin that a later limiter lists although an earlier one covers it. */
export function conflictIssues(
  limiters: Iterable<readonly [string, { origins?: readonly unknown[] | undefined } | undefined]>,
): ConfigIssue[] {
  return originConflicts(limiters).map((c) => ({
    path: configPath(['limiters', c.name, 'origins', c.index]),
    message: conflictMessage(c),
    received: c.pattern,
  }));
}

/**
 * The `AdaptiveRateLimiter` of a `limiter` instance: the instance when it is one, else its
 * `.limiter` when that is one (a `SharedBudget`'s local limiter), else `undefined`.
 */
function adaptiveOf(instance: RateLimiter): AdaptiveRateLimiter | undefined {
  if (instance instanceof AdaptiveRateLimiter) return instance;
  const inner = (instance as { limiter?: unknown }).limiter;
  return inner instanceof AdaptiveRateLimiter ? inner : undefined;
}

/** Runs `fn`; its {@link ConfigError} issues join `issues`, each path under `path`. */
function collect<T>(issues: ConfigIssue[], path: string, fn: () => T): T | undefined {
  try {
    return fn();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    for (const issue of error.issues) {
      const at = issue.path ? `${path}.${issue.path}` : path;
      // One issue per field: an unknown key the config's check named (with its near miss) is
      // not named again by the limiter's own check.
      if (!issues.some((known) => known.path === at)) issues.push({ ...issue, path: at });
    }
    return undefined;
  }
}
