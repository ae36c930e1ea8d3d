import type { ServerResponse } from 'node:http';
import { Agent, type Dispatcher, interceptors, request, fetch as undiciFetch } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { dispatcherClosed, errorOutcome, neverSent } from '../src/http/classify.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { holdingServer, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// Which errors say a request never reached the server: an LLM call's token draws are given back
// for those alone (a reset may come after the request was sent, and the API may have done the work).

const coded = (code: string) => Object.assign(new Error(code), { code });

describe('neverSent', () => {
  it.each([
    'ECONNREFUSED',
    'ENOTFOUND',
    'EAI_AGAIN',
    'EHOSTUNREACH',
    'ENETUNREACH',
    'UND_ERR_CONNECT_TIMEOUT',
  ])('a connection that was never made: %s', (code) => {
    expect(neverSent(coded(code))).toBe(true);
    // fetch's own error wraps it
    expect(neverSent(new TypeError('fetch failed', { cause: coded(code) }))).toBe(true);
  });

  it.each([
    'ECONNRESET',
    'EPIPE',
    'UND_ERR_SOCKET',
    'UND_ERR_HEADERS_TIMEOUT',
    'UND_ERR_ABORTED',
    'UND_ERR_DESTROYED',
  ])('an error after the connection may come after the request was sent: %s', (code) => {
    expect(neverSent(coded(code))).toBe(false);
    expect(neverSent(new TypeError('fetch failed', { cause: coded(code) }))).toBe(false);
  });

  it('an AggregateError of the addresses tried: only when every one was never reached', () => {
    const all = new AggregateError([coded('ECONNREFUSED'), coded('ENETUNREACH')], 'connect');
    expect(neverSent(all)).toBe(true);
    const mixed = new AggregateError([coded('ECONNREFUSED'), coded('ECONNRESET')], 'connect');
    expect(neverSent(mixed)).toBe(false);
    expect(neverSent(new AggregateError([], 'none'))).toBe(false);
  });

  it('no code, not an object, or a cause loop: false', () => {
    expect(neverSent(new Error('boom'))).toBe(false);
    expect(neverSent('ECONNREFUSED')).toBe(false);
    expect(neverSent(undefined)).toBe(false);
    const looped: Error & { cause?: unknown } = new Error('a');
    looped.cause = looped;
    expect(neverSent(looped)).toBe(false);
  });

  it('errorOutcome: failed with no answer, marked not sent only when it was not', () => {
    expect(errorOutcome(coded('ECONNREFUSED'))).toEqual({ kind: 'failed', notSent: true });
    expect(errorOutcome(coded('ECONNRESET'))).toEqual({ kind: 'failed', noAnswer: true });
    // A closed dispatcher: not sent only for an attempt undici never started.
    expect(errorOutcome(coded('UND_ERR_CLOSED'), true)).toEqual({ kind: 'failed', notSent: true });
    expect(errorOutcome(coded('UND_ERR_CLOSED'))).toEqual({ kind: 'failed', noAnswer: true });
    expect(errorOutcome(coded('ECONNRESET'), true)).toEqual({ kind: 'failed', noAnswer: true });
  });
});

describe('dispatcherClosed', () => {
  it.each(['UND_ERR_CLOSED', 'UND_ERR_DESTROYED'])('an undici dispatcher closed or destroyed: %s', (code) => {
    expect(dispatcherClosed(coded(code))).toBe(true);
    expect(dispatcherClosed(new TypeError('fetch failed', { cause: coded(code) }))).toBe(true);
  });

  it.each(['ECONNREFUSED', 'UND_ERR_SOCKET', 'UND_ERR_ABORTED'])('any other error: %s', (code) => {
    expect(dispatcherClosed(coded(code))).toBe(false);
    expect(dispatcherClosed(new TypeError('fetch failed', { cause: coded(code) }))).toBe(false);
  });
});

/**
 * Closes `agent` while the request `slow` is held at the server (so the Agent stays closing), with
 * a `failed` listener on `limiter()`: `before` runs before the close, `during` after it, then the
 * held request ends. Returns what `during` settled with and the `failed` events told.
 */
