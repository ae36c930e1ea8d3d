import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, type Dispatcher, request, upgrade } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { HANDLER_THREW_WARNING } from '../src/http/handler-threw.js';
import { runtimeOf } from '../src/http/interceptor.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, get, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';

// The fast path: a request whose units (and maxConcurrent slot) are free is sent at once and its
// response judged synchronously; only a throttled answer to retry goes through the attempt loop.

/**
 * An interceptor placed inside the limiter (listed before it): counts the `pause()` calls on the
 * controllers undici hands the limiter's attempts.
 */
function pauseCounter() {
  const counter = { pauses: 0 };
  const interceptor: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) =>
    dispatch(opts, {
      onRequestStart(controller, context) {
        const pause = controller.pause.bind(controller);
        controller.pause = () => {
          counter.pauses++;
          pause();
        };
        handler.onRequestStart?.(controller, context);
      },
      onRequestUpgrade: (controller, status, headers, socket) =>
        handler.onRequestUpgrade?.(controller, status, headers, socket),
      onResponseStart: (controller, status, headers, message) =>
        handler.onResponseStart?.(controller, status, headers, message),
      onResponseData: (controller, chunk) => handler.onResponseData?.(controller, chunk),
      onResponseEnd: (controller, trailers) => handler.onResponseEnd?.(controller, trailers),
      onResponseError: (controller, error) => handler.onResponseError?.(controller, error),
    });
  return { counter, interceptor };
}

