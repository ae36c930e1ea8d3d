import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';

// Node's own fetch names the whole URL in its errors: a password in it, or a query's token, went
// to whoever prints the error (console.error, a log line). The wrapper masks them as every error
// of the library is masked, and keeps the error's kind (a TypeError, its message's words).

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a rejection');
}

function expectNoSecret(error: Error): void {
  for (const printed of [error.message, String(error.stack), inspect(error), JSON.stringify(error)]) {
    expect(printed).not.toContain('hunter2');
    expect(printed).not.toContain('tok-abc');
  }
}

describe("the fetch wrapper and Node's fetch errors that name the URL", () => {
  it.each([
    ['a limited origin', { default: NEVER_BINDS }],
    ['an origin passed through (default: false)', { default: false as const }],
  ])('a URL with credentials: a TypeError whose URL is masked: %s', async (_, options) => {
    const server = await serve();
    const limited = rateLimitedFetch({ fetch: globalThis.fetch, ...options });
    const url = server.origin.replace('http://', 'http://user:hunter2@');
    const error = await rejection(limited(`${url}/x?token=tok-abc`));
    expect(error).toBeInstanceOf(TypeError);
    expect(error.name).toBe('TypeError');
    expect(error.message).toContain('Request cannot be constructed from a URL that includes credentials');
    expect(error.message).toContain(`http://***@${server.origin.slice('http://'.length)}/x?token=***`);
    expectNoSecret(error);
    expect(server.requests).toBe(0);
    limited.close();
  });

  it("a URL fetch cannot parse: a TypeError with its cause's kind and code, the URL masked", async () => {
    const limited = rateLimitedFetch({ fetch: globalThis.fetch, default: NEVER_BINDS });
    const error = await rejection(limited('http://user:hunter2@exa mple.com/?token=tok-abc'));
    expect(error).toBeInstanceOf(TypeError);
    expect(error.message).toContain('Failed to parse URL from http://***@exa mple.com/?token=***');
    expect(error.cause).toBeInstanceOf(TypeError);
    expect(error.cause).toMatchObject({ code: 'ERR_INVALID_URL' });
    expectNoSecret(error);
    limited.close();
  });

  // A reason whose text reads as a URL with a query, and a TypeError naming the request's own
  // URL (what fetch's URL errors look like): the caller's object either way.
  const reasons: [string, (url: string) => unknown][] = [
    [
      'an Error with a URL and a query',
      () => new Error('gave up: https://api.example.com/v1?page=2&key=abc'),
    ],
    ['a TypeError naming the URL', (url) => new TypeError(`timed out: ${url}`)],
  ];
  describe.each([
    ['a limited origin', { default: NEVER_BINDS }],
    ['an origin passed through (default: false)', { default: false as const }],
  ])("the caller's abort reason is rethrown as the same object: %s", (_, options) => {
    it.each(reasons)('%s, aborted while the server holds the request', async (_, reasonFor) => {
      // The server never answers: the request is in flight when it is aborted.
      const server = await serve({ respond: () => true });
      const limited = rateLimitedFetch({ fetch: globalThis.fetch, ...options });
      const url = `${server.origin}/x?token=tok-abc`;
      const controller = new AbortController();
      const pending = rejection(limited(url, { signal: controller.signal }));
      await server.waitForRequests(1);
      const reason = reasonFor(url);
      controller.abort(reason);
      expect(await pending).toBe(reason);
      limited.close();
    });

    it.each(reasons)('%s, aborted before the call', async (_, reasonFor) => {
      const server = await serve();
      const limited = rateLimitedFetch({ fetch: globalThis.fetch, ...options });
      const url = `${server.origin}/x?token=tok-abc`;
      const reason = reasonFor(url);
      expect(await rejection(limited(url, { signal: AbortSignal.abort(reason) }))).toBe(reason);
      expect(server.requests).toBe(0);
      limited.close();
    });
  });

  it("another fetch's error is rethrown as the same object, whatever its text (its private fields kept)", async () => {
    class UpstreamError extends Error {
      readonly #quota = 7;
      get quota(): number {
        return this.#quota;
      }
    }
    const thrown = new UpstreamError('no quota left for key=abc&page=2 at http://user:pw@proxy/');
    for (const options of [{ default: NEVER_BINDS }, { default: false as const }]) {
      const limited = rateLimitedFetch({ fetch: () => Promise.reject(thrown), ...options });
      const error = await rejection(limited('http://127.0.0.1:9/x'));
      expect(error).toBe(thrown);
      expect((error as UpstreamError).quota).toBe(7);
      limited.close();
    }
  });

  it("an error with nothing to mask is the fetch's own (the same object)", async () => {
    const thrown = new TypeError('fetch failed');
    const limited = rateLimitedFetch({ fetch: () => Promise.reject(thrown), default: NEVER_BINDS });
    expect(await rejection(limited('http://127.0.0.1:9/x'))).toBe(thrown);
    limited.close();
  });
});
