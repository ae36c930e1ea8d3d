/**
 * One client, rate-limited: compose the interceptor into a `Pool` (one origin) or an `Agent` (any
 * origin) instead of the global dispatcher, and next to undici's own interceptors.
 *
 *   node --import tsx examples/per-client.ts
 */
import { Agent, interceptors, Pool } from 'undici';
import { adaptiveRateLimit } from '../src/index.js';
import { startServer } from './server.js';

// 1. A Pool for one API. undici 7 dispatches a Pool's requests without an origin, so name it.
const api = await startServer({ perMinute: 1200 });
const pool = new Pool(api.origin, { connections: 16 });
const poolRateLimit = adaptiveRateLimit({ origin: api.origin, default: { maxWait: 10_000 } });
const client = pool.compose(poolRateLimit);

const poolStatuses = await Promise.all(
  Array.from({ length: 40 }, async (_, i) => {
    const { statusCode, body } = await client.request({ method: 'GET', path: `/items/${i}` });
    await body.dump();
    return statusCode;
  }),
);
report('pool', poolStatuses, api, poolRateLimit);

// 2. An Agent in the recommended order. The last interceptor listed runs first, so a request goes
//    retry -> redirect -> rate limit -> dns -> socket: each retry and each redirect hop waits for
//    units of its own origin, and the limiter sees the host name before dns swaps in an address.
//    The limiter retries 429s itself (up to `maxAttempts`), so leave 429 out of retry's statuses
//    and let retry handle 5xx and connection errors.
const other = await startServer({ perMinute: 1200 });
const agentRateLimit = adaptiveRateLimit({ default: { maxWait: 10_000 } });
const agent = new Agent().compose(
  interceptors.dns(),
  agentRateLimit,
  interceptors.redirect({ maxRedirections: 3 }),
  interceptors.retry({ maxRetries: 2, statusCodes: [500, 502, 503, 504] }),
);

// Every /old/<n> answers 301 to /items/<n>: two metered requests for each call.
const agentStatuses = await Promise.all(
  Array.from({ length: 20 }, async (_, i) => {
    const { statusCode, body } = await agent.request({
      origin: other.origin,
      method: 'GET',
      path: `/old/${i}`,
    });
    await body.dump();
    return statusCode;
  }),
);
report('agent (dns, rate limit, redirect, retry)', agentStatuses, other, agentRateLimit);

poolRateLimit.close();
agentRateLimit.close();
await Promise.all([pool.close(), agent.close(), api.close(), other.close()]);

function report(
  what: string,
  statuses: number[],
  server: Awaited<ReturnType<typeof startServer>>,
  rateLimit: ReturnType<typeof adaptiveRateLimit>,
): void {
  const ok = statuses.filter((s) => s === 200).length;
  const limiter = rateLimit.registry.limiterFor(server.origin)!.snapshot();
  console.log(`${what}: ${ok} of ${statuses.length} requests answered 200`);
  console.log(
    `  server (quota ${server.perMinute}/min): saw ${server.stats.requests} requests, answered ${server.stats.throttled} with 429`,
  );
  console.log(`  limiter learned ${Math.round(limiter.rate)} units/min after ${limiter.cuts} cut(s)`);
}
