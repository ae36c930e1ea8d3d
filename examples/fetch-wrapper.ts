/**
 * A rate-limited `fetch` without touching the global dispatcher: `rateLimitedFetch` wraps
 * `globalThis.fetch` (or any fetch you pass as `fetch`) and is called the same way. A throttled
 * request is sent again with its body, so the caller never sees the 429.
 *
 *   node --import tsx examples/fetch-wrapper.ts
 */
import { rateLimitedFetch } from '../src/index.js';
import { startServer } from './server.js';

const server = await startServer({ perMinute: 1200 });
const limitedFetch = rateLimitedFetch({ default: { maxWait: 10_000 } });

// A burst of 50 POSTs with JSON bodies; the server echoes each body it accepted.
const results = await Promise.all(
  Array.from({ length: 50 }, async (_, i) => {
    const sent = JSON.stringify({ event: 'order-placed', id: i });
    const response = await limitedFetch(`${server.origin}/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: sent,
    });
    if (response.status !== 200) {
      await response.body?.cancel();
      return false;
    }
    const echo = (await response.json()) as { body: string };
    return echo.body === sent;
  }),
);

const intact = results.filter(Boolean).length;
const limiter = limitedFetch.registry.limiterFor(server.origin)!.snapshot();
console.log(`rateLimitedFetch: ${intact} of ${results.length} POSTs answered 200 with their body intact`);
console.log(
  `server (quota ${server.perMinute}/min): saw ${server.stats.requests} requests, answered ${server.stats.throttled} with 429`,
);
console.log(`limiter learned ${Math.round(limiter.rate)} units/min after ${limiter.cuts} cut(s)`);

limitedFetch.close();
await server.close();
