/**
 * An API that announces its quota: a `node:http` server on 127.0.0.1 with a fixed-window quota
 * (`quota` requests per `windowSeconds`, windows counted from its start) that tells every
 * response what is left in one header family, and enforces it with 429 + `Retry-After`.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type OutgoingHttpHeaders, type Server } from 'node:http';

export type HeaderFamily = 'ietf' | 'github' | 'none';

export interface AnnouncingServerOptions {
  quota: number;
  windowSeconds: number;
  family: HeaderFamily;
  /** Seconds the server's clock (its `Date` and epoch resets) is ahead of the real one. @default 0 */
  skewSeconds?: number;
}

export interface AnnouncingServer {
  readonly url: string;
  /** Requests answered 200 and 429 so far. */
  readonly accepted: number;
  readonly throttled: number;
  /** Requests answered 200 in window `i` (0-based from the start). */
  acceptedIn(window: number): number;
  /** The window a request arriving now falls in, and ms until it ends. */
  window(): { index: number; leftMs: number };
  close(): Promise<void>;
}

export async function startAnnouncingServer(options: AnnouncingServerOptions): Promise<AnnouncingServer> {
  const { quota, windowSeconds, family, skewSeconds = 0 } = options;
  const windowMs = windowSeconds * 1000;
  const startedAt = Date.now();
  const perWindow: number[] = [];
  const stats = { accepted: 0, throttled: 0 };
  const windowAt = (now: number) => {
    const index = Math.floor((now - startedAt) / windowMs);
    return { index, leftMs: startedAt + (index + 1) * windowMs - now };
  };
  const announce = (remaining: number, leftMs: number, now: number): OutgoingHttpHeaders => {
    const t = Math.ceil(leftMs / 1000);
    if (family === 'ietf') {
      return {
        'ratelimit-policy': `"default";q=${quota};w=${windowSeconds}`,
        ratelimit: `"default";r=${remaining};t=${t}`,
      };
    }
    if (family === 'github') {
      const serverNow = now + skewSeconds * 1000;
      return {
        date: new Date(serverNow).toUTCString(),
        'x-ratelimit-limit': String(quota),
        'x-ratelimit-remaining': String(remaining),
        'x-ratelimit-used': String(quota - remaining),
        'x-ratelimit-reset': String(Math.ceil((serverNow + leftMs) / 1000)),
        'x-ratelimit-resource': windowSeconds === 60 ? 'search' : 'core',
      };
    }
    return {};
  };
  const server: Server = createServer((_req: IncomingMessage, res) => {
    const now = Date.now();
    const { index, leftMs } = windowAt(now);
    const used = perWindow[index] ?? 0;
    if (used < quota) {
      perWindow[index] = used + 1;
      stats.accepted++;
      res
        .writeHead(200, { 'content-type': 'text/plain', ...announce(quota - used - 1, leftMs, now) })
        .end('ok');
    } else {
      stats.throttled++;
      const headers = { 'retry-after': String(Math.ceil(leftMs / 1000)), ...announce(0, leftMs, now) };
      res.writeHead(429, headers).end('slow down');
    }
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    get accepted() {
      return stats.accepted;
    },
    get throttled() {
      return stats.throttled;
    },
    acceptedIn: (window) => perWindow[window] ?? 0,
    window: () => windowAt(Date.now()),
    close: async () => {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}
