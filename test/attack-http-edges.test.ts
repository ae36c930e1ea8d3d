import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Agent, type Dispatcher, interceptors, request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { type AdaptiveRateLimitInterceptor, runtimeOf } from '../src/http/interceptor.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import { CountingLimiter } from './helpers/counting-limiter.js';
import {
  advanceUntil,
  agentWith,
  cleanups,
  installGlobal,
  keepGlobalDispatcher,
  limit,
  NEVER_BINDS,
} from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

// Attack on three HTTP paths no test drove before: a redirect loop while a held 429 is handed
// back (undici's redirect interceptor on either side of ours, and Node's fetch following
// redirects itself), a keep-alive socket the server closes as the retry of a 429 goes out, and
// `charge()` corrections of an announced bucket (`burst: 'announced'`) racing a retry. Real
// node:http servers on 127.0.0.1, real undici Agents, a ManualClock for the limiters; every
// loop is bounded, no duration is asserted.
//
// The books are read through a limiter we own (`limiters.x.limiter`, a CountingLimiter): `open`
// is the number of permits granted and never settled, units still counted in flight.

failOnUnhandledRejections();

/** One request the scripted server received, answered by the test (or by `auto`). */
interface Pending {
  n: number;
  req: IncomingMessage;
  res: ServerResponse;
  socket: Socket;
  body: string;
}

/**
 * A node:http server on 127.0.0.1 whose every request goes to `auto(p)` (which answers it and
 * returns `true`) or waits in `pending` for the test to answer it. Closed after the test.
 */
async function scripted(auto: (p: Pending) => boolean = () => false) {
  const pending: Pending[] = [];
  const log: string[] = [];
  const sockets = new Set<Socket>();
  let n = 0;
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    try {
      for await (const chunk of req) chunks.push(chunk as Buffer);
    } catch {
      return;
    }
    n++;
    const p: Pending = { n, req, res, socket: req.socket, body: Buffer.concat(chunks).toString() };
    log.push(`${req.method} ${req.url}`);
    if (!auto(p)) pending.push(p);
  });
  server.keepAliveTimeout = 60_000;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    origin,
    pending,
    log,
    get requests() {
      return n;
    },
    /** Sockets the server has open now. */
    get sockets() {
      return sockets.size;
    },
  };
}

/** A limiter we own behind `origin` (named `x`), with an interceptor on it; `default: false`. */
function owned(
  origin: string,
  clock: ManualClock,
  limiterOptions: AdaptiveLimiterOptions = NEVER_BINDS,
  more: { maxConcurrent?: number; headers?: 'standard' | false; maxAttempts?: number } = {},
  adapter: Record<string, unknown> = {},
) {
  const limiter = new CountingLimiter({ clock, ...limiterOptions });
  cleanups.push(() => limiter.close());
  const { maxAttempts, ...route } = more;
  const rl = limit({
    limiters: { x: { origins: [origin], limiter, ...route } },
    default: false,
    clock,
    ...(maxAttempts === undefined ? {} : { maxAttempts }),
    ...adapter,
  });
  return { limiter, rl };
}

function gateOf(rl: AdaptiveRateLimitInterceptor, origin: string) {
  const gate = runtimeOf(rl).route(origin)?.gate;
  return gate === undefined ? undefined : { inFlight: gate.inFlight, waiting: gate.waiting };
}

/** The books of a limiter with nothing left to do: no permit open, nobody waiting. */
function expectSettled(limiter: CountingLimiter, rl?: AdaptiveRateLimitInterceptor, origin?: string) {
  expect(limiter.open).toBe(0);
  expect(limiter.snapshot().queued).toBe(0);
  expect(limiter.snapshot().queuedUnits).toBe(0);
  if (rl !== undefined && origin !== undefined) {
    const gate = gateOf(rl, origin);
    if (gate !== undefined) expect(gate).toEqual({ inFlight: 0, waiting: 0 });
  }
}

