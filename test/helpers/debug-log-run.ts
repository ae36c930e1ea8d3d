// Run with NODE_DEBUG=adaptive-rate-limit (test/debug-log.test.ts): a fetch wrapper against a
// server that throttles after 2 requests, then a limiter whose queue is full.
import { AdaptiveRateLimiter, RateLimitRejectedError, rateLimitedFetch } from '../../src/index.js';
import { RateLimitedServer } from './rate-limited-server.js';

const server = await RateLimitedServer.start({ capacity: 2, retryAfter: '1' });
const limited = rateLimitedFetch({ default: { initialUnitsPerMinute: 600_000, maxPause: 5 } });
const url = server.origin;
for (let i = 0; i < 4; i++) await (await limited(`${url}/p?token=s3cret${i}`)).text();
limited.close();
await server.close();

const limiter = new AdaptiveRateLimiter({ name: 'billing', initialUnitsPerMinute: 60, queueLimit: 0 });
limiter.tryAcquire();
await limiter.acquire().catch((error) => {
  if (!(error instanceof RateLimitRejectedError)) throw error;
});
limiter.close();
// A name with a password and a query (as a careless config has it): masked in the lines.
const careless = new AdaptiveRateLimiter({
  name: 'https://u:s3cretpw@x.example.com/?key=s3cretkey',
  queueLimit: 0,
});
careless.setRate(60);
careless.tryAcquire();
await careless.acquire().catch(() => undefined);
careless.close();
console.log(`done ${server.origin}`);