/** A server that answers `/hang` only when told (in order), and anything else at once. */
async function holdingServer() {
  const held: ServerResponse[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const server = await serve({
    respond: (req, res) => {
      if (!req.url?.startsWith('/hang')) return false;
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      held.push(res);
      return true;
    },
  });
  return {
    server,
    get maxInFlight() {
      return maxInFlight;
    },
    /** Answers the oldest held request. */
    answerOne() {
      const res = held.shift();
      inFlight--;
      res?.writeHead(200).end('answered');
    },
  };
}

/**
 * Sends `path` and reports the attempt the caller's controller (the interceptor's) reaches during
 * the response (`undefined` when none started) and once the caller has the end or the error.
 */
function attemptKept(agent: Dispatcher, origin: string, path: string) {
  return new Promise<{ during: unknown; after: unknown; how: string }>((resolve) => {
    let controller: Dispatcher.DispatchController | undefined;
    // The controller the caller holds is the interceptor's: it reaches the attempt in flight.
    const attemptOf = () => (controller as unknown as { attempt: unknown }).attempt;
    let during: unknown;
    const settle = (how: string) => setImmediate(() => resolve({ during, after: attemptOf(), how }));
    agent.dispatch(
      { origin, path, method: 'GET' },
      {
        onRequestStart: (c) => {
          controller = c;
        },
        onResponseStart: () => {
          during = attemptOf();
        },
        onResponseEnd: () => settle('end'),
        onResponseError: () => settle('error'),
      },
    );
  });
}

describe('adaptiveRateLimit: the fast path', () => {
  it('lets go of the attempt once the caller has the end or the error (a long-queued request keeps nothing young)', async () => {
    const server = await serve({
      respond: (req, res) => {
        if (req.url !== '/broken') return false;
        // The head and part of the body, then the connection cut: an error after the response start.
        res.writeHead(200, { 'content-length': '10' }).write('part', () => res.destroy());
        return true;
      },
    });
    const agent = agentWith(limit({ default: NEVER_BINDS }));
    const send = (path: string) => attemptKept(agent, server.origin, path);
    const ended = await send('/');
    expect(ended.how).toBe('end');
    expect(ended.during).toBeDefined();
    expect(ended.after).toBeUndefined();
    const failed = await send('/broken');
    expect(failed.how).toBe('error');
    expect(failed.during).toBeDefined();
    expect(failed.after).toBeUndefined();
  });

  it("lets go of the attempt when the caller's own onResponseError throws (the throw goes on down)", async () => {
    const server = await serve({
      respond: (req, res) => {
        // An error after the response start (the caller has the response), and one before it.
        if (req.url === '/broken')
          res.writeHead(200, { 'content-length': '10' }).write('part', () => res.destroy());
        else if (req.url === '/cut') req.socket.destroy();
        else return false;
        return true;
      },
    });
    // Placed inside the limiter (listed before it): catches what the limiter's attempts throw to
    // undici's core, where the caller's throw would go without the limiter.
    const thrown: unknown[] = [];
    const catcher: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) =>
      dispatch(opts, {
        onRequestStart: (controller, context) => handler.onRequestStart?.(controller, context),
        onResponseStart: (controller, status, headers, message) =>
          handler.onResponseStart?.(controller, status, headers, message),
        onResponseData: (controller, chunk) => handler.onResponseData?.(controller, chunk),
        onResponseEnd: (controller, trailers) => handler.onResponseEnd?.(controller, trailers),
        onResponseError: (controller, error) => {
          try {
            handler.onResponseError?.(controller, error);
          } catch (caught) {
            thrown.push(caught);
          }
        },
      });
    const agent = agentWith(catcher, limit({ default: NEVER_BINDS }));
    for (const path of ['/broken', '/cut']) {
      const failed = await new Promise<unknown>((resolve) => {
        let controller: Dispatcher.DispatchController | undefined;
        agent.dispatch(
          { origin: server.origin, path, method: 'GET' },
          {
            onRequestStart: (c) => {
              controller = c;
            },
            onResponseError: () => {
              setImmediate(() => resolve((controller as unknown as { attempt: unknown }).attempt));
              throw new Error(`caller bug on ${path}`);
            },
          },
        );
      });
      expect(failed).toBeUndefined();
    }
    expect(thrown.map((error) => (error as Error).message)).toEqual([
      'caller bug on /broken',
      'caller bug on /cut',
    ]);
  });

  it("reports a throw of the caller's onResponseError after a retry or a refused wait as a warning, not an unhandled rejection", async () => {
    // Every answer a 429 with a 600 s Retry-After; the clock never moves: request 1's retry is
    // refused (the loop hands over the 429 it holds, from a promise handler), and request 2's
    // wait is refused (its failure runs in a microtask).
    const server = await serve({ capacity: 0, retryAfter: '600' });
    const rl = limit({ clock: new ManualClock(), default: { maxWait: 1_000 } });
    const agent = agentWith(rl);
    const escaped: unknown[] = [];
    const onEscape = (error: unknown) => escaped.push(error);
    process.on('unhandledRejection', onEscape);
    process.on('uncaughtException', onEscape);
    cleanups.push(() => {
      process.off('unhandledRejection', onEscape);
      process.off('uncaughtException', onEscape);
    });
    const send = (path: string) =>
      new Promise<{ told: unknown; warning: Error; attempt: unknown }>((resolve, reject) => {
        let controller: Dispatcher.DispatchController | undefined;
        let told: unknown;
        const thrown = new Error(`caller bug in onResponseError on ${path}`);
        const onWarning = (warning: Error) => {
          if ((warning as { code?: string }).code !== HANDLER_THREW_WARNING || warning.cause !== thrown)
            return;
          process.off('warning', onWarning);
          resolve({ told, warning, attempt: (controller as unknown as { attempt: unknown }).attempt });
        };
        process.on('warning', onWarning);
        // On the old code the throw escapes: fail at once rather than at the test's timeout.
        const onEscaped = (error: unknown) => {
          if (error !== thrown) return;
          process.off('warning', onWarning);
          reject(new Error(`escaped: ${thrown.message}`));
        };
        process.once('unhandledRejection', onEscaped);
        process.once('uncaughtException', onEscaped);
        agent.dispatch(
          { origin: server.origin, path, method: 'GET' },
          {
            onRequestStart: (c) => {
              controller = c;
            },
            onResponseStart: () => {
              throw new Error(`caller bug in onResponseStart on ${path}`);
            },
            onResponseError: (_c, error) => {
              told = error;
              throw thrown;
            },
          },
        );
      });

    const retried = await send('/retried');
    // undici's contract: a throw of onResponseStart goes to onResponseError.
    expect((retried.told as Error).message).toBe('caller bug in onResponseStart on /retried');
    expect(retried.warning.message).toContain(server.origin);
    expect(retried.attempt).toBeUndefined();
    const refused = await send('/refused');
    expect(refused.told).toBeInstanceOf(RateLimitRejectedError);
    expect(refused.attempt).toBeUndefined();
    expect(server.requests).toBe(1);
    expect(rl.registry.limiterFor(server.origin)?.snapshot()).toMatchObject({ queued: 0, throttles: 1 });
    expect(escaped).toEqual([]);
  });

  it("lets a throw of the caller's onResponseError go on to its dispatch call when undici's dispatch fails at once", async () => {
    const agent = new Agent();
    const composed = agent.compose(limit({ default: NEVER_BINDS }));
    await agent.close();
    let told: unknown;
    // Without the limiter undici's dispatch tells the handler, then its throw goes to the caller.
    expect(() =>
      composed.dispatch(
        { origin: 'http://127.0.0.1:9', path: '/', method: 'GET' },
        {
          onRequestStart: () => {},
          onResponseError: (_c, error) => {
            told = error;
            throw new Error('caller bug');
          },
        },
      ),
    ).toThrow('caller bug');
    expect((told as { code?: string }).code).toMatch(/^UND_ERR_(CLOSED|DESTROYED)$/);
  });

  it('lets go of the last attempt when the request fails inside the interceptor, on the fast path and in the loop', async () => {
    let second = 0;
    const server = await serve({
      respond: (req, res) => {
        // The connection cut before any answer: the request fails in the interceptor.
        if (req.url === '/cut') req.socket.destroy();
        // A 429, then its retry cut: the attempt loop fails the request.
        else if (req.url === '/429-then-cut' && second++ === 0)
          res.writeHead(429, { 'retry-after': '0' }).end();
        else if (req.url === '/429-then-cut') req.socket.destroy();
        else return false;
        return true;
      },
    });
    const agent = agentWith(limit({ default: NEVER_BINDS }));
    for (const path of ['/cut', '/429-then-cut']) {
      const failed = await attemptKept(agent, server.origin, path);
      expect(failed.how).toBe('error');
      expect(failed.during).toBeUndefined();
      expect(failed.after).toBeUndefined();
    }
    expect(second).toBe(2);
  });

  it('passes a success straight through without pausing its response', async () => {
    const server = await serve();
    const { counter, interceptor } = pauseCounter();
    const agent = agentWith(interceptor, limit({ default: NEVER_BINDS }));

    for (let i = 0; i < 3; i++) expect((await get(agent, `${server.origin}/${i}`)).status).toBe(200);

    expect(counter.pauses).toBe(0);
  });

  it('hands a throttled answer to the attempt loop, which holds it without pausing its connection', async () => {
    let first = true;
    const server = await serve({
      respond: (_req, res) => {
        if (!first) return false;
        first = false;
        res.writeHead(429, { 'retry-after': '0' }).end('slow down');
        return true;
      },
    });
    const { counter, interceptor } = pauseCounter();
    const agent = agentWith(interceptor, limit({ default: NEVER_BINDS }));

    expect(await get(agent, `${server.origin}/`)).toMatchObject({ status: 200, body: 'ok GET /' });
    // The 429 is read into memory while its retry waits, never paused: it holds no connection.
    expect(counter.pauses).toBe(0);
  });

  it('fails a request aborted before it is sent, taking no units and sending nothing', async () => {
    const server = await serve();
    const rl = limit({ clock: new ManualClock(), default: { initialUnitsPerMinute: 600 } });
    const limiter = rl.registry.limiterFor(server.origin)!;
    const tokens = limiter.snapshot().tokens;
    const reason = new Error('changed my mind');
    const onResponseError = vi.fn();

    const agent = agentWith(rl);
    agent.dispatch(
      { origin: server.origin, path: '/', method: 'GET' },
      {
        onRequestStart: (controller) => controller.abort(reason),
        onResponseError,
      },
    );

    expect(onResponseError).toHaveBeenCalledTimes(1);
    expect(onResponseError).toHaveBeenCalledWith(expect.anything(), reason);
    expect(limiter.snapshot()).toMatchObject({ tokens, queued: 0 });
    // A sentinel sent after it, on the same agent, is the only request the server sees.
    expect((await get(agent, `${server.origin}/after`)).status).toBe(200);
    expect(server.received.map((r) => r.path)).toEqual(['/after']);
  });

  it('aborts an attempt in flight and frees its maxConcurrent slot', async () => {
    const hold = await holdingServer();
    const origin = hold.server.origin;
    const agent = agentWith(
      limit({ limiters: { api: { origins: [origin], maxConcurrent: 1, ...NEVER_BINDS } } }),
    );
    const abort = new AbortController();

    const hanging = request(`${origin}/hang`, { dispatcher: agent, signal: abort.signal });
    await hold.server.waitForRequests(1);
    abort.abort();

    await expect(hanging).rejects.toMatchObject({ name: 'AbortError' });
    expect((await get(agent, `${origin}/next`)).status).toBe(200);
  });

  it('retries a throttled answer through the limiter, with the streamed body intact', async () => {
    let first = true;
    const server = await serve({
      respond: (_req, res) => {
        if (!first) return false;
        first = false;
        res.writeHead(429, { 'retry-after': '0' }).end('slow down');
        return true;
      },
    });
    const rl = limit({ limiters: { api: { origins: [server.origin], maxConcurrent: 4, ...NEVER_BINDS } } });
    const acquired = vi.fn();
    rl.registry.get('api')?.on('acquired', acquired);
    const body = (async function* () {
      yield 'streamed ';
      yield 'body';
    })();

    const answer = await get(agentWith(rl), `${server.origin}/upload`, {
      method: 'PUT',
      body: body as unknown as Dispatcher.DispatchOptions['body'],
    });

    expect(answer.status).toBe(200);
    expect(server.received.map((r) => [r.status, r.body])).toEqual([
      [429, 'streamed body'],
      [200, 'streamed body'],
    ]);
    expect(acquired).toHaveBeenCalledTimes(2); // units for each attempt
    expect(rl.registry.get('api')?.snapshot()).toMatchObject({ throttles: 1, queued: 0 });
  });

  it('hands over the 429 it holds when the limiter refuses the retry', async () => {
    const server = await serve({ capacity: 0, retryAfter: '600' });
    const rl = limit({ clock: new ManualClock(), default: { maxWait: 1_000 } });

    const answer = await get(agentWith(rl), `${server.origin}/`);

    expect(answer).toMatchObject({ status: 429, body: 'slow down' });
    expect(server.requests).toBe(1);
  });
  it('fails a request whose controller throws, instead of leaving it hanging', async () => {
    const server = await serve({ capacity: 0 });
    const broken = {
      onThrottled: () => {
        throw new Error('controller bug');
      },
      onSuccess: () => {
        throw new Error('controller bug');
      },
    };
    const rl = limit({ default: { ...NEVER_BINDS, controller: broken } });
    const agent = agentWith(rl);
    await expect(get(agent, `${server.origin}/`)).rejects.toThrow('controller bug');
  });

  it('answers the permit of a request whose classify throws: the cold start does not keep its units in flight', async () => {
    const server = await serve({
      respond: (req, res) => {
        if (req.url !== '/bad') return false;
        res.writeHead(500).end('bad');
        return true;
      },
    });
    const classify = (status: number) => {
      if (status === 500) throw new Error('classify bug');
      return undefined;
    };
    // No initial rate: the cold start lets 10 requests be in flight, and the clock never moves.
    const rl = limit({ clock: new ManualClock(), classify });
    const agent = agentWith(rl);
    const limiter = rl.registry.limiterFor(server.origin);
    for (let i = 0; i < 10; i++) {
      await expect(get(agent, `${server.origin}/bad`)).rejects.toThrow('classify bug');
    }
    // Ten answers came: none is in flight, so the next request is sent at once, not queued.
    const next = get(agent, `${server.origin}/ok`);
    expect(limiter?.snapshot()).toMatchObject({ inFlightCap: 10, queued: 0 });
    expect((await next).status).toBe(200);
  });

  it('answers the permit when classify throws on a retry in the attempt loop', async () => {
    let second = 0;
    const server = await serve({
      respond: (req, res) => {
        if (req.url !== '/429-then-500') return false;
        if (second++ === 0) res.writeHead(429, { 'retry-after': '0' }).end();
        else res.writeHead(500).end('bad');
        return true;
      },
    });
    const classify = (status: number) => {
      if (status === 500) throw new Error('classify bug');
      return undefined;
    };
    const rl = limit({ default: NEVER_BINDS, classify });
    const agent = agentWith(rl);
    const limiter = rl.registry.limiterFor(server.origin);
    const failed = vi.fn();
    limiter?.on('failed', failed);
    await expect(get(agent, `${server.origin}/429-then-500`)).rejects.toThrow('classify bug');
    expect(second).toBe(2);
    // The retry's answer came: its permit is answered (failed), as any failed answer is.
    expect(failed).toHaveBeenCalledTimes(1);
  });

  it('sends the request, and frees the maxConcurrent slot, when an acquired listener throws', async () => {
    const server = await serve();
    const rl = limit({ limiters: { api: { origins: [server.origin], ...NEVER_BINDS, maxConcurrent: 1 } } });
    const agent = agentWith(rl);
    const listener = () => {
      throw new Error('listener bug');
    };
    // The throw is a process warning (ARL_LISTENER_THREW), not the request's error.
    rl.registry.get('api')?.on('acquired', listener);
    await expect(get(agent, `${server.origin}/`)).resolves.toMatchObject({ status: 200 });
    await expect(get(agent, `${server.origin}/`)).resolves.toMatchObject({ status: 200 });
    rl.registry.get('api')?.off('acquired', listener);
  });
});