/** The outcome of an undici `request()`: its status and whole body, or its error. */
function call(dispatcher: Dispatcher, url: string, options: Partial<Dispatcher.RequestOptions> = {}) {
  return settled(
    request(url, { dispatcher, ...options }).then(async (r) => ({
      status: r.statusCode,
      headers: r.headers,
      body: await r.body.text(),
    })),
  );
}

const TOO_MANY = (res: ServerResponse, retryAfter = '1', body = 'slow down', more = {}) =>
  res.writeHead(429, { 'retry-after': retryAfter, 'content-type': 'text/plain', ...more }).end(body);

// ---------------------------------------------------------------------------------------------
// 1. A redirect loop while a held response is handed back
// ---------------------------------------------------------------------------------------------

/**
 * `/hop?i=k` redirects to `/hop?i=k+1` for ever (a loop undici's loop detection cannot see: every
 * Location is new), except that `throttleAt(n)` (n: the server's request count, 1-based) answers
 * a 429 with `Retry-After: 1` and a body instead.
 */
async function redirectLoop(
  throttleAt: (n: number) => boolean,
  to: (i: number) => string = (i) => `/hop?i=${i}`,
) {
  return scripted((p) => {
    if (throttleAt(p.n)) {
      TOO_MANY(p.res, '1', `429 at ${p.req.url}`);
      return true;
    }
    const i = Number(new URL(p.req.url ?? '/', 'http://x').searchParams.get('i') ?? 0);
    p.res.writeHead(302, { location: to(i + 1), 'content-type': 'text/plain' }).end(`to ${i + 1}`);
    return true;
  });
}

