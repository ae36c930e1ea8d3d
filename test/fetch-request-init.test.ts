import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { cleanups, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';

// fetch(request, init) reads `init.signal` when init has one, `null` included: `{ signal: null }`
// drops the Request's own signal. The wrapper read `init.signal ?? request.signal`, and so
// refused, at once, a call that fetch itself sends.

function wrapper() {
  const f = rateLimitedFetch({ fetch: globalThis.fetch, clock: new ManualClock(), default: NEVER_BINDS });
  cleanups.push(() => f.close());
  return f;
}

describe("rateLimitedFetch: a Request's signal and init's", () => {
  it("init { signal: null } drops the Request's aborted signal, as fetch does: the call is sent", async () => {
    const server = await serve();
    const f = wrapper();
    const request = new Request(`${server.origin}/x`, { signal: AbortSignal.abort(new Error('old')) });

    const response = await f(request, { signal: null });

    expect(response.status).toBe(200);
    expect(await response.text()).toBe('ok GET /x');
    expect(server.requests).toBe(1);
  });

  it("init's signal replaces the Request's: its abort rejects the call with its reason", async () => {
    const server = await serve();
    const f = wrapper();
    const reason = new Error('init aborted');
    const request = new Request(`${server.origin}/x`, { signal: new AbortController().signal });

    await expect(f(request, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(server.requests).toBe(0);
  });
});
