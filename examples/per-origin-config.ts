/**
 * Limiters per origin from a JSON file: `rate-limits.json` gives two APIs different limiters
 * (CUBIC that learns the limit; a fixed 600/min for an API whose limit is known) and lets every
 * other origin through. `appsettings.json` says the same in the .NET shape of RateLimiting.Adaptive
 * (PascalCase keys, `TimeSpan` durations, other sections ignored); both load into the same config.
 *
 *   node --import tsx examples/per-origin-config.ts
 */
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { Agent, request } from 'undici';
import { adaptiveRateLimit, loadConfig } from '../src/index.js';
import { type RateLimitedServer, startServer } from './server.js';

const file = (name: string) => fileURLToPath(new URL(name, import.meta.url));
const config = await loadConfig(file('rate-limits.json'));
const same = isDeepStrictEqual(config, await loadConfig(file('appsettings.json')));
console.log(`rate-limits.json and appsettings.json ${same ? 'load into the same config' : 'differ'}`);

// The file names the production origins; this demo points each limiter at a local server instead.
const orders = await startServer({ perMinute: 1200 });
const billing = await startServer({ perMinute: 900 });
config.limiters['orders-api']!.origins = [orders.origin];
config.limiters['billing-api']!.origins = [billing.origin];

const rateLimit = adaptiveRateLimit(config);
const agent = new Agent().compose(rateLimit);

await Promise.all([burst('orders-api', orders, 40), burst('billing-api', billing, 20)]);

rateLimit.close();
await Promise.all([agent.close(), orders.close(), billing.close()]);

/** Sends `count` requests at once to `server` and prints what its limiter made of them. */
async function burst(name: string, server: RateLimitedServer, count: number): Promise<void> {
  const statuses = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const { statusCode, body } = await request(`${server.origin}/items/${i}`, { dispatcher: agent });
      await body.dump();
      return statusCode;
    }),
  );
  const ok = statuses.filter((s) => s === 200).length;
  const limiter = rateLimit.registry.get(name)!.snapshot();
  const { controller = 'aimd', maxUnitsPerMinute } = config.limiters[name]!;
  const kind = maxUnitsPerMinute === undefined ? String(controller) : `at most ${maxUnitsPerMinute}/min`;
  console.log(
    `${name} (${kind}): ${ok} of ${count} answered 200; the server (quota ${server.perMinute}/min) answered ${server.stats.throttled} with 429; the limiter runs at ${Math.round(limiter.rate)} units/min`,
  );
}
