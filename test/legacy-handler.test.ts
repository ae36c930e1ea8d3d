import { Agent, type Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { AdaptiveRateLimitInterceptor } from '../src/http/interceptor.js';
import type { InterceptorOptions } from '../src/http/options.js';
import { cleanups, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// Node's built-in fetch passes its dispatcher an old-style handler (onConnect, onHeaders, onData,
// onComplete, onError). undici 7's compose converts it before each interceptor; undici 8's does
// not. These tests hand it to the interceptor unconverted, as undici 8 does, on any undici: the
// interceptor's dispatch is called directly by Node's fetch, with an Agent's dispatch inside it.

/** A dispatcher whose dispatch is the interceptor's, called with whatever handler fetch passes. */
function direct(options: InterceptorOptions | AdaptiveRateLimitInterceptor = {}): Dispatcher {
  const agent = new Agent();
  cleanups.push(() => agent.close());
  const rl = typeof options === 'function' ? options : limit(options);
  const dispatch = rl((opts, handler) => agent.dispatch(opts, handler));
  return { dispatch } as unknown as Dispatcher;
}

const fetchWith = (dispatcher: Dispatcher, url: string, init: RequestInit = {}) =>
  fetch(url, { ...init, dispatcher } as RequestInit);

describe('an old-style handler (Node fetch, undici 8 compose)', () => {
  it('gets its response: status, headers and body', async () => {
    const server = await serve({ headers: { 'x-served-by': 'test' } });

    const response = await fetchWith(direct({ default: NEVER_BINDS }), `${server.origin}/hello`);

    expect(response.status).toBe(200);
    expect(response.headers.get('x-served-by')).toBe('test');
    expect(await response.text()).toBe('ok GET /hello');
  });

  it('keeps each value of a repeated header (set-cookie) apart', async () => {
    const server = await serve({
      respond: (_req, res) => {
        res.setHeader('set-cookie', ['a=1', 'b=2']);
        res.writeHead(200).end('two cookies');
        return true;
      },
    });

    const response = await fetchWith(direct({ default: NEVER_BINDS }), `${server.origin}/`);

    expect(response.headers.getSetCookie()).toEqual(['a=1', 'b=2']);
    expect(await response.text()).toBe('two cookies');
  });

  it('retries a 429 and a POST body with it', async () => {
    let left = 1;
    const server = await serve({
      respond: (_req, res) => {
        if (left-- <= 0) return false;
        res.writeHead(429, { 'retry-after': '0' }).end('slow down');
        return true;
      },
    });

    const response = await fetchWith(direct({ default: NEVER_BINDS }), `${server.origin}/orders`, {
      method: 'POST',
      body: '{"id":1}',
    });

    expect(response.status).toBe(200);
    expect(server.received.map((r) => [r.status, r.body])).toEqual([
      [429, '{"id":1}'],
      [200, '{"id":1}'],
    ]);
  });

  it('rejects a fetch aborted while it waits, before the server sees it (abort through onConnect)', async () => {
    const server = await serve({ capacity: 1, retryAfter: '600' });
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1, default: { maxWait: 3_600_000 } });
    const dispatcher = direct(rl);
    await (await fetchWith(dispatcher, `${server.origin}/`)).text();
    expect((await fetchWith(dispatcher, `${server.origin}/`)).status).toBe(429); // paused for 10 minutes
    const limiter = rl.registry.get(server.origin);
    const abort = new AbortController();

    const pending = fetchWith(dispatcher, `${server.origin}/waiting`, { signal: abort.signal });
    await until(() => limiter?.snapshot().queued === 1, 'the request to queue');
    abort.abort();

    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    await until(() => limiter?.snapshot().queued === 0, 'the reservation to be returned');
    expect(server.requests).toBe(2);
  });

  it('passes an origin without a limiter through (default: false)', async () => {
    const server = await serve();

    const response = await fetchWith(direct({ default: false }), `${server.origin}/`);

    expect(response.status).toBe(200);
    expect(server.requests).toBe(1);
  });

  it('fails at once, with a clear error, for a handler of neither API', () => {
    const dispatch = limit()(() => true);

    expect(() => dispatch({ origin: 'http://127.0.0.1:1', path: '/', method: 'GET' }, {})).toThrow(
      expect.objectContaining({
        code: 'ERR_INVALID_HANDLER',
        message: expect.stringContaining('onRequestStart'),
      }),
    );
  });
});
