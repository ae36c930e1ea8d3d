import { z } from 'zod';
import { DEFAULT_MAX_ATTEMPTS } from '../attempt-loop.js';
import type { Clock } from '../clock.js';
import { systemClock } from '../clock.js';
import { limiterName, nearMiss, unknownKeyMessage } from '../config/rules.js';
import type { LimiterConfig } from '../config/schema.js';
import { ConfigError, configErrorFrom, configPath } from '../errors.js';
import type { HeaderRecord } from '../headers.js';
import { issueMessage } from '../issue-message.js';
import { clockSchema } from '../limiter/options.js';
import { exactOriginOption } from '../origin.js';
import { buildEntry } from '../registry/entries.js';
import type { RateLimiterRegistry } from '../registry/index.js';
import type { ClassifyResult } from './classify.js';
import { isPartitionSecret, MIN_SECRET_LENGTH, type PartitionKey } from './partition.js';
import type { RejectionMode } from './refusal.js';

/** A request as `units` sees it, before it is sent. */
export interface OutgoingRequest {
  /** Normalized: `https://api.example.com`, `http://127.0.0.1:8080`. */
  origin: string;
  /** `GET`, `POST`, ... as the caller wrote it. */
  method: string;
  /** Path and query: `/v1/items?page=2`. */
  path: string;
  /** Request headers, names in lower case, repeated fields as arrays. */
  headers: HeaderRecord;
  /**
   * The request body, when the adapter holds it in memory: with a JSON content type
   * (`application/json`, `application/*+json`) a string or bytes parsed as JSON (the string when
   * it does not parse), else the string (`URLSearchParams` as its string) or the bytes as they are;
   * `undefined` for no body and for a body that would have to be read to be seen (a stream, an
   * async iterable, a `Blob`, `FormData`, a `Request` object's body): the adapter never buffers a
   * body for it. Bytes sent with a `content-encoding` (`gzip`, `deflate`, `br`) are seen decoded
   * (off the event loop, before the callbacks are asked; up to 64 MiB decoded), as an LLM API's
   * estimate reads them; bytes that do not decode, or decode longer, are seen as sent. Parsed at
   * its first read. Treat it as read-only: what is sent is the body as given.
   */
  readonly body?: unknown;
}

