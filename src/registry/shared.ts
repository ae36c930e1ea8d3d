import type { Clock } from '../clock.js';
import { issuesOf } from '../config/rules.js';
import type { LimiterConfig } from '../config/schema.js';
import { sharedConfigSchema } from '../config/shared.js';
import { ConfigError } from '../errors.js';
import { configErrorFrom, resolveLimiterOptions } from '../limiter/options.js';
import { createSharedBudget, type SharedBudget } from '../redis/shared-budget.js';

/** The coordinator's keys of a `SharedBudget`'s options: in config they sit under `shared`. */
const SHARED_KEYS: ReadonlySet<string> = new Set(Object.keys(sharedConfigSchema.shape));

/**
 * The `SharedBudget` a named limiter declares with `shared` (config.shared set): the limiter's
 * options are the whole budget's, `shared` says where and how it is shared. Made `lazy`: it joins
 * the budget (connects to Redis) at its first request, so a registry made at start-up costs no
 * connection until it is used. Throws `ConfigError` with paths under the limiter (`shared.redis`,
 * `maxWait`), or `ERR_IOREDIS_MISSING` when ioredis is not installed.
 */
export function makeSharedBudget(name: string, config: LimiterConfig, clock: Clock): SharedBudget {
  const {
    origins: _o,
    maxConcurrent: _m,
    maxConcurrentPer: _mp,
    partitionBy: _pb,
    limiter: _l,
    shared,
    ...options
  } = config;
  const parsed = sharedConfigSchema.safeParse(shared);
  if (!parsed.success) {
    // The limiter's own options are checked too: every bad field at once.
    const issues = configErrorFrom(parsed.error, shared, 'shared budget', 'shared').issues;
    throw new ConfigError([...issues, ...issuesOf(() => resolveLimiterOptions(options))], 'shared budget');
  }
  try {
    return createSharedBudget({
      ...options,
      ...parsed.data,
      name: parsed.data.name ?? name,
      clock,
      lazy: true,
    });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    const issues = error.issues.map((i) => {
      const key = i.path.split('.')[0] ?? '';
      return SHARED_KEYS.has(key) ? { ...i, path: `shared.${i.path}` } : i;
    });
    throw new ConfigError(issues, 'shared budget');
  }
}

/**
 * Closes a budget `replace` took out of the registry once nothing waits in it: the requests
 * queued in it are still served (as by any replaced limiter), then it leaves the budget and
 * closes its connection, instead of staying a member for as long as the process lives.
 */
export function retireSharedBudget(budget: SharedBudget): void {
  const limiter = budget.limiter;
  const closeWhenIdle = (): void => {
    if (limiter.snapshot().queued > 0) return;
    limiter.off('acquired', closeWhenIdle);
    limiter.off('rejected', closeWhenIdle);
    void budget.close().catch(() => undefined);
  };
  limiter.on('acquired', closeWhenIdle);
  limiter.on('rejected', closeWhenIdle);
  closeWhenIdle();
}
