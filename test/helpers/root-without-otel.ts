// Run with test/helpers/no-otel.mjs: the root works without @opentelemetry/api, loads none of
// it, and no limiter is watched; the otel entry fails naming the missing package.
import { createRequire } from 'node:module';
import { AdaptiveRateLimiter, rateLimitedFetch } from '../../src/index.js';
import { watchGeneration } from '../../src/limiter/watch.js';

const limiter = new AdaptiveRateLimiter({ initialUnitsPerMinute: 60 });
const permit = limiter.tryAcquire();
permit?.success();
limiter.close();
const wrapped = rateLimitedFetch({ fetch: async () => new Response('ok') });
const answer = await wrapped('https://api.example.com/x');
wrapped.close();
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((m) => m.includes('@opentelemetry'));
let otel = 'loaded';
try {
  await import('../../src/otel/index.js');
} catch (error) {
  otel = String((error as Error).message);
}
console.log(
  JSON.stringify({
    granted: permit !== undefined,
    status: answer.status,
    loaded,
    watchers: watchGeneration(),
    otel,
  }),
);
