import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
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
