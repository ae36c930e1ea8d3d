import type { HeaderRecord } from '../headers.js';
import type { AdaptiveLimiterOptions } from '../limiter/options.js';
import type { AnnouncedQuota, RateLimiter } from '../limiter/types.js';
import type { LlmApi } from './api.js';
import type { SharedConfig } from './shared.js';

// The shapes of a config (what parseConfig returns and the registry and adapters take): apart
// from the schema, so that the rules the schema uses can name them without a circle.

/**
 * Which response headers announce the quota, per limiter (`headers`):
 * - `'standard'`: the IETF RateLimit fields only (draft-10's `RateLimit` and `RateLimit-Policy`,
 *   draft-07's Dictionary), which say what they mean;
 * - `'github'`, `'openai'`, `'anthropic'`, `'shopify'`: those too, and that vendor's own headers
 *   as it documents them (OpenAI's and Anthropic's budgets each in its own units, naming it) (`x-ratelimit-reset` means epoch seconds to GitHub and a duration to OpenAI, so a vendor
 *   form is never guessed);
 * - `false`: none.
 */
export type HeaderProfile = 'standard' | 'github' | 'openai' | 'anthropic' | 'shopify';

export const HEADER_PROFILES: readonly HeaderProfile[] = [
  'standard',
  'github',
  'openai',
  'anthropic',
  'shopify',
];

/**
 * Your reading of a response's quota headers, for APIs no profile covers: a quota (or several,
 * each named by `policy`) in the limiter's units, with `resetMs` counted from the response, or
 * `undefined` when the response announces none. See {@link AnnouncedQuota}.
 */
export type QuotaFromHeaders = (
  headers: HeaderRecord,
) => AnnouncedQuota | readonly AnnouncedQuota[] | undefined;

/** One named limiter: the limiter's options plus what it covers and how requests are sent. */
export interface LimiterConfig extends Omit<AdaptiveLimiterOptions, 'clock' | 'name'> {
  /**
   * The origins this limiter covers: exact origins (`https://api.example.com`) and wildcards
   * (`*.example.com`, `https://*.example.com`). An exact origin beats a wildcard; among
   * wildcards the closest wins: the longest host suffix (`*.api.example.com` over
   * `*.example.com`), then a named scheme, then a named port. An exact origin, or a wildcard written alike
   * (`*.example.com`, `*.EXAMPLE.com.`), may belong to one limiter only.
   */
  origins?: string[];
  /**
   * Requests in flight at once (an integer >= 1). A request waits for its slot (FIFO, abortable)
   * before its units, and that wait counts in `maxWait`: one still waiting for a slot when
   * `maxWait` is up is refused with the rate wait's `RateLimitRejectedError` (`'max-wait'`; a
   * fixed-window `limiter`: `'timeout'`, at `timeoutDuration`). A request waiting for a slot
   * counts in `queueLimit` as one waiting for units does (refused with `'queue-full'`).
   * @default unset: no cap
   */
  maxConcurrent?: number;
  /**
   * What `maxConcurrent` caps when the requests are partitioned (see `partitionBy`):
   * `'partition'`, each partition's requests in flight (an API that caps each key's concurrent
   * requests); `'origin'`, the requests of every partition together, as without partitions (for a
   * named limiter: of all its origins). @default 'partition'
   */
  maxConcurrentPer?: 'partition' | 'origin';
  /**
   * The request headers whose values split this limiter's requests into partitions, each with a
   * limiter of its own made from this config (HTTP adapters): `["authorization"]`, or your own
   * tenant header. Names in any case. `false` (or `[]`) turns partitions off: one limiter for
   * every request, as for an API that limits per account across several keys. The values are
   * hashed at once, never kept. Not with `limiter`; with `shared`, only when the adapter has a
   * `partitionSecret` (each partition is then a shared budget of its own).
   * @default the adapter's `partition` function if given, else the credential headers:
   * `authorization`, `x-api-key`, `api-key`, and the one the `headers` profile names; with `api`,
   * those and the body's `model` (a limiter per model, as the vendors limit per model)
   */
  partitionBy?: readonly string[] | false;
  /**
   * An LLM API, metered the way it counts (HTTP adapters; see docs/llm.md): `'openai'` meters
   * requests and tokens, `'anthropic'` requests, input tokens and output tokens, each a budget of
   * its own (`budgets`) read from the API's headers in its own units (`headers` defaults to the
   * API's profile), spent in full at the start and then paced, with a reserve (`reserve`); each
   * call charged an estimate from its body before it is sent and corrected from the answer's
   * `usage` (at the end of a stream, as it passes); a 429 cuts only the budget that ran out; a
   * spend cap or used-up quota ends the call at once (no retry, no cut; `QuotaExhaustedError`
   * with `rejection: 'error'`). Other fields override what it sets. @default unset
   */
  api?: LlmApi;
  /**
   * Which response headers announce the quota, giving the limiter a ceiling (HTTP adapters):
   * `'standard'` reads the IETF RateLimit fields; `'github'`, `'openai'`, `'anthropic'`,
   * `'shopify'` read them and that vendor's own headers as it documents them; `false` reads none.
   * A vendor form is never guessed from the headers. See docs/how-it-works.md, "Quota headers";
   * `wrap`'s `headers` reads a thrown error's the same way. @default 'standard'
   */
  headers?: HeaderProfile | false;
  /**
   * Your reading of the quota headers, for APIs no profile covers: `(headers) => { remaining,
   * resetMs, limit, windowMs }` (the limiter's units; ms), a list of such (each named by
   * `policy`), or `undefined`. Added to what `headers` reads. Code only (not in JSON).
   * @default unset
   */
  quotaFromHeaders?: QuotaFromHeaders;
  /**
   * A limiter you own, to put behind `origins` instead of one the registry makes: typically a
   * `SharedBudget` (`adaptive-rate-limit/redis`), so that every process's requests to these
   * origins are metered against one budget; any {@link RateLimiter} will do (the HTTP adapters
   * use only its `tryAcquire` and `acquire`, and feed its permits).
   *
   * - It carries its own options: with it, only `origins`, `maxConcurrent` (the adapter's
   *   concurrency gate), `headers` and `quotaFromHeaders` are allowed; a rate option next to it
   *   is a `ConfigError` naming the field.
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
  /**
   * A budget shared through Redis by every process that declares it (JSON config or code):
   * `{ "redis": "redis://...", "name": "github" }`. The limiter's rate options are the whole
   * budget's. The registry makes the `SharedBudget`, opens it at the first request and closes it
   * with the registry; not with `limiter`, and not in `default`. See {@link SharedConfig}.
   * @default unset: a limiter of this process alone
   */
  shared?: SharedConfig;
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
  /** How a refused request ends: `'error'` or a local 429 (`'response'`), any case. @default 'error' */
  rejection?: 'error' | 'response';
}
