import * as undici from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { type RateLimitedFetch, rateLimitedFetch } from '../src/http/fetch.js';
import { RateLimitedServer } from './helpers/rate-limited-server.js';

// A `Request` that is not of the global class: the `undici` package's own `Request` (with its own
// `fetch`, as a user who installs undici 7/8 on Node 20 gets), a polyfill's, another realm's.
// Regression: such a request was read as the URL "[object Request]", did not parse, and passed
// through the wrapper unmetered: its 429 came back at once, no retry, no cut, no pause.

const servers: RateLimitedServer[] = [];
const wrappers: RateLimitedFetch[] = [];
afterEach(async () => {
  for (const w of wrappers.splice(0)) w.close();
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function setUp(): Promise<{ server: RateLimitedServer; fetch: RateLimitedFetch }> {
  // The first request is answered 429 with Retry-After: 0, the others 200.
  let first = true;
  const server = await RateLimitedServer.start({
    respond: (_req, res) => {
      if (!first) return false;
      first = false;
      res.writeHead(429, { 'retry-after': '0' }).end('slow down');
      return true;
    },
  });
  servers.push(server);
  const fetch = rateLimitedFetch({
    fetch: undici.fetch as unknown as typeof globalThis.fetch,
    default: { initialUnitsPerMinute: 6_000_000, minUnitsPerMinute: 1 },
  });
  wrappers.push(fetch);
  return { server, fetch };
}

describe('rateLimitedFetch with a Request of another class (undici package, polyfills)', () => {
  it('is not the global Request here (the case under test)', () => {
    expect(undici.Request).not.toBe(globalThis.Request);
  });

  it('meters it, feeds its 429 to its origin limiter and sends it again with its body', async () => {
    const { server, fetch } = await setUp();
    const request = new undici.Request(`${server.origin}/items`, { method: 'POST', body: 'hello' });
    const response = await fetch(request as unknown as Request);
    expect(response.status).toBe(200);
    expect(await response.text()).toBe('ok POST /items');
    expect(server.received.map((r) => [r.status, r.method, r.body])).toEqual([
      [429, 'POST', 'hello'],
      [200, 'POST', 'hello'],
    ]);
    expect(fetch.registry.limiterFor(server.origin)?.snapshot().throttles).toBe(1);
  });
});