describe('1. a redirect loop while a held 429 is handed back', () => {
  it.each([
    ['redirect outside the limiter (each hop metered)', 'outside'],
    ['redirect inside the limiter (one metered request)', 'inside'],
  ] as const)(
    '%s: 302s with 429s among them end with the last 302, every permit settled',
    async (_, order) => {
      // Every third request is a 429: its retry goes on from where it was.
      const server = await redirectLoop((n) => n % 3 === 2);
      const clock = new ManualClock();
      const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1 });
      const redirect = interceptors.redirect({ maxRedirections: 4 });
      // The last listed runs first.
      const agent = order === 'outside' ? agentWith(rl, redirect) : agentWith(redirect, rl);

      const answer = call(agent, `${server.origin}/hop?i=0`);
      await advanceUntil(clock, () => answer.done, 'the loop to end');
      expect(answer.error).toBeUndefined();
      if (order === 'outside') {
        // Each hop's 429 is retried as that hop: maxRedirections reached, undici hands over the
        // last 302 as it is.
        expect(answer.value?.status).toBe(302);
        expect(server.log.length).toBe(7); // 5 hops, 2 of them retried once
      } else {
        // Each attempt starts the chain again and meets a 429 at its second or third hop: after 4
        // attempts the caller gets the last 429, the server's last answer.
        expect(answer.value).toMatchObject({ status: 429 });
        expect(answer.value?.body).toMatch(/^429 at \/hop\?i=\d$/);
        expect(server.log.length).toBeLessThanOrEqual(4 * 5);
      }
      expect(limiter.answered.throttled).toBeGreaterThan(0);
      expectSettled(limiter, rl, server.origin);
    },
  );

  it.each([
    ['outside', 'outside'],
    ['inside', 'inside'],
  ] as const)(
    'redirect %s the limiter: a 429 at every hop past the first uses up maxAttempts; the caller gets that 429 whole',
    async (_, order) => {
      const server = await redirectLoop((n) => n >= 2);
      const clock = new ManualClock();
      const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1, maxAttempts: 3 });
      const redirect = interceptors.redirect({ maxRedirections: 4 });
      const agent = order === 'outside' ? agentWith(rl, redirect) : agentWith(redirect, rl);

      const answer = call(agent, `${server.origin}/hop?i=0`);
      await advanceUntil(clock, () => answer.done, 'the call to end');
      expect(answer.value?.status).toBe(429);
      expectSettled(limiter, rl, server.origin);
      if (order === 'outside') {
        // /hop?i=1 is retried as itself: 302, then three 429s.
        expect(answer.value?.body).toBe('429 at /hop?i=1');
        expect(server.log).toEqual(['GET /hop?i=0', 'GET /hop?i=1', 'GET /hop?i=1', 'GET /hop?i=1']);
      } else {
        // Each retry starts at /hop?i=0 again, which is a 429 from the second request on.
        expect(answer.value?.body).toBe('429 at /hop?i=0');
        expect(server.log).toEqual(['GET /hop?i=0', 'GET /hop?i=1', 'GET /hop?i=0', 'GET /hop?i=0']);
      }
    },
  );

  it("redirect outside: a loop between two paths ends with undici's loop error, nothing held", async () => {
    // /a -> /b -> /a ...; the second request (/b) is a 429 once, so the loop is detected after a
    // held 429 was handed over to the retry.
    const server = await scripted((p) => {
      if (p.n === 2) {
        TOO_MANY(p.res, '1', 'held');
        return true;
      }
      p.res.writeHead(302, { location: p.req.url === '/a' ? '/b' : '/a' }).end();
      return true;
    });
    const clock = new ManualClock();
    const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1 });
    const agent = agentWith(rl, interceptors.redirect({ maxRedirections: 10 }));

    const answer = call(agent, `${server.origin}/a`);
    await advanceUntil(clock, () => answer.done, 'the loop to be detected');
    expect((answer.error as Error | undefined)?.message).toMatch(/Redirect loop detected/);
    expect(server.log).toEqual(['GET /a', 'GET /b', 'GET /b']);
    expectSettled(limiter, rl, server.origin);
  });

  it("redirect inside: the same loop fails each attempt with undici's loop error (not retried), nothing held", async () => {
    const server = await scripted((p) => {
      p.res.writeHead(302, { location: p.req.url === '/a' ? '/b' : '/a' }).end();
      return true;
    });
    const clock = new ManualClock();
    const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1 });
    const agent = agentWith(interceptors.redirect({ maxRedirections: 10 }), rl);

    const answer = call(agent, `${server.origin}/a`);
    await advanceUntil(clock, () => answer.done, 'the loop to be detected');
    expect((answer.error as Error | undefined)?.message).toMatch(/Redirect loop detected/);
    expectSettled(limiter, rl, server.origin);
  });

  it.each([
    ['outside', 'outside'],
    ['inside', 'inside'],
  ] as const)(
    'redirect %s: 12 concurrent loops with 429s (Retry-After: 1) through 2 slots all end; books settle',
    async (_, order) => {
      // A seeded pattern of 429s: about one request in three.
      let seed = 7;
      const server = await redirectLoop(() => {
        seed = (seed * 48_271) % 2_147_483_647;
        return seed % 3 === 0;
      });
      const clock = new ManualClock();
      const { limiter, rl } = owned(
        server.origin,
        clock,
        { ...NEVER_BINDS, maxWait: 3_600_000 },
        { maxConcurrent: 2 },
      );
      const redirect = interceptors.redirect({ maxRedirections: 3 });
      const agent = order === 'outside' ? agentWith(rl, redirect) : agentWith(redirect, rl);

      const answers = Array.from({ length: 12 }, (_, i) => call(agent, `${server.origin}/hop?i=${i * 100}`));
      await advanceUntil(clock, () => answers.every((a) => a.done), 'every loop to end');
      for (const a of answers) {
        // The last 302 (maxRedirections), or a 429 whose attempts ran out.
        expect(a.error).toBeUndefined();
        expect([302, 429]).toContain(a.value?.status);
      }
      expectSettled(limiter, rl, server.origin);
      expect(server.requests).toBeLessThan(12 * 4 * 4 + 1);
    },
  );

  describe("Node's fetch following the redirects (the interceptor as the global dispatcher)", () => {
    keepGlobalDispatcher();

    it("a self-redirect loop with 429s ends with fetch's redirect error; every permit settled", async () => {
      const server = await scripted((p) => {
        if (p.n % 4 === 2) {
          TOO_MANY(p.res, '1', 'held 429');
          return true;
        }
        // To itself, a new query each time (fetch counts the hops, 20 at most).
        p.res.writeHead(302, { location: `/self?n=${p.n}` }).end();
        return true;
      });
      const clock = new ManualClock();
      const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
      cleanups.push(() => limiter.close());
      const rl = installGlobal({
        limiters: { x: { origins: [server.origin], limiter, maxConcurrent: 1 } },
        default: false,
        clock,
      });

      const answer = settled(fetch(`${server.origin}/self`));
      await advanceUntil(clock, () => answer.done, 'fetch to give up');
      expect(answer.error).toBeInstanceOf(TypeError);
      expect(String((answer.error as Error).cause)).toMatch(/redirect count exceeded/);
      expectSettled(limiter, rl, server.origin);
      // 21 hops (20 redirects) plus a retry per 429 among them.
      expect(server.requests).toBeLessThanOrEqual(30);
    });

    it('redirect: "manual" hands back the 302 after a held 429 was retried', async () => {
      const server = await scripted((p) => {
        if (p.n === 1) TOO_MANY(p.res, '1', 'held 429');
        else p.res.writeHead(302, { location: '/self' }).end();
        return true;
      });
      const clock = new ManualClock();
      const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
      cleanups.push(() => limiter.close());
      const rl = installGlobal({
        limiters: { x: { origins: [server.origin], limiter, maxConcurrent: 1 } },
        default: false,
        clock,
      });
      const answer = settled(fetch(`${server.origin}/self`, { redirect: 'manual' }));
      await advanceUntil(clock, () => answer.done, 'the 302');
      expect(answer.value?.status).toBe(302);
      await answer.value?.arrayBuffer();
      expect(server.requests).toBe(2);
      expectSettled(limiter, rl, server.origin);
    });

    it("an abort while a hop's retry waits its Retry-After rejects with the reason; nothing held", async () => {
      const server = await scripted((p) => {
        if (p.n === 3) TOO_MANY(p.res, '30', 'held 429');
        else p.res.writeHead(302, { location: `/self?n=${p.n}` }).end();
        return true;
      });
      const clock = new ManualClock();
      const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
      cleanups.push(() => limiter.close());
      const rl = installGlobal({
        limiters: { x: { origins: [server.origin], limiter, maxConcurrent: 1 } },
        default: false,
        clock,
      });
      const ac = new AbortController();
      const answer = settled(fetch(`${server.origin}/self`, { signal: ac.signal }));
      await until(() => server.requests === 3 && limiter.snapshot().pausedUntil !== undefined, 'the 429');
      await until(() => limiter.snapshot().queued === 1, 'the retry to queue');
      const reason = new Error('gave up');
      ac.abort(reason);
      await until(() => answer.done, 'the abort');
      expect(answer.error).toBe(reason);
      expectSettled(limiter, rl, server.origin);
    });
  });
});

