// `adaptive-rate-limit/fetch`: the root's API without the undici interceptor and without the
// config files loader (`loadConfig`); src/index.ts re-exports this list and adds those two. For
// runtimes with a fetch of their own (Deno, Bun, Cloudflare workerd, browsers' bundlers): nothing
// it loads imports undici, `node:fs` or `node:module`. test/runtimes.test.ts runs it on Deno, Bun
// and workerd.
//
// One block per group. Each group comment stands on its own line, followed by a
// blank line: biome's organizeImports then sorts within a group and never moves exports across.

// Limiters

export type { LlmApi } from './config/api.js';
export type { LimiterSnapshot } from './limiter/adaptive.js';
export { AdaptiveRateLimiter } from './limiter/adaptive.js';
export type { Costs } from './limiter/budgets.js';
export type { LimiterEventMap, LimiterEventName } from './limiter/events.js';
export type {
  FixedWindowEventMap,
  FixedWindowLimiterOptions,
  FixedWindowSnapshot,
} from './limiter/fixed-window.js';
export { FixedWindowRateLimiter } from './limiter/fixed-window.js';
export type { AdaptiveLimiterOptions, BudgetOptions } from './limiter/options.js';
export type {
  AcquireOptions,
  AnnouncedQuota,
  Outcome,
  Permit,
  RateLimiter,
} from './limiter/types.js';
export { AWS_THROTTLING_CODES, classifyThrown } from './wrap/sdk-errors.js';
export { type WrapOptions, wrap } from './wrap/wrap.js';

// Controllers

export type {
  AimdOptions,
  CubicOptions,
  ProbeOptions,
  RateController,
  RateControllerState,
} from './controllers/index.js';
export { aimd, cubic, probe } from './controllers/index.js';

// HTTP adapters

export type { HeaderProfile, QuotaFromHeaders } from './config/types.js';
export { HEADER_PROFILES } from './config/types.js';
export type { HeaderRecord } from './headers.js';
export type { ClassifyResult, ResponseVerdict } from './http/classify.js';
export type { RateLimitedFetch, RateLimitedFetchOptions } from './http/fetch.js';
export { rateLimitedFetch } from './http/fetch.js';
export { githubClassify } from './http/github.js';
export type { InterceptorOptions, OutgoingRequest } from './http/options.js';
export type { PartitionKey } from './http/partition.js';
export { credentialPartition, PARTITION_HEADERS } from './http/partition.js';
export type { Refusal, RejectionMode } from './http/refusal.js';
export { REFUSAL_HEADER } from './http/refusal.js';
export { parseRetryAfter } from './http/retry-after.js';

// Registry and config

export type { LimiterConfig, RateLimitConfig } from './config/schema.js';
export { parseConfig } from './config/schema.js';
export type { RegistryEventMap, RegistryOptions } from './registry/index.js';
export { partitionKey, RateLimiterRegistry } from './registry/index.js';

// Errors

export type { ConfigIssue, RejectionReason } from './errors.js';
export {
  AdaptiveRateLimitError,
  ConfigError,
  InvalidArgumentError,
  InvalidCallbackValueError,
  QuotaExhaustedError,
  RateLimitRejectedError,
  ThrottledBodyTimeoutError,
  ThrottledBodyTooLongError,
} from './errors.js';

// Time

export type { Clock } from './clock.js';
export { ManualClock, systemClock } from './clock.js';

// Observability

export { attachDiagnostics, DIAGNOSTICS_CHANNELS } from './diagnostics.js';

// The attempt loop (for your own adapters)

export type { AttemptPlan } from './attempt-loop.js';
export { runAttempts } from './attempt-loop.js';
