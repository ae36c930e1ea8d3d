import { Agent, request, fetch as undiciFetch } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { CountingLimiter } from './helpers/counting-limiter.js';
import { advanceUntil, cleanups, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';
import { countingServer, getText, limitedAgent } from './helpers/socket-counting-server.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

// Regression: the retry of a 429 whose permit was granted at once (`Retry-After: 0`) was
// dispatched from the grant's microtask, before undici had given the 429's keep-alive socket back
// to its pool (undici frees it on the next turn of the event loop, `setImmediate`): the retry
// always opened a second connection to the server, and the first stayed idle. A retry granted
// later (`Retry-After: 1`) reused the one socket. Real node:http server on 127.0.0.1, real undici
// Agent, a ManualClock for the limiter; no duration is asserted.

failOnUnhandledRejections();

/**
 * A keep-alive node:http server that answers its first request with a 429 (`Retry-After:
 * retryAfter`, a small body) and every later one with a 200, counting the connections it accepts.
 */
function throttleOnce(retryAfter: string) {
  return countingServer((_req, res, n) => {
    if (n === 1) {
      res.writeHead(429, { 'retry-after': retryAfter, 'content-type': 'text/plain' }).end('slow down');
    } else res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
  });
}

/** Two permits granted (the 429's and its retry's), both told their answer; nobody waiting. */
function expectSettled(limiter: CountingLimiter) {
  expect({ granted: limiter.granted, open: limiter.open }).toEqual({ granted: 2, open: 0 });
  const snapshot = limiter.snapshot();
  expect(snapshot.queued).toBe(0);
  expect(snapshot.queuedUnits).toBe(0);
}

describe('the retry of a 429 granted at once reuses its keep-alive socket', () => {
  it('Retry-After: 0 through undici request: the retry goes over the 429 socket, one connection in all', async () => {
    const server = await throttleOnce('0');
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock());

    const answer = await getText(dispatcher, `${server.origin}/`);
    expect(answer).toEqual({ status: 200, body: 'ok' });
    expect(server.requests).toBe(2);
    expect(server.connections).toBe(1);
    expectSettled(limiter);
  });

  it('Retry-After: 0 through undici request with connections: 1: the retry takes the one socket', async () => {
    const server = await throttleOnce('0');
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock(), { connections: 1 });

    const answer = await getText(dispatcher, `${server.origin}/`);
    expect(answer).toEqual({ status: 200, body: 'ok' });
    expect(server.requests).toBe(2);
    expect(server.connections).toBe(1);
    expectSettled(limiter);
  });

  it("Retry-After: 0 through Node's fetch with the composed dispatcher: one connection in all", async () => {
    const server = await throttleOnce('0');
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock());

    const response = await fetch(`${server.origin}/`, { dispatcher } as RequestInit);
    expect(response.status).toBe(200);
    expect(await response.text()).toBe('ok');
    expect(server.requests).toBe(2);
    expect(server.connections).toBe(1);
    expectSettled(limiter);
  });

  it('an abort in the turn the retry waits for the socket: nothing more is sent, the caller gets its reason, the books settle', async () => {
    const server = await throttleOnce('0');
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock());
    const abort = new AbortController();
    const reason = new Error('caller gave up');
    // The retry's grant (the second): the abort comes on the next turn, before the retry goes.
    limiter.on('acquired', () => {
      if (limiter.granted === 2) setImmediate(() => abort.abort(reason));
    });

    const error = await request(`${server.origin}/`, { dispatcher, signal: abort.signal }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBe(reason);
    expect(server.requests).toBe(1);
    expectSettled(limiter);
  });

  it('Retry-After: 1 (a retry granted after its pause): still one connection', async () => {
    const server = await throttleOnce('1');
    const clock = new ManualClock();
    const { limiter, dispatcher } = limitedAgent(server.origin, clock);

    const answer = settled(getText(dispatcher, `${server.origin}/`));
    await advanceUntil(clock, () => answer.done, 'the retry to be answered');
    expect(answer.error).toBeUndefined();
    expect(answer.value).toEqual({ status: 200, body: 'ok' });
    expect(server.requests).toBe(2);
    expect(server.connections).toBe(1);
    expectSettled(limiter);
  });
});

