import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { CountingLimiter } from './helpers/counting-limiter.js';
import { agentWith, cleanups, limit, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

// Attack on the interceptor at undici's edges: CONNECT and upgrades, 1xx answers, handlers
// that misbehave, bodies of every kind. Real node:http servers on 127.0.0.1, real undici
// Agents, a ManualClock for the limiters; every loop is bounded, no duration is asserted.

failOnUnhandledRejections();

interface Seen {
  method: string;
  url: string;
}

/**
 * A node:http server on 127.0.0.1: `answer` answers each request (or holds it: return false, the
 * response is kept in `held`); `connect` answers a CONNECT on its raw socket. Closed after the test.
 */
async function server(
  answer: (req: IncomingMessage, res: ServerResponse, n: number) => boolean,
  connect?: (req: IncomingMessage, socket: Duplex, n: number) => void,
) {
  const seen: Seen[] = [];
  const held: ServerResponse[] = [];
  const sockets = new Set<Socket>();
  const s = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '' });
    if (!answer(req, res, seen.length)) held.push(res);
  });
  s.on('connect', (req: IncomingMessage, socket: Duplex) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '' });
    socket.on('error', () => {});
    if (connect !== undefined) connect(req, socket, seen.length);
    else socket.destroy();
  });
  s.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  const origin = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  cleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  });
  return { origin, seen, held };
}

/** A limiter we own behind `origin` (named `x`), with an interceptor on it; `default: false`. */
function owned(
  origin: string,
  route: { maxConcurrent?: number } = {},
  adapter: Record<string, unknown> = {},
) {
  const clock = new ManualClock();
  const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
  cleanups.push(() => limiter.close());
  const rl = limit({
    limiters: { x: { origins: [origin], limiter, ...route } },
    default: false,
    clock,
    ...adapter,
  });
  return { clock, limiter, rl };
}

/** A handler of undici's current API that records every callback it gets. */
function recorder() {
  const calls: string[] = [];
  let controller: Dispatcher.DispatchController | undefined;
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart(c) {
      controller = c;
      calls.push('start');
    },
    onRequestUpgrade(_c, status, _headers, socket) {
      calls.push(`upgrade ${status}`);
      socket.destroy();
    },
    onResponseStart(_c, status) {
      calls.push(`response ${status}`);
    },
    onResponseData() {},
    onResponseEnd() {
      calls.push('end');
    },
    onResponseError(_c, error) {
      calls.push(`error ${(error as Error).message}`);
    },
  };
  return {
    calls,
    handler,
    get controller() {
      return controller;
    },
  };
}

describe('CONNECT and upgrades', () => {
  it('never sends a CONNECT again once its caller has the socket, even when a proxy answers it 429 (sent after a wait for a slot)', async () => {
    const { origin, seen, held } = await server(
      () => false,
      (_req, socket) => socket.write('HTTP/1.1 429 Too Many Requests\r\nretry-after: 0\r\n\r\n'),
    );
    const { rl, limiter } = owned(origin, { maxConcurrent: 1 });
    const agent = agentWith(rl);
    // The one slot is taken: the CONNECT waits for it, then goes through the attempt loop.
    const slow = agent.request({ origin, path: '/slow', method: 'GET' }).catch(() => {});
    await until(() => held.length === 1, 'the slow request to arrive');
    const r = recorder();
    agent.dispatch({ origin, path: '127.0.0.1:9', method: 'CONNECT' }, r.handler);
    held[0]?.writeHead(200).end('ok');
    await slow;
    await until(() => r.calls.length >= 2, 'the CONNECT to be answered');
    // Give a retry every chance to go out and come back.
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(seen.filter((s) => s.method === 'CONNECT')).toHaveLength(1);
    expect(r.calls).toEqual(['start', 'upgrade 429']);
    expect(limiter.open).toBe(0);
  });
});

describe('large answers after a retry', () => {
  it('hands over a 1 MiB answer to a retried request whole', async () => {
    const big = Buffer.alloc(1024 * 1024, 'x');
    const { origin } = await server((_req, res, n) => {
      if (n === 1) res.writeHead(429, { 'retry-after': '0' }).end('slow down');
      else res.writeHead(200, { 'content-length': String(big.length) }).end(big);
      return true;
    });
    const { rl } = owned(origin);
    const agent = agentWith(rl);
    for (let i = 0; i < 3; i++) {
      const r = await agent.request({ origin, path: `/big${i}`, method: 'GET' });
      expect(r.statusCode).toBe(i === 0 ? 200 : 200);
      expect((await r.body.arrayBuffer()).byteLength).toBe(big.length);
    }
  });
});