/** Options of {@link adaptiveRateLimit} and {@link rateLimitedFetch}. Validated when the factory is called. */
export interface InterceptorOptions {
  /**
   * Named limiters, each with the `origins` it covers (exact origins and `*.example.com`
   * wildcards) and the limiter's options (rates in units/min, durations in ms), or a `limiter`
   * instance you own in place of the options: a `SharedBudget` from `adaptive-rate-limit/redis`
   * meters these origins' requests in every process against one budget. The adapter never closes
   * such an instance; close it after the adapter (see `LimiterConfig.limiter`).
   * Not with `registry`. @default {}
   */
  limiters?: Record<string, LimiterConfig>;
  /**
   * The config for an origin no limiter names: each such origin gets a limiter of its own; `false`
   * lets those origins pass through unlimited. Not with `registry`. @default {} (a limiter per origin with the defaults)
   */
  default?: Omit<LimiterConfig, 'origins'> | false;
  /**
   * A registry to take limiters from instead of building one from `limiters`, `default` and
   * `clock`: share it between an interceptor and a fetch wrapper (they share the limiters' rates;
   * each adapter keeps its own `maxConcurrent` cap), watch its events, change it at run time.
   * Its owner closes it. @default a registry of the adapter's own
   */
  registry?: RateLimiterRegistry;
  /**
   * The origin of requests that carry none: a `Client` or `Pool` composed on undici 7 dispatches
   * without `opts.origin`. An http(s) origin; normalized. @default none (such a request fails)
   */
  origin?: string | URL;
  /**
   * The cost of a request in units (> 0, finite). Its `body` is the one sent, decoded when it was
   * sent compressed (see {@link OutgoingRequest.body}). @default () => 1
   */
  units?: (request: OutgoingRequest) => number;
  /**
   * The partition a request belongs to: each (origin, partition) gets a limiter of its own, so
   * that one customer's 429s and pauses never slow another's requests. Return a key (a string, or
   * a list of parts such as `[token, model]`), or `undefined` for none (the request shares its
   * origin's limiter), at once: a Promise (an async function) fails the request with
   * `InvalidCallbackValueError`. The key is hashed with a per-process random key at once and never kept or
   * shown; the partition is named by a short id (`https://api.example.com#Zt3kQ0b9xY1w`), or by
   * `partitionName`. A limiter's own `partitionBy` wins over it; limiters given as instances
   * (`limiter`, `shared`) are not partitioned. Its `body` is decoded when it was sent compressed
   * (see {@link OutgoingRequest.body}). See docs/partitions.md.
   * @default by credential: the values of `authorization`, `x-api-key`, `api-key` (and the header
   * the limiter's `headers` profile names, `x-shopify-access-token`); none present: no partition
   */
  partition?: (request: OutgoingRequest) => PartitionKey;
  /**
   * The name a partition is shown by (its limiter's name, events, snapshot) in place of its short
   * id, such as your customer's id: asked once, when the partition's limiter is made; `undefined`
   * keeps the id. Never return the credential. @default the short id
   */
  partitionName?: (request: OutgoingRequest) => string | undefined;
  /**
   * The key of the hash that names partitions (a string or bytes, 16 at least; keep it as a
   * secret, from your secret store): the same in every process, so that each computes the same
   * short id for a credential. Needed for a `shared` budget per partition (its name holds the id),
   * and with it a limiter with `shared` is partitioned as the others are. Never shown.
   * @default a random key per process (ids mean nothing in another process; `shared` budgets are not partitioned)
   */
  partitionSecret?: string | Uint8Array;
  /**
   * The units a successful request really cost, from its answer (APIs that report a request's
   * cost in a header); `undefined` keeps the charge. The measured send rate counts the corrected
   * units. @default keep the charge
   */
  responseUnits?: (status: number, headers: HeaderRecord) => number | undefined;
  /**
   * Attempts in all for a throttled request (an integer >= 1): a throttled request whose body can
   * be sent again is queued again; after the last attempt the caller gets the throttled response
   * itself. `1` never retries. @default 4
   */
  maxAttempts?: number;
  /** Response statuses that mean "slow down" (each 400..599), such as `[429, 503]` for S3. @default [429] */
  throttleStatuses?: readonly number[];
  /**
   * Judges a response: `'success'`, `'throttled'` or `'failed'`, or `undefined` for the default
   * rule (throttle statuses throttled, other 2xx-4xx success, 5xx failed); a throttled or failed
   * verdict may carry its wait, `{ verdict: 'throttled', retryAfterMs }` (ms, >= 0), which replaces
   * the one read from `Retry-After`. For APIs such as GitHub's, which throttle with 403 and
   * `x-ratelimit-remaining: 0` until `x-ratelimit-reset`: `githubClassify`. @default the default rule
   */
  classify?: (status: number, headers: HeaderRecord) => ClassifyResult;
  /**
   * The longest one-shot request body (a stream, an async iterable, Node fetch's body) kept in
   * memory while it is sent, in bytes, so that a throttled attempt can be sent again; a longer
   * body is sent once and its caller gets the throttled response. Strings, Buffers and other
   * in-memory bodies are always replayed. An integer >= 0. @default 1048576 (1 MiB)
   */
  maxReplayBodyBytes?: number;
  /** The time source of the limiters the adapter makes. Not with `registry`. @default systemClock */
  clock?: Clock;
  /**
   * How a request the limiter refuses (its wait would pass `maxWait`, the queue is full, the
   * limiter was closed) ends: `'error'` fails it with `RateLimitRejectedError`; `'response'` answers
   * it with a local `429` carrying `Retry-After` (the predicted wait, whole seconds rounded up, at
   * least 1) and `x-adaptive-rate-limit: rejected;reason=<reason>`, which SDKs back off from
   * instead of retrying a "connection error" at once. A retry the limiter refuses still gets the
   * server's last 429. @default 'error' (a refusal is this process's decision, not the server's
   * answer: code that counts 429s must not count it, and the error says why)
   */
  rejection?: RejectionMode;
}

