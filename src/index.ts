// The public API: all of `adaptive-rate-limit/fetch` (src/fetch.ts, one list for both entry
// points) and what only Node.js has: the undici interceptor and the config files loader. Each
// group comment stands on its own line, followed by a blank line: biome's organizeImports then
// sorts within a group and never moves exports across.

// NODE_DEBUG=adaptive-rate-limit: one line per cut, pause, rate change and refusal

import './limiter/debug-log.js';

// Everything the fetch entry point has

export * from './fetch.js';

// HTTP adapters: the undici interceptor

export type { AdaptiveRateLimitInterceptor } from './http/interceptor.js';
export { adaptiveRateLimit } from './http/interceptor.js';

// Registry and config: the config files loader

export { loadConfig } from './config/load.js';
