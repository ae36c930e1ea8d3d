/**
 * Any async function, rate-limited: `wrap(limiter, fn)` waits for units before each call, reads a
 * thrown `{ status: 429, retryAfterMs }` as a throttle (cut the rate, pause, call again up to
 * `maxAttempts` in all) and anything else as a failure. Here `fn` is an SDK-style client call.
 *
 *   node --import tsx examples/wrap-function.ts
 */
import { AdaptiveRateLimiter, parseRetryAfter, wrap } from '../src/index.js';
import { startServer } from './server.js';

/** What the SDK throws for a non-2xx answer: `status`, and `retryAfterMs` when the server sent one. */
class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly retryAfterMs: number | undefined,
  ) {
    super(`the API answered ${status}`);
  }
}

const server = await startServer({ perMinute: 1200 });

async function getOrder(id: number): Promise<{ path: string }> {
  const response = await fetch(`${server.origin}/orders/${id}`);
  if (!response.ok) {
    await response.body?.cancel();
    const retryAfter = response.headers.get('retry-after') ?? undefined;
    throw new ApiError(response.status, parseRetryAfter(retryAfter, Date.now()));
  }
  return (await response.json()) as { path: string };
}

const limiter = new AdaptiveRateLimiter({ name: 'orders-sdk', maxWait: 10_000 });
let throttledCalls = 0;
limiter.on('throttled', () => throttledCalls++);
const getOrderLimited = wrap(limiter, getOrder, { maxAttempts: 4 });

const results = await Promise.allSettled(Array.from({ length: 60 }, (_, id) => getOrderLimited(id)));
const returned = results.filter((r) => r.status === 'fulfilled').length;

const snapshot = limiter.snapshot();
console.log(
  `wrap(limiter, fn): ${returned} of ${results.length} calls returned an order, ${results.length - returned} threw`,
);
console.log(
  `server (quota ${server.perMinute}/min): saw ${server.stats.requests} requests, answered ${server.stats.throttled} with 429; the wrapper caught ${throttledCalls} ApiErrors with status 429`,
);
console.log(`limiter learned ${Math.round(snapshot.rate)} units/min after ${snapshot.cuts} cut(s)`);

limiter.close();
await server.close();