describe('probes', () => {
  it('HEAD: a 429 with no body is retried and the 200 handed over', async () => {
    const { origin, seen } = await server((_req, res, n) => {
      if (n === 1) res.writeHead(429, { 'retry-after': '0', 'content-length': '9' }).end();
      else res.writeHead(200, { 'content-length': '5' }).end();
      return true;
    });
    const { rl, limiter } = owned(origin);
    const agent = agentWith(rl);
    const r = await agent.request({ origin, path: '/', method: 'HEAD' });
    expect(r.statusCode).toBe(200);
    expect(await r.body.text()).toBe('');
    expect(seen).toHaveLength(2);
    expect(limiter.open).toBe(0);
  });

  it('the last 429 handed back keeps its trailers', async () => {
    const { origin } = await server((_req, res) => {
      res.writeHead(429, { 'retry-after': '0', trailer: 'x-t', 'transfer-encoding': 'chunked' });
      res.write('slow');
      res.addTrailers({ 'x-t': 'yes' });
      res.end();
      return true;
    });
    const { rl } = owned(origin, {}, { maxAttempts: 2 });
    const agent = agentWith(rl);
    const r = await agent.request({ origin, path: '/', method: 'GET' });
    expect(r.statusCode).toBe(429);
    expect(await r.body.text()).toBe('slow');
    expect(r.trailers).toEqual({ 'x-t': 'yes' });
  });

  it('stream() and pipeline() get the retried answer', async () => {
    const { origin } = await server((req, res, n) => {
      if (n % 2 === 1) res.writeHead(429, { 'retry-after': '0' }).end('slow down');
      else res.writeHead(200).end(`ok ${req.url}`);
      return true;
    });
    const { rl } = owned(origin);
    const agent = agentWith(rl);
    const chunks: Buffer[] = [];
    const { Writable, Readable } = await import('node:stream');
    await agent.stream(
      { origin, path: '/s', method: 'GET' },
      () =>
        new Writable({
          write(chunk, _enc, cb) {
            chunks.push(chunk as Buffer);
            cb();
          },
        }),
    );
    expect(Buffer.concat(chunks).toString()).toBe('ok /s');
    const { pipeline } = await import('node:stream/promises');
    const got: Buffer[] = [];
    await pipeline(
      Readable.from([]),
      agent.pipeline({ origin, path: '/p', method: 'GET' }, ({ body }) => body),
      new Writable({
        write(chunk, _enc, cb) {
          got.push(chunk as Buffer);
          cb();
        },
      }),
    );
    expect(Buffer.concat(got).toString()).toBe('ok /p');
  });

  it('a caller that aborts in onResponseStart of the 429 handed back ends once, with its reason', async () => {
    const { origin } = await server((_req, res) => {
      res.writeHead(429, { 'retry-after': '0' }).end('slow down');
      return true;
    });
    const { rl, limiter } = owned(origin, {}, { maxAttempts: 2 });
    const agent = agentWith(rl);
    const r = recorder();
    const reason = new Error('enough');
    r.handler.onResponseStart = (c, status) => {
      r.calls.push(`response ${status}`);
      c.abort(reason);
    };
    agent.dispatch({ origin, path: '/', method: 'GET' }, r.handler);
    await until(() => r.calls.some((c) => c.startsWith('error')), 'the end');
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(r.calls).toEqual(['start', 'response 429', 'error enough']);
    expect(limiter.open).toBe(0);
  });

  it('a caller whose onResponseData throws on the 429 handed back ends once, with that error', async () => {
    const { origin } = await server((_req, res) => {
      res.writeHead(429, { 'retry-after': '0' }).end('slow down');
      return true;
    });
    const { rl, limiter } = owned(origin, {}, { maxAttempts: 2 });
    const agent = agentWith(rl);
    const r = recorder();
    r.handler.onResponseData = () => {
      throw new Error('bad data');
    };
    agent.dispatch({ origin, path: '/', method: 'GET' }, r.handler);
    await until(() => r.calls.some((c) => c.startsWith('error')), 'the end');
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(r.calls).toEqual(['start', 'response 429', 'error bad data']);
    expect(limiter.open).toBe(0);
  });

  it('103 Early Hints before a 429, then a 200: the caller sees the hints and the 200', async () => {
    const { origin } = await server((_req, res, n) => {
      res.writeEarlyHints({ link: '</a.css>; rel=preload' });
      if (n === 1) res.writeHead(429, { 'retry-after': '0' }).end('slow down');
      else res.writeHead(200).end('ok');
      return true;
    });
    const { rl, limiter } = owned(origin);
    const agent = agentWith(rl);
    const r = recorder();
    agent.dispatch({ origin, path: '/', method: 'GET' }, r.handler);
    await until(() => r.calls.includes('end') || r.calls.some((c) => c.startsWith('error')), 'the end');
    expect(r.calls.filter((c) => c !== 'response 103')).toEqual(['start', 'response 200', 'end']);
    expect(limiter.open).toBe(0);
  });
});