/** The values the HTTP adapters fill in for options (or config fields) left out. */
const HTTP_DEFAULTS = {
  maxAttempts: DEFAULT_MAX_ATTEMPTS,
  throttleStatuses: [429] as readonly number[],
  maxReplayBodyBytes: 1024 * 1024,
  rejection: 'error',
} as const;

/** {@link InterceptorOptions} after defaults and checks. */
export interface ResolvedInterceptorOptions {
  limiters: Record<string, LimiterConfig> | undefined;
  default: Omit<LimiterConfig, 'origins'> | false | undefined;
  registry: RateLimiterRegistry | undefined;
  origin: string | undefined;
  units: ((request: OutgoingRequest) => number) | undefined;
  partition: ((request: OutgoingRequest) => PartitionKey) | undefined;
  partitionName: ((request: OutgoingRequest) => string | undefined) | undefined;
  partitionSecret: string | Uint8Array | undefined;
  responseUnits: ((status: number, headers: HeaderRecord) => number | undefined) | undefined;
  maxAttempts: number;
  throttleStatuses: ReadonlySet<number>;
  classify: ((status: number, headers: HeaderRecord) => ClassifyResult) | undefined;
  maxReplayBodyBytes: number;
  clock: Clock | undefined;
  rejection: RejectionMode;
}

const fn = <T>(what: string) =>
  z.custom<T>((v) => typeof v === 'function', { message: `must be a function (${what})` }).optional();

const isObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The shape checked here; the limiters' own fields are checked by the registry that makes them. */
const interceptorOptionsSchema = z
  .object({
    limiters: z.record(limiterName, z.custom<LimiterConfig>(isObject, { message: 'must be an object' })),
    default: z.custom<Omit<LimiterConfig, 'origins'> | false>((v) => v === false || isObject(v), {
      message: 'must be false or an object',
    }),
    registry: z.custom<RateLimiterRegistry>(
      (v) => isObject(v) && typeof (v as RateLimiterRegistry).limiterFor === 'function',
      { message: 'must be a RateLimiterRegistry' },
    ),
    origin: z.union([z.string(), z.instanceof(URL)]),
    units: fn<(request: OutgoingRequest) => number>('request => units'),
    partition: fn<(request: OutgoingRequest) => PartitionKey>('request => key | [parts] | undefined'),
    partitionName: fn<(request: OutgoingRequest) => string | undefined>('request => name | undefined'),
    partitionSecret: z.custom<string | Uint8Array>(isPartitionSecret, {
      message: `must be a string or bytes of ${MIN_SECRET_LENGTH} at least`,
    }),
    responseUnits: fn<(status: number, headers: HeaderRecord) => number | undefined>(
      '(status, headers) => units',
    ),
    maxAttempts: z.number().int().min(1),
    throttleStatuses: z.array(z.number().int().min(400).max(599)).readonly(),
    classify: fn<(status: number, headers: HeaderRecord) => ClassifyResult>(
      "(status, headers) => 'success' | 'throttled' | 'failed' | { verdict, retryAfterMs } | undefined",
    ),
    maxReplayBodyBytes: z.number().int().nonnegative(),
    clock: clockSchema,
    rejection: z.enum(['error', 'response']),
  })
  .partial()
  .strict();

/**
 * Checks the options (each bad field named with the value received) and fills in the defaults.
 * `extra` lists keys another factory adds (the fetch wrapper's `fetch`).
 *
 * @throws {ConfigError}
 */
