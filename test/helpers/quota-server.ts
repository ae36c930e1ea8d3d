/**
 * A rate-limited API for tests: a `node:http` server on 127.0.0.1 with a token-bucket quota.
 * A request with a token gets 200; one without gets 429 and a `Retry-After` in whole seconds.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';

export interface QuotaServer {
  readonly url: string;
  /** Requests answered 200 and 429 so far. */
  readonly accepted: number;
  readonly throttled: number;
  /** ms (performance.now) of the first and the last request, or undefined before any. */
  readonly firstAt: number | undefined;
  readonly lastAt: number | undefined;
  close(): Promise<void>;
}

/** Starts the server: `perMinute` units refilled continuously, `capacity` units of burst (starts full). */
export async function startQuotaServer(perMinute: number, capacity: number): Promise<QuotaServer> {
  const perMs = perMinute / 60_000;
  let tokens = capacity;
  let refilledAt = performance.now();
  const stats = {
    accepted: 0,
    throttled: 0,
    firstAt: undefined as number | undefined,
    lastAt: undefined as number | undefined,
  };
  const server: Server = createServer((_req, res) => {
    const now = performance.now();
    stats.firstAt ??= now;
    stats.lastAt = now;
    tokens = Math.min(capacity, tokens + (now - refilledAt) * perMs);
    refilledAt = now;
    if (tokens >= 1) {
      tokens -= 1;
      stats.accepted++;
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    } else {
      stats.throttled++;
      const seconds = Math.max(1, Math.ceil((1 - tokens) / perMs / 1000));
      res.writeHead(429, { 'retry-after': String(seconds) }).end();
    }
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  return {
    url: `http://127.0.0.1:${address.port}/`,
    get accepted() {
      return stats.accepted;
    },
    get throttled() {
      return stats.throttled;
    },
    get firstAt() {
      return stats.firstAt;
    },
    get lastAt() {
      return stats.lastAt;
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}
