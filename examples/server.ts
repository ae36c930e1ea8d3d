/**
 * A stand-in for a rate-limited API, shared by the examples: a `node:http` server on 127.0.0.1
 * (port 0) with a hidden token-bucket quota. A request that finds a token gets 200 and a JSON echo
 * `{ method, path, body }`; one that does not gets 429 with `Retry-After`. `GET /old/<x>` answers
 * `301` to `/items/<x>` (it takes a token too, as every request does).
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ServerOptions {
  /** The hidden quota in requests per minute, refilled continuously. @default 600 */
  perMinute?: number;
  /** Requests the bucket holds (and starts with). @default one second of the quota */
  burst?: number;
  /** The `Retry-After` of a 429, in seconds. @default 1 */
  retryAfterSeconds?: number;
}

export interface RateLimitedServer {
  /** `http://127.0.0.1:<port>` */
  readonly origin: string;
  /** The quota, for printing. */
  readonly perMinute: number;
  /** Requests seen, and how many were answered 429. */
  readonly stats: { requests: number; throttled: number };
  /** Closes the server and its keep-alive connections. */
  close(): Promise<void>;
}

export async function startServer(options: ServerOptions = {}): Promise<RateLimitedServer> {
  const { perMinute = 600, retryAfterSeconds = 1 } = options;
  const burst = options.burst ?? Math.max(1, perMinute / 60);
  const stats = { requests: 0, throttled: 0 };
  let tokens = burst;
  let refilledAt = performance.now();

  const server = createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    stats.requests++;
    const now = performance.now();
    tokens = Math.min(burst, tokens + ((now - refilledAt) * perMinute) / 60_000);
    refilledAt = now;
    if (tokens < 1) {
      stats.throttled++;
      res.writeHead(429, { 'retry-after': String(retryAfterSeconds) }).end('slow down');
      return;
    }
    tokens -= 1;
    const path = req.url ?? '/';
    if (path.startsWith('/old/')) {
      res.writeHead(301, { location: path.replace('/old/', '/items/') }).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ method: req.method, path, body }));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    origin: `http://127.0.0.1:${port}`,
    perMinute,
    stats,
    close() {
      server.closeAllConnections();
      return new Promise((resolve, reject) => server.close((e) => (e ? reject(e) : resolve())));
    },
  };
}