export function resolveInterceptorOptions(
  options: InterceptorOptions = {},
  source = 'adaptiveRateLimit options',
  extra: readonly string[] = [],
): ResolvedInterceptorOptions {
  if (!isObject(options)) {
    throw new ConfigError([{ path: '', message: 'must be an options object', received: options }], source);
  }
  const own = Object.fromEntries(Object.entries(options).filter(([key]) => !extra.includes(key)));
  const parsed = interceptorOptionsSchema.safeParse(own, { error: issueMessage });
  if (!parsed.success) {
    const known = [...Object.keys(interceptorOptionsSchema.shape), ...extra];
    const { issues } = configErrorFrom(parsed.error, own, source);
    throw new ConfigError(
      issues.map((issue) =>
        issue.message === 'unknown key' && !issue.path.includes('.')
          ? {
              ...issue,
              message: unknownKeyMessage(issue.path, known),
              // A misspelt `partitionSecret` holds the secret all the same.
              ...(isSecretKey(issue.path) && { received: secretShape(own[issue.path]) }),
            }
          : issue.path === 'partitionSecret'
            ? // A secret is never shown: its kind and length only.
              { ...issue, received: secretShape(own.partitionSecret) }
            : issue,
      ),
      source,
    );
  }
  const o = parsed.data;
  // The caller's own object: a copy made by the schema would drop a "__proto__" key silently
  // (the registry reports it).
  const limiters = o.limiters === undefined ? undefined : (own.limiters as Record<string, LimiterConfig>);
  const limiterIssues = Object.entries(limiters ?? {}).flatMap(([name, config]) => [
    // Every issue of the limiter at once (its options too), as the registry will find them.
    ...entryIssues(name, config, o.clock ?? systemClock),
    ...(coversNoOrigin(config)
      ? [
          {
            path: configPath(['limiters', name, 'origins']),
            message:
              "covers no origin: the HTTP adapters route requests by origin, so this limiter would meter nothing; list them, as `origins: ['https://api.example.com']`",
            received: config.origins,
          },
        ]
      : []),
  ]);
  const origin = o.origin === undefined ? undefined : exactOriginOption(o.origin, 'origin');
  if (origin !== undefined && !('origin' in origin)) limiterIssues.unshift(origin);
  if (limiterIssues.length > 0) throw new ConfigError(limiterIssues, source);
  if (o.registry !== undefined) {
    const clash = (['limiters', 'default', 'clock'] as const).filter((key) => o[key] !== undefined);
    if (clash.length > 0) {
      throw new ConfigError(
        clash.map((key) => ({
          path: key,
          message: 'not allowed with `registry`: configure the registry instead',
          received: o[key],
        })),
        source,
      );
    }
  }
  return {
    limiters,
    default: o.default,
    registry: o.registry,
    origin: origin !== undefined && 'origin' in origin ? origin.origin : undefined,
    units: o.units,
    partition: o.partition,
    partitionName: o.partitionName,
    partitionSecret: o.partitionSecret,
    responseUnits: o.responseUnits,
    maxAttempts: o.maxAttempts ?? HTTP_DEFAULTS.maxAttempts,
    throttleStatuses: new Set(o.throttleStatuses ?? HTTP_DEFAULTS.throttleStatuses),
    classify: o.classify,
    maxReplayBodyBytes: o.maxReplayBodyBytes ?? HTTP_DEFAULTS.maxReplayBodyBytes,
    clock: o.clock,
    rejection: o.rejection ?? HTTP_DEFAULTS.rejection,
  };
}

function entryIssues(name: string, config: LimiterConfig, clock: Clock) {
  const built = buildEntry(name, config, clock);
  return 'issues' in built ? built.issues : [];
}

/** A named limiter that lists no origin (no `origins`, or an empty list) routes nothing. */
function coversNoOrigin(config: LimiterConfig): boolean {
  return config.origins === undefined || (Array.isArray(config.origins) && config.origins.length === 0);
}

/** Whether an unknown key of the options is meant as `partitionSecret`, or names a secret. */
function isSecretKey(key: string): boolean {
  return /secret/i.test(key) || nearMiss(key, ['partitionSecret']) !== undefined;
}

/** What an error tells of a bad `partitionSecret`: its kind and length, never its value. */
function secretShape(value: unknown): string {
  if (typeof value === 'string') return `a string of ${value.length} characters`;
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  return value === null ? 'null' : typeof value;
}
