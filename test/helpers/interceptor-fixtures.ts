import type { ServerResponse } from 'node:http';
import { Agent, type Dispatcher, getGlobalDispatcher, request, setGlobalDispatcher } from 'undici';
import { afterEach, beforeEach } from 'vitest';
import type { ManualClock } from '../../src/clock.js';
import { type AdaptiveRateLimitInterceptor, adaptiveRateLimit } from '../../src/http/interceptor.js';
import type { InterceptorOptions } from '../../src/http/options.js';
import { RateLimitedServer, type RateLimitedServerOptions, until } from './rate-limited-server.js';

// Fixtures of the interceptor tests: every server, interceptor and agent a test makes is closed
// after it, newest first. Importing this file registers the `afterEach` in the importing file.

/** Limits that never bind: tests that count requests must not wait in real time. */
export const NEVER_BINDS = { initialUnitsPerMinute: 6_000_000, minUnitsPerMinute: 6_000_000 };

export const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** For tests that set undici's global dispatcher: each test's is put back after it. */
export function keepGlobalDispatcher(): void {
  let previous: Dispatcher | undefined;
  beforeEach(() => {
    previous = getGlobalDispatcher();
  });
  afterEach(() => {
    if (previous !== undefined) setGlobalDispatcher(previous);
  });
}

/** Installs `new Agent().compose(adaptiveRateLimit(options))` as undici's global dispatcher (Node's fetch). */
export function installGlobal(options: InterceptorOptions = {}): AdaptiveRateLimitInterceptor {
  const interceptor = adaptiveRateLimit(options);
  const agent = new Agent();
  cleanups.push(
    () => agent.close(),
    () => interceptor.close(),
  );
  setGlobalDispatcher(agent.compose(interceptor));
  return interceptor;
}

export async function serve(options: RateLimitedServerOptions = {}): Promise<RateLimitedServer> {
  const server = await RateLimitedServer.start(options);
  cleanups.push(() => server.close());
  return server;
}

/**
 * A server that holds every request to `/slow` (its response not started, kept in `held`) and
 * answers the rest as {@link serve} does: a request in flight for as long as a test wants.
 */
export async function holdingServer(
  options: Omit<RateLimitedServerOptions, 'respond'> = {},
): Promise<{ server: RateLimitedServer; held: ServerResponse[] }> {
  const held: ServerResponse[] = [];
  const server = await serve({
    ...options,
    respond: (req, res) => {
      if (req.url !== '/slow') return false;
      held.push(res);
      return true;
    },
  });
  return { server, held };
}

/**
 * A server that answers the first `n` requests with a 429 (`Retry-After: 30`, and `answer(i)`'s
 * headers and body for the i-th, 1-based) and holds every one after (kept in `held`, unanswered):
 * a retry in flight, at the server, for as long as a test wants.
 */
export async function throttleThenHold(
  n = 1,
  answer: (i: number) => { headers?: Record<string, string>; body: string } = (i) => ({
    headers: { 'x-which': String(i) },
    body: `429 #${i}`,
  }),
): Promise<{ server: RateLimitedServer; held: ServerResponse[] }> {
  const held: ServerResponse[] = [];
  let seen = 0;
  const server = await serve({
    respond: (_req, res) => {
      seen++;
      if (seen > n) {
        held.push(res);
        return true;
      }
      const { headers = {}, body } = answer(seen);
      res.writeHead(429, { 'retry-after': '30', ...headers }).end(body);
      return true;
    },
  });
  return { server, held };
}

/** Advances `clock` a second at a time until `condition` holds (Retry-After pauses, queued retries). */
export async function advanceUntil(
  clock: ManualClock,
  condition: () => boolean,
  what: string,
): Promise<void> {
  await until(() => {
    if (!condition()) clock.advance(1_000);
    return condition();
  }, what);
}

export function limit(options: InterceptorOptions = {}): AdaptiveRateLimitInterceptor {
  const interceptor = adaptiveRateLimit(options);
  cleanups.push(() => interceptor.close());
  return interceptor;
}

export function agentWith(...chain: Dispatcher.DispatcherComposeInterceptor[]): Dispatcher {
  const agent = new Agent();
  cleanups.push(() => agent.close());
  return agent.compose(chain);
}

export async function get(
  dispatcher: Dispatcher,
  url: string,
  options: Partial<Dispatcher.RequestOptions> = {},
) {
  const response = await request(url, { dispatcher, ...options });
  return { status: response.statusCode, headers: response.headers, body: await response.body.text() };
}

/**
 * `n` requests at once through `dispatcher` to `url`: `statuses` in the order they settle (0 for
 * one that failed), and `all`, settled when every one has.
 */
export function getMany(dispatcher: Dispatcher, url: string, n: number) {
  const statuses: number[] = [];
  const all = Promise.all(
    Array.from({ length: n }, () =>
      get(dispatcher, url).then(
        (r) => statuses.push(r.status),
        () => statuses.push(0),
      ),
    ),
  );
  return { statuses, all };
}

/** Answers the first `n` requests with `status` (and headers), then lets the bucket decide. */
export function firstAnswers(n: number, status: number, headers: Record<string, string> = {}) {
  let left = n;
  return (_req: unknown, res: ServerResponse) => {
    if (left <= 0) return false;
    left--;
    res.writeHead(status, headers).end(`scripted ${status}`);
    return true;
  };
}
