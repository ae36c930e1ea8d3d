import { z } from 'zod';
import { MAX_TIMER_MS } from '../clock.js';
import { durationSchema } from './duration.js';

/** What a `redis` URL must look like: `redis://` or `rediss://` (TLS), or a cluster's. */
export const REDIS_URL_MESSAGE =
  'must be a redis:// or rediss:// URL, such as redis://127.0.0.1:6379/0 (its path a database number, its user and password percent-encoded), or a cluster as redis+cluster://host:port,host:port';

/**
 * Whether `url` is a Redis URL the budget can connect to: a `redis:` or `rediss:` URL with a
 * host (ioredis reads it) and a port that is not 0 (none connects), or a cluster's
 * ({@link parseClusterUrl}). Its path, when it has one,
 * is a database number (`/0`): ioredis sends the path as it is to `SELECT`, and Redis's refusal
 * of `/abc` was an unhandled rejection that ended the process at the first request. Its user and
 * password decode (`%ZZ` made ioredis throw `URIError: URI malformed` at every request).
 */
export function isRedisUrl(url: string): boolean {
  if (CLUSTER_URL.test(url)) return parseClusterUrl(url) !== undefined;
  try {
    const parsed = new URL(url);
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
    return (
      (parsed.protocol === 'redis:' || parsed.protocol === 'rediss:') &&
      parsed.hostname !== '' &&
      parsed.port !== '0' &&
      /^(?:\/\d*)?$/.test(parsed.pathname)
    );
  } catch {
    return false;
  }
}

/** A Redis Cluster's URL read: its seed nodes and what every connection to a node takes. */
export interface ClusterUrl {
  /** The nodes to discover the cluster from (any of its masters or replicas). */
  nodes: { host: string; port: number }[];
  username?: string | undefined;
  password?: string | undefined;
  /** `rediss+cluster:`: every node over TLS. */
  tls: boolean;
}

const CLUSTER_URL = /^rediss?\+cluster:\/\//i;

/**
 * A Redis Cluster's URL: `redis+cluster://[user:password@]host:port,host:port,...` (or
 * `rediss+cluster://` for TLS; the port defaults to 6379; an IPv6 host in brackets); the nodes
 * are seeds, the cluster's slots are learned from them. `undefined`: not such a URL.
 */
