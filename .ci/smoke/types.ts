// Compiled with `tsc --strict`, without skipLibCheck: the public types as a user writes them.
import {
  AdaptiveRateLimiter,
  type AdaptiveRateLimitInterceptor,
  adaptiveRateLimit,
  ConfigError,
  type LimiterSnapshot,
  parseConfig,
  type RateController,
  RateLimitRejectedError,
  rateLimitedFetch,
  wrap,
} from 'adaptive-rate-limit';
import { createSharedBudget, MemoryBudgetStore, type SharedBudgetOptions } from 'adaptive-rate-limit/redis';
import { Agent, setGlobalDispatcher } from 'undici';

const rl: AdaptiveRateLimitInterceptor = adaptiveRateLimit({
  limiters: { api: { origins: ['https://api.example.com'], maxUnitsPerMinute: 600, maxConcurrent: 10 } },
  default: false,
});
setGlobalDispatcher(new Agent().compose(rl));

const halve: RateController = {
  onThrottled: (s) => Math.max(s.rate / 2, s.minRate),
  onSuccess: () => undefined,
};
const limiter = new AdaptiveRateLimiter({ name: 'billing', controller: halve, initialUnitsPerMinute: 60 });
const snapshot: LimiterSnapshot = limiter.snapshot();
const call = wrap(limiter, async (id: number) => ({ id }));
const result: Promise<{ id: number }> = call(1);

const limitedFetch: typeof fetch = rateLimitedFetch({ fetch: globalThis.fetch });

const options: SharedBudgetOptions = {
  store: new MemoryBudgetStore(),
  name: 'github',
  initialUnitsPerMinute: 60,
};
const budget = createSharedBudget(options);

function explain(error: unknown): string {
  if (error instanceof RateLimitRejectedError) return error.reason;
  if (error instanceof ConfigError) return error.issues.map((i) => i.path).join(', ');
  return String(error);
}

export { budget, explain, limitedFetch, parseConfig, result, snapshot };
