import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, type Dispatcher, request, fetch as undiciFetch } from 'undici';
import type { ManualClock } from '../../src/clock.js';
import { rateLimitedFetch } from '../../src/http/fetch.js';
import { CountingLimiter } from './counting-limiter.js';
import { cleanups, limit, NEVER_BINDS } from './interceptor-fixtures.js';

// The socket tests' fixtures (a 429's retry and the connection it goes over): a node:http server
// on 127.0.0.1 that counts the connections it accepts, and a never-binding limiter the test owns
// behind the interceptor on an undici Agent or behind the fetch wrapper. Everything made is closed
// after the test (see `cleanups`).

/** Answers the n-th request (1-based), once its body has been read. */
export type Answer = (req: IncomingMessage, res: ServerResponse, n: number) => void;

/**
 * A node:http server on 127.0.0.1 answering with `answer`, counting the requests and the
 * connections it accepts; keep-alive for `keepAliveTimeout` ms (`undefined`: node's default).
 */
export async function countingServer(answer: Answer, keepAliveTimeout: number | undefined = 60_000) {
  let requests = 0;
  let connections = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => answer(req, res, ++requests));
  });
  if (keepAliveTimeout !== undefined) server.keepAliveTimeout = keepAliveTimeout;
  server.on('connection', () => connections++);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get requests() {
      return requests;
    },
    get connections() {
      return connections;
    },
  };
}

/**
 * An Agent (`agentOptions`) composed with the interceptor over a never-binding limiter the test
 * owns for `origin` (`extra`: more of its limiter entry's options, as `maxConcurrent`).
 */
export function limitedAgent(
  origin: string,
  clock: ManualClock,
  agentOptions: Agent.Options = {},
  extra = {},
) {
  const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
  const rl = limit({ limiters: { x: { origins: [origin], limiter, ...extra } }, default: false, clock });
  const agent = new Agent(agentOptions);
  cleanups.push(
    () => agent.close(),
    () => limiter.close(),
  );
  return { limiter, rl, dispatcher: agent.compose(rl) };
}

/**
 * `rateLimitedFetch` over a never-binding limiter the test owns for `origin`, on the `undici`
 * package's fetch over its Agent (Node's own fetch bundles another undici, which refuses an
 * undici 8 Agent: `invalid onRequestStart method`).
 */
export function limitedWrapper(origin: string, clock: ManualClock, extra = {}) {
  const limiter = new CountingLimiter({ clock, ...NEVER_BINDS });
  const agent = new Agent();
  cleanups.push(
    () => agent.close(),
    () => limiter.close(),
  );
  const limited = rateLimitedFetch({
    limiters: { x: { origins: [origin], limiter, ...extra } },
    default: false,
    clock,
    fetch: (input, init) =>
      undiciFetch(input as string, { ...init, dispatcher: agent } as never) as unknown as Promise<Response>,
  });
  cleanups.push(() => limited.close());
  return { limiter, limited };
}

/** One request through `dispatcher`: its status and whole body. */
export async function getText(dispatcher: Dispatcher, url: string, method: 'GET' | 'HEAD' = 'GET') {
  const response = await request(url, { dispatcher, method });
  return { status: response.statusCode, body: await response.body.text() };
}

/**
 * The turn undici takes to give a socket back to its pool after an answer ended: a caller's next
 * request sent before it opens a second connection, with or without the interceptor.
 */
export function nextTurn(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

/** `n` turns of the event loop (see {@link nextTurn}). */
export async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await nextTurn();
}

/** A body that never ends: one byte, then one every 5 ms until the connection closes. */
export function drip(res: ServerResponse): void {
  res.write('x');
  const timer = setInterval(() => res.write('x'), 5);
  res.on('close', () => clearInterval(timer));
}
