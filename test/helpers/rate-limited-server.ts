import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request as the server saw it. */
export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The whole request body, as UTF-8. */
  body: string;
  /** The status it was answered with. */
  status: number;
}

export interface RateLimitedServerOptions {
  /** Requests the hidden bucket holds (and starts with). @default 5 */
  capacity?: number;
  /** Requests the bucket regains per minute, in real time. Keep it low for tests that count. @default 0 */
  refillPerMinute?: number;
  /** The status of a throttled answer. @default 429 */
  throttleStatus?: number;
  /** `Retry-After` of a throttled answer; `undefined` sends none. @default '1' */
  retryAfter?: string | undefined;
  /** Extra headers on every answer. */
  headers?: Record<string, string>;
  /**
   * Answers a request before the bucket is consulted; return `true` when it answered. For
   * scripted answers (a 503 with Retry-After, a redirect, ...).
   */
  respond?: (req: IncomingMessage, res: ServerResponse, body: string) => boolean;
}

/**
 * A `node:http` server on 127.0.0.1 (port 0) in front of a hidden token bucket, as a real
 * rate-limited API: a request that finds a token gets `200 ok <method> <path>`, one that does not
 * gets 429 (or `throttleStatus`) with `Retry-After`. Throttled requests do not take tokens (as
 * nginx). Every request is recorded with its whole body.
 */
export class RateLimitedServer {
  readonly received: ReceivedRequest[] = [];
  readonly #server = createServer((req, res) => this.#handle(req, res));
  readonly #options: RateLimitedServerOptions;
  #tokens: number;
  #refilledAt = performance.now();
  #port = 0;

  private constructor(options: RateLimitedServerOptions) {
    this.#options = options;
    this.#tokens = options.capacity ?? 5;
  }

  static async start(options: RateLimitedServerOptions = {}): Promise<RateLimitedServer> {
    const server = new RateLimitedServer(options);
    server.#server.listen(0, '127.0.0.1');
    await once(server.#server, 'listening');
    server.#port = (server.#server.address() as AddressInfo).port;
    return server;
  }

  /** `http://127.0.0.1:<port>` */
  get origin(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  get port(): number {
    return this.#port;
  }

  /** Requests seen, throttled or not. */
  get requests(): number {
    return this.received.length;
  }

  /** Requests answered with the throttle status. */
  get throttled(): number {
    return this.received.filter((r) => r.status === (this.#options.throttleStatus ?? 429)).length;
  }

  /** Resolves once the server has seen `n` requests; see {@link until}. */
  waitForRequests(n: number): Promise<void> {
    return until(() => this.received.length >= n, `the server to see ${n} requests`);
  }

  /** Sets the tokens left in the bucket (for tests that let traffic through again). */
  refill(tokens: number): void {
    this.#tokens = tokens;
  }

  /** Closes the server and every connection still open. */
  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve, reject) => this.#server.close((e) => (e ? reject(e) : resolve())));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    try {
      for await (const chunk of req) chunks.push(chunk as Buffer);
    } catch {
      return;
    }
    const body = Buffer.concat(chunks).toString('utf8');
    const entry: ReceivedRequest = {
      method: req.method ?? '',
      path: req.url ?? '',
      headers: req.headers,
      body,
      status: 0,
    };
    this.received.push(entry);
    for (const [name, value] of Object.entries(this.#options.headers ?? {})) res.setHeader(name, value);
    if (this.#options.respond?.(req, res, body)) {
      entry.status = res.statusCode;
      return;
    }
    this.#refill();
    if (this.#tokens >= 1) {
      this.#tokens -= 1;
      entry.status = 200;
      res.writeHead(200, { 'content-type': 'text/plain' }).end(`ok ${entry.method} ${entry.path}`);
      return;
    }
    const status = this.#options.throttleStatus ?? 429;
    entry.status = status;
    const retryAfter = 'retryAfter' in this.#options ? this.#options.retryAfter : '1';
    if (retryAfter !== undefined) res.setHeader('retry-after', retryAfter);
    res.writeHead(status, { 'content-type': 'text/plain' }).end('slow down');
  }

  #refill(): void {
    const now = performance.now();
    const perMs = (this.#options.refillPerMinute ?? 0) / 60_000;
    const capacity = this.#options.capacity ?? 5;
    this.#tokens = Math.min(capacity, this.#tokens + (now - this.#refilledAt) * perMs);
    this.#refilledAt = now;
  }
}

/**
 * Resolves once `condition()` holds, checking every millisecond or so; rejects after `limit`
 * checks. For waiting on I/O, never for measuring time.
 */
export async function until(condition: () => boolean, what = 'a condition', limit = 5_000): Promise<void> {
  for (let i = 0; !condition(); i++) {
    if (i >= limit) throw new Error(`gave up waiting for ${what}`);
    await new Promise<void>((resolve) => setTimeout(resolve, 1));
  }
}