async function closeWhileHeld(o: {
  agent: Agent;
  held: ServerResponse[];
  slow: Promise<unknown>;
  limiter: () => AdaptiveRateLimiter | undefined;
  before?: () => Promise<void>;
  during: () => Promise<unknown>;
}): Promise<{ error: unknown; failed: number }> {
  await until(() => o.held.length === 1, 'the request in flight');
  const failed = vi.fn();
  o.limiter()?.on('failed', failed);
  await o.before?.();
  const closed = o.agent.close();
  const error = await o.during().catch((e: unknown) => e);
  o.held[0]?.end('done');
  await o.slow;
  await closed;
  return { error, failed: failed.mock.calls.length };
}

const codeOf = (error: unknown) => (error as { code?: string }).code;

describe('a request to an Agent that is closing', () => {
  // `close()` waits for the requests in flight (one held at the server here); a request that comes
  // meanwhile gets ClientClosedError (UND_ERR_CLOSED) from undici's dispatch, before any write.
  // (Once closed, the Agent is destroyed, and UND_ERR_DESTROYED tells nothing: see above.)
  it('interceptor: one undici never started fails with UND_ERR_CLOSED and tells no failed answer (never sent)', async () => {
    const { server, held } = await holdingServer();
    const rl = limit();
    const agent = new Agent();
    const composed = agent.compose(rl) as Dispatcher;
    const { error, failed } = await closeWhileHeld({
      agent,
      held,
      slow: request(`${server.origin}/slow`, { dispatcher: composed }).then((r) => r.body.text()),
      limiter: () => rl.registry.get(server.origin),
      during: () => request(`${server.origin}/2`, { dispatcher: composed }),
    });
    expect({ code: codeOf(error), failed }).toEqual({ code: 'UND_ERR_CLOSED', failed: 0 });
  });

  it("interceptor: a retry (undici's retry interceptor below it) refused after the first try was written tells a failed answer", async () => {
    const held: ServerResponse[] = [];
    const server = await serve({
      respond: (req, res) => {
        if (req.url === '/slow') held.push(res);
        else if (req.url === '/reset')
          res.socket?.destroy(); // it arrived; its answer never comes
        else return false;
        return true;
      },
    });
    const rl = limit();
    const agent = new Agent();
    const composed = agent.compose(interceptors.retry({ minTimeout: 200, maxRetries: 1 }), rl) as Dispatcher;
    let reset: Promise<unknown> | undefined;
    const { error, failed } = await closeWhileHeld({
      agent,
      held,
      slow: request(`${server.origin}/slow`, { dispatcher: composed }).then((r) => r.body.text()),
      limiter: () => rl.registry.get(server.origin),
      before: async () => {
        const started = server.requests;
        reset = request(`${server.origin}/reset`, { dispatcher: composed });
        reset.catch(() => undefined);
        await until(() => server.requests === started + 1, 'the first try to reach the server');
      },
      // closing: undici's retry comes now and gets UND_ERR_CLOSED
      during: () => reset as Promise<unknown>,
    });
    expect({ code: codeOf(error), failed }).toEqual({ code: 'UND_ERR_CLOSED', failed: 1 });
  });

  it('fetch wrapper: it cannot tell (a redirect is refused the same way after the first was written): a failed answer', async () => {
    const { server, held } = await holdingServer();
    const agent = new Agent();
    const f = rateLimitedFetch({
      fetch: (input, init) =>
        undiciFetch(input as string, { ...(init as object), dispatcher: agent }) as never,
    });
    const { error, failed } = await closeWhileHeld({
      agent,
      held,
      slow: f(`${server.origin}/slow`).then((r) => r.text()),
      limiter: () => f.registry.get(server.origin),
      during: () => f(`${server.origin}/2`),
    });
    f.close();
    expect({ cause: codeOf((error as { cause?: unknown }).cause), failed }).toEqual({
      cause: 'UND_ERR_CLOSED',
      failed: 1,
    });
  });
});