// ---------------------------------------------------------------------------------------------
// 2. A keep-alive socket the server closes as the retry goes out
// ---------------------------------------------------------------------------------------------

describe('2. a keep-alive socket closed by the server as a 429 is retried', () => {
  it.each([
    ['Retry-After: 0', '0'],
    ['Retry-After: 1', '1'],
  ])(
    '%s, the socket destroyed after the 429 is written: the retry goes on a new socket',
    async (_, retryAfter) => {
      const server = await scripted((p) => {
        if (p.n === 1) {
          p.res.writeHead(429, { 'retry-after': retryAfter, connection: 'keep-alive', 'content-length': 4 });
          p.res.end('slow', () => p.socket.destroy());
        } else p.res.end(`ok ${p.n}`);
        return true;
      });
      const clock = new ManualClock();
      const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1 });
      const agent = agentWith(rl);

      const answer = call(agent, `${server.origin}/x`);
      await advanceUntil(clock, () => answer.done, 'the retry');
      expect(answer.value).toMatchObject({ status: 200, body: 'ok 2' });
      expectSettled(limiter, rl, server.origin);
      expect(limiter.answered).toEqual({ success: 1, throttled: 1, failed: 0 });
    },
  );

  it.each([
    ['Retry-After: 0', '0'],
    ['Retry-After: 1', '1'],
  ])(
    '%s, the keep-alive socket destroyed as the retry arrives on it: the caller gets a socket error, books settle',
    async (_, retryAfter) => {
      const first = new Set<Socket>();
      const server = await scripted((p) => {
        if (p.n === 1) {
          first.add(p.socket);
          p.res.writeHead(429, { 'retry-after': retryAfter, connection: 'keep-alive', 'content-length': 4 });
          p.res.end('slow');
        } else if (first.has(p.socket))
          p.socket.destroy(); // the retry, on the kept socket
        else p.res.end(`ok ${p.n}`);
        return true;
      });
      const clock = new ManualClock();
      const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1 });
      const agent = agentWith(rl);

      const answer = call(agent, `${server.origin}/x`);
      await advanceUntil(clock, () => answer.done, 'the retry');
      // No silent third attempt: the retry went once.
      expect(server.requests).toBe(2);
      if (answer.error !== undefined) {
        // It went on the kept socket, which the server destroyed on its arrival: the server may have
        // done it, so the caller gets undici's error, not the stale 429.
        expect((answer.error as { code?: string }).code).toBe('UND_ERR_SOCKET');
        expect(limiter.answered).toEqual({ success: 0, throttled: 1, failed: 1 });
      } else {
        // It went on a new socket (the kept one was not free yet when the retry had its units).
        expect(answer.value).toMatchObject({ status: 200, body: 'ok 2' });
        expect(limiter.answered).toEqual({ success: 1, throttled: 1, failed: 0 });
      }
      if (retryAfter === '1') expect(answer.error).toBeDefined(); // after a pause, the kept socket is reused
      expectSettled(limiter, rl, server.origin);
    },
  );

  it.each([
    ['Retry-After: 0', '0'],
    ['Retry-After: 1', '1'],
  ])(
    '%s, the server half-closes the kept socket (FIN) after the 429: the retry goes on a new socket',
    async (_, retryAfter) => {
      const server = await scripted((p) => {
        if (p.n === 1) {
          p.res.writeHead(429, { 'retry-after': retryAfter, connection: 'keep-alive', 'content-length': 4 });
          p.res.end('slow', () => p.socket.end());
        } else p.res.end(`ok ${p.n}`);
        return true;
      });
      const clock = new ManualClock();
      const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1 });
      const answer = call(agentWith(rl), `${server.origin}/x`);
      await advanceUntil(clock, () => answer.done, 'the retry');
      expect(answer.value).toMatchObject({ status: 200, body: 'ok 2' });
      expect(limiter.answered).toEqual({ success: 1, throttled: 1, failed: 0 });
      expectSettled(limiter, rl, server.origin);
    },
  );

  it('the 429 body cut by a destroyed socket while held: the retry still goes, on a new socket', async () => {
    const server = await scripted((p) => {
      if (p.n === 1) {
        p.res.writeHead(429, { 'retry-after': '1', connection: 'keep-alive', 'content-length': 1000 });
        p.res.write('part of it', () => p.socket.destroy());
      } else p.res.end(`ok ${p.n}`);
      return true;
    });
    const clock = new ManualClock();
    const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1 });
    const answer = call(agentWith(rl), `${server.origin}/x`);
    await advanceUntil(clock, () => answer.done, 'the retry');
    expect(answer.value).toMatchObject({ status: 200, body: 'ok 2' });
    expectSettled(limiter, rl, server.origin);
  });

  it("the 429 body cut by a destroyed socket, its retry refused (the adapter closed): the caller gets the 429 and the socket error as its body's end", async () => {
    const server = await scripted((p) => {
      p.res.writeHead(429, { 'retry-after': '30', connection: 'keep-alive', 'content-length': 1000 });
      p.res.write('part of it', () => p.socket.destroy());
      return true;
    });
    const clock = new ManualClock();
    const { limiter, rl } = owned(server.origin, clock, NEVER_BINDS, { maxConcurrent: 1 });
    let status = 0;
    const body = settled(
      request(`${server.origin}/x`, { dispatcher: agentWith(rl) }).then((r) => {
        status = r.statusCode;
        return r.body.text();
      }),
    );
    await until(() => limiter.snapshot().queued === 1, 'the retry to wait');
    rl.close();
    await until(() => body.done, 'the held 429');
    expect(status).toBe(429);
    expect(body.error).toBeInstanceOf(Error);
    expect(server.requests).toBe(1);
    expectSettled(limiter, rl, server.origin);
  });

  it("one connection (Agent connections: 1), 8 requests, every 429 followed by the socket's destroy: each ends, books settle", async () => {
    const server = await scripted((p) => {
      if (p.n % 2 === 1) {
        p.res.writeHead(429, { 'retry-after': '0', connection: 'keep-alive', 'content-length': 4 });
        p.res.end('slow', () => p.socket.destroy());
      } else p.res.end(`ok ${p.n}`);
      return true;
    });
    const clock = new ManualClock();
    const { limiter, rl } = owned(
      server.origin,
      clock,
      { ...NEVER_BINDS, maxWait: 3_600_000 },
      {
        maxConcurrent: 2,
      },
    );
    const agent = new Agent({ connections: 1 }).compose(rl);
    cleanups.push(() => agent.close());
    const answers = Array.from({ length: 8 }, (_, i) => call(agent, `${server.origin}/r${i}`));
    await advanceUntil(clock, () => answers.every((a) => a.done), 'every request');
    for (const a of answers) {
      if (a.error !== undefined) expect((a.error as { code?: string }).code).toMatch(/^UND_ERR_/);
      else expect([200, 429]).toContain(a.value?.status);
    }
    expectSettled(limiter, rl, server.origin);
  });

  describe("Node's fetch (the interceptor as the global dispatcher)", () => {
    keepGlobalDispatcher();

    it('the kept socket destroyed as the retry arrives: fetch rejects with a TypeError whose cause is the socket error; books settle', async () => {
      const first = new Set<Socket>();
      const server = await scripted((p) => {
        if (p.n === 1) {
          first.add(p.socket);
          p.res.writeHead(429, { 'retry-after': '1', connection: 'keep-alive', 'content-length': 4 });
          p.res.end('slow');
        } else if (first.has(p.socket)) p.socket.destroy();
        else p.res.end(`ok ${p.n}`);
        return true;
      });
      const clock = new ManualClock();
      const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
      cleanups.push(() => limiter.close());
      const rl = installGlobal({
        limiters: { x: { origins: [server.origin], limiter, maxConcurrent: 1 } },
        default: false,
        clock,
      });
      const answer = settled(fetch(`${server.origin}/x`));
      await advanceUntil(clock, () => answer.done, 'the retry');
      expect(answer.error).toBeInstanceOf(TypeError);
      expect((answer.error as { cause?: { code?: string } }).cause?.code).toBe('UND_ERR_SOCKET');
      expectSettled(limiter, rl, server.origin);
    });

    it('the socket destroyed after the 429: the retry goes on a new socket and fetch gets the 200', async () => {
      const server = await scripted((p) => {
        if (p.n === 1) {
          p.res.writeHead(429, { 'retry-after': '1', connection: 'keep-alive', 'content-length': 4 });
          p.res.end('slow', () => p.socket.destroy());
        } else p.res.end(`ok ${p.n}`);
        return true;
      });
      const clock = new ManualClock();
      const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
      cleanups.push(() => limiter.close());
      const rl = installGlobal({
        limiters: { x: { origins: [server.origin], limiter, maxConcurrent: 1 } },
        default: false,
        clock,
      });
      const answer = settled(fetch(`${server.origin}/x`).then(async (r) => `${r.status} ${await r.text()}`));
      await advanceUntil(clock, () => answer.done, 'the retry');
      expect(answer.value).toBe('200 ok 2');
      expectSettled(limiter, rl, server.origin);
    });
  });
});

