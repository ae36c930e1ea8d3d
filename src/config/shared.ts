import { z } from 'zod';
import { durationSchema } from './duration.js';

/** What a `redis` URL must look like (ioredis reads it): `redis://` or `rediss://` (TLS). */
export const REDIS_URL_MESSAGE = 'expected a redis:// or rediss:// URL, such as redis://127.0.0.1:6379/0';

/** Whether `url` is a Redis URL ioredis can connect to (a `redis:` or `rediss:` URL with a host). */
export function isRedisUrl(url: string): boolean {
  try {
    const parsed = new URL(url);
    return (parsed.protocol === 'redis:' || parsed.protocol === 'rediss:') && parsed.hostname !== '';
  } catch {
    return false;
  }
}

/**
 * A budget shared through Redis by every process that declares it: `limiters.<name>.shared` in
 * config. The registry makes a `SharedBudget` (`adaptive-rate-limit/redis`) from it and the
 * limiter's other options (rates of the whole budget, controller, `maxWait`, ...), opens it at
 * the first request to one of its origins (`lazy`), and closes it with the registry (an adapter's
 * `close()`, or `remove`). ioredis must be installed. See docs/redis.md.
 */
export interface SharedConfig {
  /** The Redis URL: `redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS. */
  redis: string;
  /** The budget's name: same name and same Redis, same budget. @default the limiter's name */
  name?: string;
  /** ms (or a duration string) between two heartbeats. @default 250 */
  heartbeatInterval?: number;
  /** ms without a heartbeat after which a member is dropped. @default 4 × heartbeatInterval */
  memberTimeout?: number;
  /** Longest wait for a Redis reply (ms). @default max(1_000, 2 × heartbeatInterval) */
  redisTimeout?: number;
  /** The part of the whole rate kept as a floor, split between the members (0 to 1). @default 0.05 */
  floorFraction?: number;
  /** Reject every acquire while Redis cannot be reached. @default false */
  failClosed?: boolean;
  /** Prefix of the Redis keys. @default 'arl:' */
  keyPrefix?: string;
  /** The shared state expires after this long (ms) with no member left. @default 3_600_000 */
  stateTtl?: number;
}

const ms = durationSchema.pipe(z.number().positive().finite()).optional();

/** `shared` as JSON config writes it (durations as ms or strings such as "250ms"). */
export const sharedConfigSchema = z
  .object({
    redis: z.string().refine(isRedisUrl, { message: REDIS_URL_MESSAGE }),
    name: z.string().min(1).optional(),
    heartbeatInterval: ms,
    memberTimeout: ms,
    redisTimeout: ms,
    floorFraction: z.number().min(0).max(1).optional(),
    failClosed: z.boolean().optional(),
    keyPrefix: z.string().optional(),
    stateTtl: ms,
  })
  .strict();
