import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { cleanups, serve } from './helpers/interceptor-fixtures.js';

// A credential is sent without the white space around it (fetch's Headers strips it, and a server
// reads a header's value without it): one token written with a trailing space in one place and
// without in another is one customer's quota, and one partition.

describe('a credential header with white space around its value', () => {
  it("is the same partition as without: its Retry-After pauses the other spelling's requests", async () => {
    const server = await serve({
      respond: (_req, res) => {
        res.writeHead(429, { 'retry-after': '600' }).end('token exhausted');
        return true;
      },
    });
    const f = rateLimitedFetch({ clock: new ManualClock(), maxAttempts: 1 });
    cleanups.push(() => f.close());
    const call = (headers: HeadersInit) =>
      f(`${server.origin}/x`, { headers }).then(
        (r) => r.status,
        (e: unknown) => (e instanceof Error ? e.name : e),
      );
    expect(await call({ authorization: 'Bearer customer-a ' })).toBe(429);
    // Before: a second partition for the same token, unpaused: sent (a second 429).
    expect(await call({ authorization: 'Bearer customer-a' })).toBe('RateLimitRejectedError');
    expect(await call(new Headers({ authorization: '\tBearer customer-a' }))).toBe('RateLimitRejectedError');
    expect(await call([['x-api-key', 'k1 ']])).toBe(429); // another credential: its own partition
    expect(await call({ 'X-Api-Key': ' k1' })).toBe('RateLimitRejectedError');
    expect(server.received.map((r) => r.headers.authorization ?? r.headers['x-api-key'])).toEqual([
      'Bearer customer-a',
      'k1',
    ]);
  });
});