// ---------------------------------------------------------------------------------------------
// 3. charge() corrections of an announced bucket racing a retry
// ---------------------------------------------------------------------------------------------

/**
 * An API that announces 100 requests a minute (IETF `RateLimit`, `q=100;w=60`) and whose every
 * answer the test writes (`pending`): `answer(p, status, remaining, more)`.
 */
async function announcing() {
  const server = await scripted();
  const answer = (p: Pending, status: number, remaining: number, more: Record<string, string> = {}) =>
    p.res
      .writeHead(status, {
        'ratelimit-policy': '"default";q=100;w=60',
        ratelimit: `"default";r=${remaining};t=60`,
        ...more,
      })
      .end(`${status} ${p.req.url}`);
  return { ...server, answer };
}

/** An announced bucket behind the interceptor; `responseUnits` from an answer's `x-cost`. */
function announcedRoute(origin: string, clock: ManualClock) {
  return owned(
    origin,
    clock,
    { burst: 'announced', initialUnitsPerMinute: 600, maxWait: 3_600_000 },
    { headers: 'standard' },
    {
      responseUnits: (_status: number, headers: Record<string, unknown>) =>
        headers['x-cost'] === undefined ? undefined : Number(headers['x-cost']),
    },
  );
}

/**
 * The level the announced bucket must hold right after an answer that announced `remaining`, with
 * `after` units granted after the answered call still in flight: `remaining` less the reserve
 * (`limit - capacity`) less `after`, and never above what it held (see `AnnouncedBucket.sync`).
 */