describe("rejection: 'response'", () => {
  it('answers a refused HEAD with a local 429 that has no body, as every HEAD answer', async () => {
    const { origin, seen } = await server((_req, res) => {
      res.writeHead(200, { 'content-length': '2' }).end();
      return true;
    });
    const clock = new ManualClock();
    const rl = limit({
      default: { initialUnitsPerMinute: 1, minUnitsPerMinute: 1, maxWait: 0 },
      clock,
      rejection: 'response',
    });
    const agent = agentWith(rl);
    const first = await agent.request({ origin, path: '/', method: 'HEAD' });
    await first.body.dump();
    // The next unit comes in a minute: refused at once (maxWait 0), answered locally.
    const refused = await agent.request({ origin, path: '/', method: 'HEAD' });
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['x-adaptive-rate-limit']).toBe('rejected;reason=max-wait');
    expect(await refused.body.text()).toBe('');
    expect(seen).toHaveLength(1);
  });

  it('answers a refused HEAD through the fetch wrapper with a local 429 that has no body', async () => {
    const { origin, seen } = await server((_req, res) => {
      res.writeHead(200, { 'content-length': '2' }).end();
      return true;
    });
    const f = rateLimitedFetch({
      default: { initialUnitsPerMinute: 1, minUnitsPerMinute: 1, maxWait: 0 },
      clock: new ManualClock(),
      rejection: 'response',
    });
    cleanups.push(() => f.close());
    expect((await f(origin, { method: 'HEAD' })).status).toBe(200);
    const refused = await f(origin, { method: 'HEAD' });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-adaptive-rate-limit')).toBe('rejected;reason=max-wait');
    expect(refused.body).toBeNull();
    expect(seen).toHaveLength(1);
  });
});

describe('a dispatcher below that ends a response without trailers', () => {
  /** An interceptor (below the limiter) that ends each response with no trailers argument. */
  const noTrailers: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) =>
    dispatch(opts, {
      ...bound(handler),
      onResponseEnd: (controller) =>
        (handler.onResponseEnd as (c: Dispatcher.DispatchController) => void)?.call(handler, controller),
    });

  function bound(handler: Dispatcher.DispatchHandler): Dispatcher.DispatchHandler {
    return {
      onRequestStart: (...a) => handler.onRequestStart?.(...a),
      onRequestUpgrade: (...a) => handler.onRequestUpgrade?.(...a),
      onResponseStart: (...a) => handler.onResponseStart?.(...a),
      onResponseData: (...a) => handler.onResponseData?.(...a),
      onResponseError: (...a) => handler.onResponseError?.(...a),
    };
  }

  it('still hands the caller the last 429 it held, whole', async () => {
    const { origin, seen } = await server((_req, res) => {
      res.writeHead(429, { 'retry-after': '0' }).end('slow down');
      return true;
    });
    const { rl, limiter } = owned(origin, {}, { maxAttempts: 2 });
    const agent = agentWith(noTrailers, rl);
    const r = recorder();
    agent.dispatch({ origin, path: '/', method: 'GET' }, r.handler);
    await until(() => seen.length === 2, 'the retry to arrive');
    await until(() => r.calls.includes('end') || r.calls.some((c) => c.startsWith('error')), 'the end');
    expect(r.calls).toEqual(['start', 'response 429', 'end']);
    expect(limiter.open).toBe(0);
  });
});
