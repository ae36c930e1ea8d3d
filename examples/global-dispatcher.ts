/**
 * Every `fetch` of the process, rate-limited: install an undici Agent composed with the
 * interceptor as the global dispatcher, then use Node's built-in `fetch` as usual. Each origin
 * gets a limiter of its own, unlimited until its first 429.
 *
 *   node --import tsx examples/global-dispatcher.ts
 */
import { Agent, setGlobalDispatcher } from 'undici';
import { adaptiveRateLimit } from '../src/index.js';
import { startServer } from './server.js';

const server = await startServer({ perMinute: 1200, retryAfterSeconds: 1 });

const rateLimit = adaptiveRateLimit({ default: { maxWait: 10_000 } });
const agent = new Agent();
setGlobalDispatcher(agent.compose(rateLimit));

// A burst of 60 requests at once, with a quota of 20 a second: Node's own fetch, no changes.
const started = performance.now();
const statuses = await Promise.all(
  Array.from({ length: 60 }, async (_, i) => {
    const response = await fetch(`${server.origin}/items/${i}`);
    await response.arrayBuffer();
    return response.status;
  }),
);
const seconds = (performance.now() - started) / 1000;

const ok = statuses.filter((s) => s === 200).length;
const limiter = rateLimit.registry.limiterFor(server.origin)!.snapshot();
console.log(`global fetch: ${ok} of ${statuses.length} requests answered 200 in ${seconds.toFixed(1)} s`);
console.log(
  `server (quota ${server.perMinute}/min): saw ${server.stats.requests} requests, answered ${server.stats.throttled} with 429`,
);
console.log(
  `limiter for ${limiter.name}: learned ${Math.round(limiter.rate)} units/min after ${limiter.cuts} cut(s), ${limiter.throttles} throttled responses`,
);

rateLimit.close();
await agent.close();
await server.close();