function levelAfter(limiter: AdaptiveRateLimiter, remaining: number, after = 0): number {
  const { capacity } = limiter.snapshot();
  return remaining - (100 - capacity) - after;
}

describe('3. charge() corrections of an announced bucket racing a retry', () => {
  it("another call's correction (responseUnits) while the retry waits, a charge() after it was granted: the level follows the API's word, nothing counted twice", async () => {
    const server = await announcing();
    const clock = new ManualClock();
    const { limiter, rl } = announcedRoute(server.origin, clock);
    const agent = agentWith(rl);

    const a = call(agent, `${server.origin}/a`);
    await until(() => server.pending.length === 1, 'a to arrive');
    const b = call(agent, `${server.origin}/b`);
    await until(() => server.pending.length === 2, 'b to arrive');
    // b's 429 (50 left): the first announcement; a is in flight, granted before b.
    server.answer(server.pending[1] as Pending, 429, 50, { 'retry-after': '1' });
    await until(() => limiter.snapshot().queued === 1, "b's retry to wait");
    expect(limiter.snapshot().tokens).toBeCloseTo(levelAfter(limiter, 50, 1), 9);

    // a ends while b's retry waits: it cost 5 (1 drawn: +4), which the API counted (45 left).
    server.answer(server.pending[0] as Pending, 200, 45, { 'x-cost': '5' });
    await until(() => a.done, 'a');
    expect(limiter.snapshot().tokens).toBeCloseTo(levelAfter(limiter, 45), 9);

    // b's retry goes (the pause is over), and is held at the server.
    await advanceUntil(clock, () => server.pending.length === 3, "b's retry to arrive");
    const granted = limiter.snapshot().tokens;
    // A correction of 3 more units (a call's usage the API has counted already) while the retry
    // is in flight: the announcement had taken it off (other clients' draws are in it too).
    limiter.charge(3);
    expect(limiter.snapshot().tokens).toBeLessThanOrEqual(granted);
    expect(limiter.snapshot().tokens).toBeGreaterThanOrEqual(granted - 3);
    // b's retry costs 2 (+1); the API counted everything: 40 left.
    server.answer(server.pending[2] as Pending, 200, 40, { 'x-cost': '2' });
    await until(() => b.done, 'b');
    expect(b.value?.status).toBe(200);
    const end = limiter.snapshot();
    expect(end.tokens).toBeCloseTo(levelAfter(limiter, 40), 9);
    expect(end.tokens).toBeLessThanOrEqual(end.capacity);
    expectSettled(limiter, rl, server.origin);
    expect(limiter.answered).toEqual({ success: 2, throttled: 1, failed: 0 });
  });

  it('a refund (charge(-n)) while the retry waits never lifts the level above what the API last announced', async () => {
    const server = await announcing();
    const clock = new ManualClock();
    const { limiter, rl } = announcedRoute(server.origin, clock);
    const agent = agentWith(rl);

    const warm = call(agent, `${server.origin}/warm`);
    await until(() => server.pending.length === 1, 'warm');
    server.answer(server.pending[0] as Pending, 200, 90);
    await until(() => warm.done, 'warm');
    const b = call(agent, `${server.origin}/b`);
    await until(() => server.pending.length === 2, 'b');
    server.answer(server.pending[1] as Pending, 429, 20, { 'retry-after': '1' });
    await until(() => limiter.snapshot().queued === 1, "b's retry to wait");
    const announced = levelAfter(limiter, 20);
    expect(limiter.snapshot().tokens).toBeCloseTo(announced, 9);
    // Refunds while the retry waits, the clock standing still: the level stays at the API's word.
    for (let i = 0; i < 5; i++) limiter.charge(-10);
    expect(limiter.snapshot().tokens).toBeLessThanOrEqual(announced + 1e-9);
    // A charge and its refund at once: never above where it was, never below it less the charge.
    const before = limiter.snapshot().tokens;
    limiter.charge(7);
    limiter.charge(-7);
    expect(limiter.snapshot().tokens).toBeLessThanOrEqual(before + 1e-9);
    expect(limiter.snapshot().tokens).toBeGreaterThanOrEqual(before - 7 - 1e-9);

    await advanceUntil(clock, () => server.pending.length === 3, "b's retry");
    // Refunds after the retry was granted, before its answer: still at most the API's word
    // (refilled since) less the retry's unit, which it has not counted.
    for (let i = 0; i < 5; i++) limiter.charge(-10);
    server.answer(server.pending[2] as Pending, 200, 19);
    await until(() => b.done, 'b');
    const end = limiter.snapshot();
    expect(end.tokens).toBeLessThanOrEqual(levelAfter(limiter, 19) + 1e-9);
    expect(end.tokens).toBeGreaterThanOrEqual(0);
    expectSettled(limiter, rl, server.origin);
  });

  it('charges and refunds at every step of 6 calls with retries (bounded, seeded): the books settle and the level stays within [0 - owed, capacity]', async () => {
    let seed = 11;
    const next = () => {
      seed = (seed * 48_271) % 2_147_483_647;
      return seed;
    };
    let remaining = 100;
    const server = await scripted((p) => {
      const throttled = next() % 3 === 0;
      if (!throttled) remaining = Math.max(0, remaining - 1);
      p.res
        .writeHead(throttled ? 429 : 200, {
          'ratelimit-policy': '"default";q=100;w=60',
          ratelimit: `"default";r=${remaining};t=60`,
          ...(throttled ? { 'retry-after': '1' } : { 'x-cost': String(1 + (next() % 4)) }),
        })
        .end('x');
      return true;
    });
    const clock = new ManualClock();
    const { limiter, rl } = announcedRoute(server.origin, clock);
    const agent = agentWith(rl);
    const answers = Array.from({ length: 6 }, (_, i) => call(agent, `${server.origin}/c${i}`));
    for (let step = 0; step < 200 && !answers.every((a) => a.done); step++) {
      const r = next() % 5;
      if (r === 0) limiter.charge(3);
      else if (r === 1) limiter.charge(-3);
      const s = limiter.snapshot();
      expect(s.tokens).toBeLessThanOrEqual(s.capacity + 1e-9);
      clock.advance(250);
      await new Promise<void>((resolve) => setTimeout(resolve, 1));
    }
    expect(answers.every((a) => a.done)).toBe(true);
    expectSettled(limiter, rl, server.origin);
  });
});