describe('the fetch wrapper: the retry of a 429 granted at once reuses its keep-alive socket', () => {
  /** `rateLimitedFetch` over a limiter the test owns, wrapping undici's fetch on an Agent, or Node's own fetch. */
  function limitedFetch(origin: string, over: 'undici' | 'node') {
    const clock = new ManualClock();
    const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
    cleanups.push(() => limiter.close());
    let base: typeof fetch | undefined;
    if (over === 'undici') {
      const agent = new Agent();
      cleanups.push(() => agent.close());
      base = ((input: string, init?: object) =>
        undiciFetch(input, { ...init, dispatcher: agent })) as unknown as typeof fetch;
    }
    const f = rateLimitedFetch({
      limiters: { x: { origins: [origin], limiter } },
      default: false,
      clock,
      ...(base === undefined ? {} : { fetch: base }),
    });
    cleanups.push(() => f.close());
    return { limiter, f };
  }

  it.each(['undici', 'node'] as const)(
    "Retry-After: 0 through rateLimitedFetch over %s's fetch: one connection in all",
    async (over) => {
      const server = await throttleOnce('0');
      const { limiter, f } = limitedFetch(server.origin, over);

      const response = await f(`${server.origin}/`);
      expect(response.status).toBe(200);
      expect(await response.text()).toBe('ok');
      expect(server.requests).toBe(2);
      expect(server.connections).toBe(1);
      expectSettled(limiter);
    },
  );
});

describe('an immediate retry under fake timers', () => {
  it('goes out with setImmediate faked after the import (a 429 with Retry-After: 0, then 200)', async () => {
    const realSetTimeout = setTimeout;
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      initialUnitsPerMinute: 6_000_000,
      minUnitsPerMinute: 6_000_000,
    });
    let calls = 0;
    const stub = (async () => {
      calls++;
      return calls === 1
        ? new Response('slow down', { status: 429, headers: { 'retry-after': '0' } })
        : new Response('ok', { status: 200 });
    }) as unknown as typeof fetch;
    const f = rateLimitedFetch({
      limiters: { x: { origins: ['https://api.example'], limiter } },
      default: false,
      clock,
      fetch: stub,
    });
    vi.useFakeTimers({ toFake: ['setImmediate'] });
    try {
      // A real timer bounds the race: with the faked setImmediate the retry never went out.
      const outcome = await Promise.race([
        f('https://api.example/').then((r) => r.status),
        new Promise<string>((resolve) => realSetTimeout(() => resolve('held'), 2_000)),
      ]);
      expect({ outcome, calls }).toEqual({ outcome: 200, calls: 2 });
    } finally {
      vi.runOnlyPendingTimers();
      vi.useRealTimers();
      await f.close();
      await limiter.close();
    }
  });
});

describe('the turn a retry waits', () => {
  /** The fetch wrapper and a limiter on a manual clock, imported afresh (after fake timers, if any). */
  async function freshWrapper(retryAfter: string) {
    vi.resetModules();
    const { ManualClock: Clock } = await import('../src/clock.js');
    const { rateLimitedFetch: wrapper } = await import('../src/http/fetch.js');
    const { AdaptiveRateLimiter: Limiter } = await import('../src/limiter/adaptive.js');
    const clock = new Clock();
    const limiter = new Limiter({ clock, ...NEVER_BINDS });
    let calls = 0;
    const fetch = (async () =>
      ++calls === 1
        ? new Response('slow down', { status: 429, headers: { 'retry-after': retryAfter } })
        : new Response('ok')) as unknown as typeof globalThis.fetch;
    const limited = wrapper({
      limiters: { x: { origins: ['https://api.test'], limiter } },
      default: false,
      clock,
      fetch,
    });
    cleanups.push(
      () => limited.close(),
      () => limiter.close(),
    );
    return { clock, limited, calls: () => calls };
  }

  // A suite that fakes timers before the library loads (Jest's enableGlobally, a setup file):
  // the turn is node:timers' setImmediate, which fake timers leave alone, so no retry is held
  // until the suite runs its timers (a hang fails the test at its timeout).
  it('is not held by fake timers installed before the library loads', { timeout: 10_000 }, async () => {
    vi.useFakeTimers({ toFake: ['setImmediate', 'clearImmediate'] });
    try {
      const now = await freshWrapper('0');
      expect((await now.limited('https://api.test/')).status).toBe(200);
      expect(now.calls()).toBe(2);
      const later = await freshWrapper('1');
      const answer = later.limited('https://api.test/');
      await advanceUntil(later.clock, () => later.calls() === 2, 'the retry sent');
      expect((await answer).status).toBe(200);
    } finally {
      vi.useRealTimers();
      vi.resetModules();
    }
  });

  it("is a setTimeout of the module's load where the runtime has no setImmediate", async () => {
    vi.resetModules();
    vi.doMock('node:timers', () => ({ setImmediate: undefined }));
    try {
      const { untilSocketReturned } = await import('../src/http/attempt.js');
      await expect(untilSocketReturned()).resolves.toBeUndefined();
    } finally {
      vi.doUnmock('node:timers');
      vi.resetModules();
    }
  });
});
