import { HttpResponse, http } from 'msw';
import { setupServer } from 'msw/node';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { ConfigError, RateLimitRejectedError } from '../src/errors.js';
import { type RateLimitedFetch, type RateLimitedFetchOptions, rateLimitedFetch } from '../src/http/fetch.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { until } from './helpers/rate-limited-server.js';

// rateLimitedFetch around globalThis.fetch, which msw intercepts: the API is a set of handlers.

const API = 'https://api.example.com';
const OTHER = 'https://other.example.com';
/** Limits that never bind: tests that count requests must not wait in real time. */
const NEVER_BINDS = { initialUnitsPerMinute: 6_000_000, minUnitsPerMinute: 6_000_000 };

/** What the mocked API received. */
let received: { method: string; path: string; body: string }[] = [];
/** Answers the mocked API gives, in order; a plain 200 when none is left. */
let script: (() => Response)[] = [];

const mock = setupServer(
  http.all(`${API}/*`, async ({ request }) => {
    const url = new URL(request.url);
    received.push({ method: request.method, path: url.pathname + url.search, body: await request.text() });
    return script.shift()?.() ?? HttpResponse.text(`ok ${request.method} ${url.pathname}`);
  }),
  http.all(`${OTHER}/*`, () => HttpResponse.text('other')),
);

const throttled =
  (retryAfter = '0') =>
  () =>
    HttpResponse.text('slow down', { status: 429, headers: { 'retry-after': retryAfter } });

beforeAll(() =>
  mock.listen({
    onUnhandledRequest: (request, print) => {
      if (!request.url.startsWith('data:')) print.error();
    },
  }),
);
afterAll(() => mock.close());

const wrappers: RateLimitedFetch[] = [];
afterEach(() => {
  for (const w of wrappers.splice(0)) w.close();
  received = [];
  script = [];
  mock.resetHandlers();
});

function wrap(options: RateLimitedFetchOptions = {}): RateLimitedFetch {
  const wrapped = rateLimitedFetch(options);
  wrappers.push(wrapped);
  return wrapped;
}

/** The registry's limiter for the API, with a spy on its `acquire`. */
function spyOnAcquire(registry: RateLimiterRegistry) {
  const limiter = registry.limiterFor(API);
  if (limiter === undefined) throw new Error('no limiter for the API');
  return { limiter, acquire: vi.spyOn(limiter, 'acquire') };
}