describe('adaptiveRateLimit: upgrades', () => {
  it('hands the socket over, counts a success and frees the maxConcurrent slot', async () => {
    const server = createServer((_req, res) => res.end('plain'));
    server.on('upgrade', (_req, socket) => {
      socket.end('HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n');
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    cleanups.push(() => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    });
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const rl = limit({ limiters: { api: { origins: [origin], maxConcurrent: 1, ...NEVER_BINDS } } });
    const agent = agentWith(rl);
    const acquired = vi.fn();
    rl.registry.get('api')?.on('acquired', acquired);

    const upgraded = await upgrade(`${origin}/`, { dispatcher: agent, protocol: 'echo' });
    upgraded.socket.destroy();

    expect(upgraded.headers.upgrade).toBe('echo');
    expect(acquired).toHaveBeenCalledTimes(1);
    expect(rl.registry.get('api')?.snapshot()).toMatchObject({ throttles: 0, queued: 0 });
    expect((await get(agent, `${origin}/`)).body).toBe('plain'); // the slot is free again
  });
});

describe('adaptiveRateLimit: maxConcurrent', () => {
  it('keeps the cap under a burst, sending each waiting request as a slot frees', async () => {
    const hold = await holdingServer();
    const origin = hold.server.origin;
    const rl = limit({ limiters: { api: { origins: [origin], maxConcurrent: 2, ...NEVER_BINDS } } });
    const agent = agentWith(rl);

    const answers = Array.from({ length: 6 }, (_, i) => get(agent, `${origin}/hang/${i}`));
    const gate = () => runtimeOf(rl).gateOf(rl.registry.get('api')!)!;
    for (let seen = 2; seen <= 6; seen++) {
      await hold.server.waitForRequests(seen);
      // Two slots held, the rest waiting for one: nothing else can be on its way.
      expect({ inFlight: gate().inFlight, waiting: gate().waiting }).toEqual({
        inFlight: 2,
        waiting: 6 - seen,
      });
      expect(hold.server.requests).toBe(seen);
      hold.answerOne();
    }
    hold.answerOne();

    expect((await Promise.all(answers)).map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(hold.maxInFlight).toBe(2);
    // The first two race each other to the server; the queued ones go in order.
    expect(hold.server.received.map((r) => r.path).sort()).toEqual(
      [0, 1, 2, 3, 4, 5].map((i) => `/hang/${i}`),
    );
    expect(hold.server.received.slice(2).map((r) => r.path)).toEqual([
      '/hang/2',
      '/hang/3',
      '/hang/4',
      '/hang/5',
    ]);
  });

  it('never sends a request aborted while it waits for a slot', async () => {
    const hold = await holdingServer();
    const origin = hold.server.origin;
    const agent = agentWith(
      limit({ limiters: { api: { origins: [origin], maxConcurrent: 1, ...NEVER_BINDS } } }),
    );
    const abort = new AbortController();

    const first = get(agent, `${origin}/hang`);
    await hold.server.waitForRequests(1);
    const waiting = request(`${origin}/waiting`, { dispatcher: agent, signal: abort.signal });
    abort.abort();
    await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
    hold.answerOne();

    expect((await first).status).toBe(200);
    expect((await get(agent, `${origin}/after`)).status).toBe(200);
    expect(hold.server.received.map((r) => r.path)).toEqual(['/hang', '/after']);
  });
  it('takes no units while a request waits for a slot, so waiting requests neither burst nor spend', async () => {
    // Regression: units were taken before the slot; requests that waited for it went out back to
    // back when it freed (already paid for), and an abort there lost its units.
    const hold = await holdingServer();
    const origin = hold.server.origin;
    const clock = new ManualClock();
    const rl = limit({
      clock,
      limiters: { api: { origins: [origin], maxConcurrent: 1, initialUnitsPerMinute: 600, burst: 'second' } },
    });
    const agent = agentWith(rl);
    const limiter = rl.registry.get('api')!;

    const first = get(agent, `${origin}/hang`);
    await hold.server.waitForRequests(1);
    const abort = new AbortController();
    const waiting = Array.from({ length: 4 }, (_, i) =>
      request(`${origin}/waiting/${i}`, { dispatcher: agent, signal: abort.signal }),
    );
    await vi.waitFor(() => expect(runtimeOf(rl).gateOf(limiter)?.waiting).toBe(4));
    expect(limiter.snapshot().tokens).toBe(9); // only the first request's unit is spent
    abort.abort();
    await Promise.all(waiting.map((w) => expect(w).rejects.toMatchObject({ name: 'AbortError' })));
    expect(limiter.snapshot().tokens).toBe(9);
    hold.answerOne();
    expect((await first).status).toBe(200);
  });
  it('keeps the cap of an origin whose limiter has requests in flight when other origins crowd the registry', async () => {
    // Regression: a per-origin limiter with requests holding its slot counted as idle, was
    // dropped, and the next request to the origin came with a second cap.
    const hold = await holdingServer();
    const other = await serve();
    const a = hold.server.origin;
    const registry = new RateLimiterRegistry({
      default: { ...NEVER_BINDS, maxConcurrent: 1 },
      maxOriginLimiters: 1,
    });
    cleanups.push(() => registry.close());
    const rl = limit({ registry });
    const agent = agentWith(rl);

    const first = get(agent, `${a}/hang/0`);
    await hold.server.waitForRequests(1);
    const second = get(agent, `${a}/hang/1`);
    expect((await get(agent, `${other.origin}/`)).status).toBe(200);
    const third = get(agent, `${a}/hang/2`);
    // The second and the third wait at the one gate of the origin's one limiter.
    const limiterOfA = registry.limiterFor(a)!;
    await vi.waitFor(() => expect(runtimeOf(rl).gateOf(limiterOfA)?.waiting).toBe(2));
    expect(runtimeOf(rl).gateOf(limiterOfA)?.inFlight).toBe(1);
    expect(hold.server.requests).toBe(1);
    for (let i = 0; i < 3; i++) {
      await hold.server.waitForRequests(i + 1);
      hold.answerOne();
    }
    expect((await Promise.all([first, second, third])).map((r) => r.status)).toEqual([200, 200, 200]);
    expect(hold.maxInFlight).toBe(1);
  });
});
