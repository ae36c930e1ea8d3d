import { z } from 'zod';
import {
  DEFAULT_HEARTBEAT_INTERVAL,
  DEFAULT_STATE_TTL,
  isRedisUrl,
  REDIS_URL_MESSAGE,
  type SharedConfig,
  sharedLimiterIssues,
  sharedTimings,
} from '../config/shared.js';
import { ConfigError, configErrorFrom, unknownKeyMessage } from '../errors.js';
import { issueMessage } from '../issue-message.js';
import { type AdaptiveLimiterOptions, limiterFieldsSchema } from '../limiter/options.js';
import type { RedisClient } from './client.js';
import type { BudgetStore } from './store.js';

/**
 * Options of {@link createSharedBudget}: the limiter's options (rates are units/min of the WHOLE
 * budget, shared by every process; `clock` drives the local limiter and the heartbeats) plus
 * where the shared state lives (`redis`, or another `store`) and how often to talk to it.
 */
export interface SharedBudgetOptions extends AdaptiveLimiterOptions, Omit<SharedConfig, 'redis' | 'name'> {
  /**
   * A Redis URL (`redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS) or an
   * ioredis client you own (it is not closed). Give this or `store`. Another string is a
   * `ConfigError`.
   */
  redis?: string | RedisClient;
  /**
   * Where the shared state lives instead of Redis: a `MemoryBudgetStore` that the members of
   * one process share (the simulator does), or your own {@link BudgetStore}. Give this or `redis`.
   */
  store?: BudgetStore;
  /** The budget's name: every process that passes the same name (and Redis) shares one budget. */
  name: string;
  /**
   * Open the store (connect to Redis, join the budget) at the first `acquire`, `tryAcquire`,
   * `refresh` or `ready`, not now: a budget made at start-up that a process may never use
   * costs no connection. The registry opens a budget declared in config (`shared`) this way.
   * Until then the budget's local limiter serves nothing and the budget has no member here.
   * @default false
   */
  lazy?: boolean;
}

/** The coordinator's own options after defaults. */
export interface ResolvedSharedOptions {
  name: string;
  heartbeatInterval: number;
  memberTimeout: number;
  redisTimeout: number;
  floorFraction: number;
  failClosed: boolean;
  keyPrefix: string;
  stateTtl: number;
  lazy: boolean;
}

/** The coordinator's defaults; `memberTimeout` and `redisTimeout` follow the heartbeat. */
export const SHARED_DEFAULTS = {
  heartbeatInterval: DEFAULT_HEARTBEAT_INTERVAL,
  floorFraction: 0.05,
  failClosed: false,
  keyPrefix: 'arl:',
  stateTtl: DEFAULT_STATE_TTL,
} as const;

const positiveMs = z.number().positive().finite();

const sharedSchema = z.object({
  name: z.string().min(1),
  heartbeatInterval: positiveMs.optional(),
  memberTimeout: positiveMs.optional(),
  redisTimeout: positiveMs.optional(),
  floorFraction: z.number().min(0).max(1).optional(),
  failClosed: z.boolean().optional(),
  keyPrefix: z.string().optional(),
  stateTtl: positiveMs.optional(),
  lazy: z.boolean().optional(),
});

/** Validates the coordinator's options and fills in the defaults; throws {@link ConfigError}. */
export function resolveSharedOptions(options: SharedBudgetOptions): ResolvedSharedOptions {
  const { redis, store } = options as { redis: unknown; store: unknown };
  if (store !== undefined) {
    const ok =
      typeof store === 'object' && store !== null && typeof (store as BudgetStore).heartbeat === 'function';
    if (!ok || redis !== undefined) {
      const message = ok ? 'give either redis or store, not both' : 'must be a BudgetStore';
      throw new ConfigError([{ path: 'store', message, received: store }], 'shared budget options');
    }
  } else if (typeof redis !== 'string' && (typeof redis !== 'object' || redis === null)) {
    throw new ConfigError(
      [{ path: 'redis', message: 'must be a Redis URL or an ioredis client', received: redis }],
      'shared budget options',
    );
  } else if (typeof redis === 'string' && !isRedisUrl(redis)) {
    throw new ConfigError(
      [{ path: 'redis', message: REDIS_URL_MESSAGE, received: redis }],
      'shared budget options',
    );
  }
  // A key neither the budget nor its limiter knows (`heartbeatIntervl`) is named here, with the
  // one meant: the limiter would call it one of its own options.
  // Each once: `name` is the budget's and its limiter's.
  const known = [
    ...new Set([
      ...Object.keys(sharedSchema.shape),
      'redis',
      'store',
      ...Object.keys(limiterFieldsSchema.shape),
    ]),
  ];
  const unknown = Object.keys(options).filter((key) => !known.includes(key));
  if (unknown.length > 0) {
    const issues = unknown.map((key) => ({
      path: key,
      message: unknownKeyMessage(key, known),
      received: (options as unknown as Record<string, unknown>)[key],
    }));
    throw new ConfigError(issues, 'shared budget options');
  }
  const refused = sharedLimiterIssues(options as { budgets?: unknown; burst?: unknown });
  if (refused.length > 0) throw new ConfigError(refused, 'shared budget options');
  const parsed = sharedSchema.safeParse(options, { error: issueMessage });
  if (!parsed.success) throw configErrorFrom(parsed.error, options, 'shared budget options');
  const o = parsed.data;
  // Timings under which the budget cannot share are refused, each naming the other field.
  const { timings, issues } = sharedTimings(o);
  if (issues.length > 0) throw new ConfigError(issues, 'shared budget options');
  const { heartbeatInterval, memberTimeout, redisTimeout, stateTtl } = timings;
  return {
    name: o.name,
    heartbeatInterval,
    memberTimeout,
    redisTimeout,
    floorFraction: o.floorFraction ?? SHARED_DEFAULTS.floorFraction,
    failClosed: o.failClosed ?? SHARED_DEFAULTS.failClosed,
    keyPrefix: o.keyPrefix ?? SHARED_DEFAULTS.keyPrefix,
    stateTtl,
    lazy: o.lazy ?? false,
  };
}