describe('rateLimitedFetch', () => {
  it('retries a 429 through the limiter and returns the success', async () => {
    script = [throttled(), throttled()];
    const f = wrap({ default: NEVER_BINDS });

    const response = await f(`${API}/items`);

    expect(response.status).toBe(200);
    expect(await response.text()).toBe('ok GET /items');
    expect(received).toHaveLength(3);
    expect(f.registry.get(API)?.snapshot().throttles).toBe(2);
  });

  it('returns the last 429 itself after maxAttempts', async () => {
    script = Array.from({ length: 10 }, () => throttled());
    const f = wrap({ default: NEVER_BINDS });

    const response = await f(`${API}/`);

    expect(response.status).toBe(429);
    expect(await response.text()).toBe('slow down');
    expect(received).toHaveLength(4);
  });

  it('pauses the origin for Retry-After and cuts the rate, leaving other origins alone', async () => {
    script = [throttled('30')];
    const clock = new ManualClock();
    const f = wrap({ clock, maxAttempts: 1 });

    expect((await f(`${API}/`)).status).toBe(429);
    expect((await f(`${OTHER}/`)).status).toBe(200);

    expect(f.registry.get(API)?.snapshot()).toMatchObject({ cuts: 1, pausedUntil: clock.now() + 30_000 });
    expect(f.registry.get(OTHER)?.snapshot()).toMatchObject({ cuts: 0, pausedUntil: undefined });
  });

  it('sends the retry only after the pause', async () => {
    script = [throttled('30')];
    const clock = new ManualClock();
    const f = wrap({ clock });

    const pending = f(`${API}/later`);
    await until(() => f.registry.get(API)?.snapshot().queued === 1, 'the retry to queue');
    expect(received).toHaveLength(1);
    await until(() => {
      clock.advance(1_000);
      return received.length === 2;
    }, 'the retry');

    expect(clock.now()).toBeGreaterThanOrEqual(30_000);
    expect((await pending).status).toBe(200);
    expect(received).toHaveLength(2);
  });

  it.each([
    ['a string', () => '{"a":1}'],
    ['a Uint8Array', () => new TextEncoder().encode('{"a":1}')],
    ['a Blob', () => new Blob(['{"a":1}'])],
    [
      'a ReadableStream',
      () =>
        new ReadableStream({
          start(c) {
            c.enqueue(new TextEncoder().encode('{"a"'));
            c.enqueue(new TextEncoder().encode(':1}'));
            c.close();
          },
        }),
    ],
  ])('retries a POST with %s body intact', async (_name, body) => {
    script = [throttled()];
    const f = wrap({ default: NEVER_BINDS });

    const response = await f(`${API}/json`, { method: 'POST', body: body(), duplex: 'half' } as RequestInit);

    expect(response.status).toBe(200);
    expect(received.map((r) => r.body)).toEqual(['{"a":1}', '{"a":1}']);
  });

  it('clones a Request body for each attempt', async () => {
    script = [throttled()];
    const f = wrap({ default: NEVER_BINDS });
    const request = new Request(`${API}/req`, { method: 'PUT', body: 'payload' });

    expect((await f(request)).status).toBe(200);
    expect(received).toEqual([
      { method: 'PUT', path: '/req', body: 'payload' },
      { method: 'PUT', path: '/req', body: 'payload' },
    ]);
  });

  it('sends a body fetch turns into a string (a number, a URL, an array) as fetch does, on every attempt', async () => {
    const f = wrap({ default: NEVER_BINDS });
    const bodies = [42, new URL('https://x.example/p?q=1'), ['a', 'b']];
    for (const body of bodies) {
      script = [throttled()];
      expect((await f(`${API}/body`, { method: 'POST', body: body as unknown as BodyInit })).status).toBe(
        200,
      );
    }
    const sent = ['42', 'https://x.example/p?q=1', 'a,b'];
    expect(received.map((r) => r.body)).toEqual(sent.flatMap((b) => [b, b]));
  });

  it('hands over the 429 for a stream body longer than maxReplayBodyBytes', async () => {
    script = [throttled()];
    const f = wrap({ default: NEVER_BINDS, maxReplayBodyBytes: 4 });
    const body = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode('longer than four'));
        c.close();
      },
    });

    const response = await f(`${API}/big`, { method: 'POST', body, duplex: 'half' } as RequestInit);

    expect(response.status).toBe(429);
    expect(received.map((r) => r.body)).toEqual(['longer than four']);
  });

  it("rejects at once with the signal's reason when aborted while waiting, returning its units", async () => {
    script = [throttled('600')];
    const f = wrap({ clock: new ManualClock(), maxAttempts: 1, default: { maxWait: 3_600_000 } });
    await f(`${API}/`);
    const abort = new AbortController();

    const pending = f(`${API}/waiting`, { signal: abort.signal });
    await until(() => f.registry.get(API)?.snapshot().queued === 1, 'the request to queue');
    abort.abort();

    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    expect(f.registry.get(API)?.snapshot().queued).toBe(0);
    expect(received).toHaveLength(1);
  });

  it("behind a registry passed in, makes no signal of its own for a wait, and a caller's abort rejects only its call", async () => {
    // Regression: each request behind a registry of yours made an AbortController for the
    // adapter's close (about 20 us a request on Node 20). Its waits are now cancelled through the
    // limiter's line, as the interceptor's are.
    script = [throttled('600')];
    const registry = new RateLimiterRegistry({ clock: new ManualClock(), default: { maxWait: 3_600_000 } });
    const f = wrap({ registry, maxAttempts: 1 });
    await f(`${API}/`);
    const { limiter, acquire } = spyOnAcquire(registry);
    const abort = new AbortController();

    const mine = f(`${API}/mine`, { signal: abort.signal });
    const other = f(`${API}/other`).catch((error: unknown) => error);
    await until(() => limiter.snapshot().queued === 2, 'both requests to queue');
    expect(acquire.mock.calls.map(([, options]) => options?.signal)).toEqual([undefined, undefined]);
    abort.abort();

    await expect(mine).rejects.toBe(abort.signal.reason);
    expect(limiter.snapshot().queued).toBe(1);
    f.close();
    expect(await other).toMatchObject({ reason: 'closed' });
    expect(limiter.snapshot()).toMatchObject({ queued: 0, closed: false });
    expect(received).toHaveLength(1);
    registry.close();
  });

  it("behind a registry passed in with maxConcurrent, makes no signal of its own for a slot's wait, and a caller's abort rejects only its call", async () => {
    // Regression: behind a maxConcurrent gate each request made an AbortController for the
    // adapter's close, and gave its signal to the limiter. The gate's waits are now cancelled
    // through the request's FetchWait, as the limiter's line's are.
    const registry = new RateLimiterRegistry({
      clock: new ManualClock(),
      default: { ...NEVER_BINDS, maxConcurrent: 1, maxWait: 3_600_000 },
    });
    let answer: (response: Response) => void = () => {};
    const sent: string[] = [];
    const stub: typeof fetch = (input) => {
      sent.push(String(input));
      return new Promise<Response>((resolve) => {
        answer = resolve;
      });
    };
    const f = wrap({ registry, fetch: stub });
    const first = f(`${API}/first`);
    const { acquire } = spyOnAcquire(registry);
    const abort = new AbortController();

    // Both wait for the one slot, which the first request holds.
    const mine = f(`${API}/mine`, { signal: abort.signal });
    const other = f(`${API}/other`).catch((error: unknown) => error);
    abort.abort();

    await expect(mine).rejects.toBe(abort.signal.reason);
    f.close();
    expect(await other).toMatchObject({ reason: 'closed' });
    answer(new Response('ok'));
    expect((await first).status).toBe(200);
    expect(sent).toEqual([`${API}/first`]);
    // Only the first request took units, given no signal of the wrapper's.
    expect(acquire.mock.calls.map(([, options]) => options?.signal)).toEqual([undefined]);
    registry.close();
  });

  it('rejects with RateLimitRejectedError when the limiter refuses', async () => {
    script = [throttled('600')];
    const f = wrap({ clock: new ManualClock(), maxAttempts: 1 });
    await f(`${API}/`);

    await expect(f(`${API}/`)).rejects.toBeInstanceOf(RateLimitRejectedError);
    expect(received).toHaveLength(1);
  });

  it('reads Headers in classify, units and responseUnits', async () => {
    script = [() => HttpResponse.text('nope', { status: 403, headers: { 'x-ratelimit-remaining': '0' } })];
    const units = vi.fn(() => 2);
    const f = wrap({
      default: NEVER_BINDS,
      units,
      classify: (status, headers) =>
        status === 403 && headers['x-ratelimit-remaining'] === '0' ? 'throttled' : undefined,
      responseUnits: () => 1,
    });

    const response = await f(`${API}/q?x=1`, { method: 'POST', headers: { 'X-Cost': '2' }, body: 'b' });

    expect(response.status).toBe(200);
    expect(units).toHaveBeenCalledWith({
      origin: API,
      method: 'POST',
      path: '/q?x=1',
      headers: expect.objectContaining({ 'x-cost': '2' }),
      body: 'b',
    });
    expect(received).toHaveLength(2);
  });

  it('passes through origins without a limiter and URLs that are not http(s)', async () => {
    const f = wrap({ default: false, limiters: { api: { origins: [API], ...NEVER_BINDS } } });

    expect(await (await f(`${OTHER}/`)).text()).toBe('other');
    expect(await (await f('data:text/plain,hello')).text()).toBe('hello');
    expect(f.registry.names()).toEqual(['api']);
  });

  it('wraps the fetch it is given', async () => {
    const inner = vi.fn(async (_input: RequestInfo | URL, _init?: RequestInit) => new Response('inner'));
    const f = wrap({ fetch: inner as typeof fetch });

    expect(await (await f(`${API}/x`, { method: 'DELETE' })).text()).toBe('inner');
    expect(inner).toHaveBeenCalledWith(`${API}/x`, { method: 'DELETE' });
  });

  it('validates its options when called', () => {
    expect(() => rateLimitedFetch({ fetch: 'no' as never })).toThrow(ConfigError);
    expect(() => rateLimitedFetch({ fetch: 'no' as never })).toThrow(/fetch.*"no"/);
    expect(() => rateLimitedFetch({ maxAttempts: 1.5 })).toThrow(/maxAttempts.*1\.5/);
  });
});
