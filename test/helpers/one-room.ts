import { ManualClock } from '../../src/clock.js';
import { rateLimitedFetch } from '../../src/http/fetch.js';
import type { LimiterConfig } from '../../src/index.js';
import { RateLimiterRegistry } from '../../src/registry/index.js';
import { cleanups } from './interceptor-fixtures.js';

/**
 * A fetch wrapper over a registry of one named limiter for `origin` (`api: 'openai'` unless
 * `config` says otherwise) with room for one limiter besides it (`maxOriginLimiters: 1`), on a
 * manual clock: the second customer's partition takes that room, the third shares the overflow
 * limiter or makes an idle one give way. Both are closed after the test (`cleanups`).
 */
export function oneRoomFetch(origin: string, config: Omit<LimiterConfig, 'origins'> = { api: 'openai' }) {
  const clock = new ManualClock();
  const registry = new RateLimiterRegistry({
    limiters: { openai: { origins: [origin], ...config } },
    maxOriginLimiters: 1,
    clock,
  });
  cleanups.push(() => registry.close());
  const fetch = rateLimitedFetch({ registry });
  cleanups.push(() => fetch.close());
  return { clock, registry, fetch };
}
