// Run by Deno, Bun and workerd (test/runtimes.test.ts), with their own fetch: the fetch wrapper
// and wrap(limiter, fn) against the test's server, which throttles the third request of each path
// prefix once (429, Retry-After: 1). Imports `adaptive-rate-limit/fetch` as a user does.
import { AdaptiveRateLimiter, rateLimitedFetch, wrap } from 'adaptive-rate-limit/fetch';

/** 600 units/min: a request every 100 ms, so 5 at once wait for their turns. */
const RATE = { initialUnitsPerMinute: 600, maxUnitsPerMinute: 600 };

function watch(limiter) {
  const seen = { waited: 0, pauses: [] };
  limiter.on('acquired', (e) => {
    if (e.waited > 0) seen.waited++;
  });
  limiter.on('paused', (e) => seen.pauses.push(e.requestedMs));
  return seen;
}

function summary(seen, limiter, statuses) {
  const { throttles, cuts } = limiter.snapshot();
  return { statuses, waited: seen.waited, pauses: seen.pauses, throttles, cuts };
}

export async function check(origin) {
  const limited = rateLimitedFetch({ default: RATE });
  const fetchLimiter = limited.registry.limiterFor(origin);
  const fetchSeen = watch(fetchLimiter);
  const fetched = await Promise.all(
    [1, 2, 3, 4, 5].map(async (i) => {
      const response = await limited(`${origin}/fetch/${i}`);
      await response.text();
      return response.status;
    }),
  );
  const fetchReport = summary(fetchSeen, fetchLimiter, fetched);
  limited.close();

  const limiter = new AdaptiveRateLimiter({ name: 'wrap', ...RATE });
  const wrapSeen = watch(limiter);
  const get = wrap(
    limiter,
    async (path) => {
      const response = await fetch(`${origin}${path}`);
      return {
        status: response.status,
        retryAfter: response.headers.get('retry-after'),
        body: await response.text(),
      };
    },
    {
      classify: (r) =>
        r.status === 429
          ? { kind: 'throttled', retryAfterMs: Number(r.retryAfter) * 1000 }
          : { kind: 'success' },
    },
  );
  const wrapped = await Promise.all([1, 2, 3, 4, 5].map(async (i) => (await get(`/wrap/${i}`)).status));
  const wrapReport = summary(wrapSeen, limiter, wrapped);
  limiter.close();
  return { fetch: fetchReport, wrap: wrapReport };
}