export function parseClusterUrl(url: string): ClusterUrl | undefined {
  const match = /^(rediss?)\+cluster:\/\/(?:([^@/?#]*)@)?([^/?#@]+)\/?$/i.exec(url);
  if (match === null) return undefined;
  const [, scheme, auth, list] = match as unknown as [string, string, string | undefined, string];
  const nodes: ClusterUrl['nodes'] = [];
  for (const node of list.split(',')) {
    const m = /^(\[[0-9a-f:.]+\]|[^:[\]]+)(?::(\d{1,5}))?$/i.exec(node.trim());
    if (m === null) return undefined;
    const port = m[2] === undefined ? 6379 : Number(m[2]);
    if (!(port >= 1 && port <= 65_535)) return undefined;
    nodes.push({ host: (m[1] as string).replace(/^\[|\]$/g, ''), port });
  }
  let username: string | undefined;
  let password: string | undefined;
  if (auth !== undefined) {
    const colon = auth.indexOf(':');
    try {
      username = decodeURIComponent(colon === -1 ? auth : auth.slice(0, colon)) || undefined;
      password = colon === -1 ? undefined : decodeURIComponent(auth.slice(colon + 1));
    } catch {
      return undefined;
    }
  }
  return { nodes, username, password, tls: scheme.toLowerCase() === 'rediss' };
}

/**
 * A budget shared through Redis by every process that declares it: `limiters.<name>.shared` in
 * config. The registry makes a `SharedBudget` (`adaptive-rate-limit/redis`) from it and the
 * limiter's other options (rates of the whole budget, controller, `maxWait`, ...), opens it at
 * the first request to one of its origins (`lazy`), and closes it with the registry (an adapter's
 * `close()`, or `remove`). ioredis must be installed. See docs/redis.md.
 */
export interface SharedConfig {
  /**
   * The Redis URL: `redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS; a Redis
   * Cluster as `redis+cluster://[user:password@]host:port,host:port` (or `rediss+cluster://`).
   */
  redis: string;
  /** The budget's name: same name and same Redis, same budget. @default the limiter's name */
  name?: string;
  /**
   * ms between two heartbeats (in JSON config, a duration string too). Each heartbeat is one
   * Redis round trip (one Lua script); a change of the shared rate, the members or a pause
   * reaches this process within one heartbeat. At least 10 ms ({@link MIN_HEARTBEAT_INTERVAL}).
   * @default 250
   */
  heartbeatInterval?: number;
  /**
   * This process is dropped from the budget once it has sent no heartbeat for this long (ms).
   * Each member sends its own with its heartbeats, and the others judge it by that, not by
   * theirs: members with different `heartbeatInterval`s (and so different defaults) share one
   * budget, none dropped between its own heartbeats. Keep it above `redisTimeout` +
   * `heartbeatInterval`: a member whose heartbeats come that far apart (a slow link, a long
   * pause of its event loop) and is dropped between them keeps sending its share while the
   * others split the whole rate among the rest.
   * Sent to Redis, so rounded up to a whole ms; above 2^53-1 ms (`Number.MAX_SAFE_INTEGER`) it
   * is a `ConfigError`.
   * @default max(4 × heartbeatInterval, redisTimeout + 2 × heartbeatInterval): 1.5 s
   */
  memberTimeout?: number;
  /**
   * Longest wait for a Redis reply (ms) before the call counts as failed (and the budget as
   * degraded). Above 2^31-1 ms (about 24.8 days) it is clamped to that, as the library's clock
   * clamps its timers: Node's timers cannot wait longer (they fire at once), and a huge value
   * written to mean "never give up" then means about that, not "every call fails".
   * @default max(1_000, 2 × heartbeatInterval)
   */
  redisTimeout?: number;
  /**
   * The part of the whole rate kept as a floor for every member, split between them, so an idle
   * process can still send at once (0 to 1). The rest is split by demand. @default 0.05
   */
  floorFraction?: number;
  /**
   * While Redis cannot be reached, reject every acquire (`SharedBudgetUnavailableError`) instead
   * of serving from this process's last known share. Before Redis has answered once, `acquire`
   * waits for that answer and `tryAcquire` returns `undefined` (nothing is served unshared).
   * @default false
   */
  failClosed?: boolean;
  /** Prefix of the Redis keys. @default 'arl:' */
  keyPrefix?: string;
  /**
   * The shared state expires after this long (ms) with no member left; longer than
   * `memberTimeout`. Redis's `PEXPIRE` takes whole ms only, so it is rounded up to a whole ms;
   * above 2^53-1 ms (`Number.MAX_SAFE_INTEGER`, beyond which a number is no longer a whole ms
   * exactly) it is a `ConfigError` naming the field, not a budget whose every heartbeat fails.
   * @default max(3_600_000, 2 × memberTimeout)
   */
  stateTtl?: number;
}

const ms = durationSchema.pipe(z.number().positive().finite()).optional();

/**
 * The limiter options a shared budget refuses (in code and in JSON config), each with why:
 * `budgets` (one rate of units is leased between the processes; the other budgets would each run
 * their whole rate in every process) and `burst: 'announced'` (every process would spend the whole
 * bucket the API announces, not its part of it).
 */
export function sharedLimiterIssues(options: { budgets?: unknown; burst?: unknown }): {
  path: string;
  message: string;
  received: unknown;
}[] {
  const issues: { path: string; message: string; received: unknown }[] = [];
  if (options.budgets !== undefined) {
    issues.push({
      path: 'budgets',
      message:
        'not with a shared budget: it leases one rate of units between the processes; the other budgets would each run their whole rate in every process',
      received: options.budgets,
    });
  }
  if (options.burst === 'announced') {
    issues.push({
      path: 'burst',
      message:
        "not 'announced' with a shared budget: every process would spend the whole bucket the API announces, not its part of it",
      received: options.burst,
    });
  }
  return issues;
}

/** A shared budget's timings (ms) after defaults. */
export interface SharedTimings {
  heartbeatInterval: number;
  memberTimeout: number;
  redisTimeout: number;
  stateTtl: number;
}

/** The heartbeat's default (ms). */
export const DEFAULT_HEARTBEAT_INTERVAL = 250;
/**
 * The shortest `heartbeatInterval` (ms). Each heartbeat is a Redis round trip running a Lua script,
 * so 0.0001 ms was a call about every ms (the timers' own resolution) from every member; at 10 ms
 * a member makes at most 100 a second, still within one round trip of a local Redis, and the
 * timings derived from it stay sound (a `redisTimeout` of 1 s, a `memberTimeout` of 1.02 s).
 */
export const MIN_HEARTBEAT_INTERVAL = 10;
/** The shared state's shortest default lifetime without a heartbeat (ms): an hour. */
export const DEFAULT_STATE_TTL = 3_600_000;

/**
 * A shared budget's timings with their defaults, and what in them cannot share (each issue names
 * the field, and the other field it is held against). `memberTimeout` and `stateTtl` are sent to
 * Redis: rounded up to whole ms, and refused above `Number.MAX_SAFE_INTEGER`. `memberTimeout` (how
 * long the others wait for this member's next heartbeat: each member's own, sent with its report)
 * defaults to `redisTimeout` plus two heartbeats (at least 4): a live member's heartbeats may
 * come a call's whole timeout apart (the next is armed after the answer), and dropped sooner it
 * would keep sending its share while the others split the rate among fewer members. `stateTtl`
 * defaults to an hour, or twice `memberTimeout` when that is longer. Refused: a `memberTimeout`
 * within one heartbeat (every member dropped between its own heartbeats), a `stateTtl` within
 * `memberTimeout` (the state, its learned rate and cuts, expiring between the heartbeats), and a
 * `heartbeatInterval` under {@link MIN_HEARTBEAT_INTERVAL}.
 */
export function sharedTimings(o: Partial<SharedTimings>): {
  timings: SharedTimings;
  issues: { path: string; message: string; received: number }[];
} {
  const heartbeatInterval = o.heartbeatInterval ?? DEFAULT_HEARTBEAT_INTERVAL;
  // Node's timers fire at once past MAX_TIMER_MS: a longer timeout waits that long, as the clock does.
  const redisTimeout = Math.min(o.redisTimeout ?? Math.max(1_000, 2 * heartbeatInterval), MAX_TIMER_MS);
  // Sent to Redis (PEXPIRE takes whole ms only): rounded up, and refused past a whole number.
  const memberTimeout = Math.ceil(
    o.memberTimeout ?? Math.max(4 * heartbeatInterval, redisTimeout + 2 * heartbeatInterval),
  );
  const stateTtl = Math.ceil(o.stateTtl ?? Math.max(DEFAULT_STATE_TTL, 2 * memberTimeout));
  const issues: { path: string; message: string; received: number }[] = [];
  if (heartbeatInterval < MIN_HEARTBEAT_INTERVAL) {
    issues.push({
      path: 'heartbeatInterval',
      message: `must be at least ${MIN_HEARTBEAT_INTERVAL} ms: each heartbeat is one Redis round trip (a Lua script) from every member`,
      received: heartbeatInterval,
    });
  }
  for (const [path, value] of [
    ['memberTimeout', memberTimeout],
    ['stateTtl', stateTtl],
  ] as const) {
    if (value > Number.MAX_SAFE_INTEGER) {
      issues.push({
        path,
        message: `must be at most ${Number.MAX_SAFE_INTEGER} ms (Number.MAX_SAFE_INTEGER): it is sent to Redis as a whole number of ms`,
        received: value,
      });
    }
  }
  if (memberTimeout <= heartbeatInterval) {
    issues.push({
      path: 'memberTimeout',
      message: `must be longer than heartbeatInterval (${heartbeatInterval} ms): every member would be dropped between its own heartbeats`,
      received: memberTimeout,
    });
  }
  if (stateTtl <= memberTimeout) {
    issues.push({
      path: 'stateTtl',
      message: `must be longer than memberTimeout (${memberTimeout} ms): the shared state, its learned rate and cuts, would expire between the members' heartbeats`,
      received: stateTtl,
    });
  }
  return { timings: { heartbeatInterval, memberTimeout, redisTimeout, stateTtl }, issues };
}

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
  .strict()
  .superRefine((shared, ctx) => {
    for (const issue of sharedTimings(shared).issues) {
      ctx.addIssue({ code: 'custom', path: [issue.path], message: issue.message, input: issue.received });
    }
  });
