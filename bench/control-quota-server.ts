/**
 * The control bench's quota server: a `node:http` API on 127.0.0.1 with a hidden token bucket in
 * units per minute. A request that finds a token is answered 200; one that does not, 429 with a
 * `Retry-After` of the whole seconds until the next token (at least 1). Throttled requests take no
 * token. For a while (`drop`) another client takes part of the quota: the bucket refills only
 * with what it leaves. `perMinute: Infinity` makes a server that never throttles.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Another client takes `takenFraction` of the quota from `fromMs` to `toMs` (ms on the server's clock). */
export interface QuotaDrop {
  fromMs: number;
  toMs: number;
  /** 0 to 1. */
  takenFraction: number;
}

/**
 * Every answer (200 and 429 alike) is sent after a lognormal delay: `medianMs` · e^(sigma·Z),
 * Z standard normal, clamped to [minMs, maxMs]. The bucket is read when the request arrives.
 */
export interface LatencyOptions {
  medianMs: number;
  sigma: number;
  minMs: number;
  maxMs: number;
}

/** One lognormal delay (ms) of `latency`, clamped. */
export function lognormalMs(latency: LatencyOptions, random: () => number = Math.random): number {
  // Box-Muller: 1 - random() is in (0, 1], so the log is finite.
  const z = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const ms = latency.medianMs * Math.exp(latency.sigma * z);
  return Math.min(latency.maxMs, Math.max(latency.minMs, ms));
}

export interface QuotaServerOptions {
  /** Units per minute the bucket refills with (> 0); `Infinity` never throttles. */
  perMinute: number;
  /** The bucket holds this many seconds of the quota (at least one unit) and starts full. */
  burstSeconds: number;
  drop?: QuotaDrop;
  /**
   * A 429 carries `Retry-After` (false: a bare 429 with no header at all, as Envoy's
   * `local_ratelimit` answers). @default true
   */
  retryAfter?: boolean;
  /** Answers after a heavy-tailed delay; none (loopback) when unset. */
  latency?: LatencyOptions;
  /** The server's clock in ms (monotonic; its zero is the run's start). @default performance.now */
  now?: () => number;
}

export interface QuotaServer {
  readonly url: string;
  readonly port: number;
  /** Requests answered 200 and 429 since the start. */
  readonly accepted: number;
  readonly throttled: number;
  /** A new run: the bucket full again, the counters at 0, the clock read anew. */
  reset(): void;
  close(): Promise<void>;
}

/** Units the quota has refilled from 0 to `t` (ms; negative before 0): the quota less what the drop took. */
export function refilledBy(t: number, perMinute: number, drop: QuotaDrop | undefined): number {
  const perMs = perMinute / 60_000;
  if (drop === undefined) return perMs * t;
  const inDrop = Math.max(0, Math.min(t, drop.toMs) - drop.fromMs);
  return perMs * (t - drop.takenFraction * inDrop);
}

/** Starts the server on a free port of 127.0.0.1. */
export async function startQuotaServer(options: QuotaServerOptions): Promise<QuotaServer> {
  const { perMinute, burstSeconds, drop, latency } = options;
  /** Sends `answer` now, or after a lognormal delay when the server has one. */
  const later = (answer: () => void): void => {
    if (latency === undefined) answer();
    else setTimeout(answer, lognormalMs(latency));
  };
  const now = options.now ?? (() => performance.now());
  const capacity = Math.max(1, (perMinute * burstSeconds) / 60);
  let tokens = capacity;
  let refilledAt = now();
  let accepted = 0;
  let throttled = 0;

  const server: Server = createServer((_req, res) => {
    const t = now();
    if (Number.isFinite(perMinute)) {
      tokens = Math.min(
        capacity,
        tokens + refilledBy(t, perMinute, drop) - refilledBy(refilledAt, perMinute, drop),
      );
    }
    refilledAt = t;
    if (!Number.isFinite(perMinute) || tokens >= 1) {
      if (Number.isFinite(perMinute)) tokens -= 1;
      accepted++;
      later(() => res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' }).end('ok'));
      return;
    }
    throttled++;
    const inDrop = drop !== undefined && t >= drop.fromMs && t < drop.toMs;
    const perMs = (perMinute * (inDrop ? 1 - drop.takenFraction : 1)) / 60_000;
    const seconds = perMs > 0 ? Math.max(1, Math.ceil((1 - tokens) / perMs / 1000)) : 1;
    const headers: Record<string, string> =
      options.retryAfter === false
        ? { 'content-length': '0' }
        : { 'retry-after': String(seconds), 'content-length': '0' };
    later(() => res.writeHead(429, headers).end());
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    port,
    get accepted() {
      return accepted;
    },
    get throttled() {
      return throttled;
    },
    reset() {
      tokens = capacity;
      refilledAt = now();
      accepted = 0;
      throttled = 0;
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}
