import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { cleanups, holdingServer, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// docs/partitions.md: "customer A's 429 with Retry-After: 20 pauses A, not B", and under memory
// pressure "a paused one gives way to a pause record (maxPausedOrigins), and its next limiter
// starts with that pause". The origin's own limiter is the first credential's (A's): its pause
// record is A's pause. When the origin's limiter is made again, the first credential seen claims
// it again: A's, so B does not inherit A's Retry-After.

/**
 * The origin `respond` answers (see `serve`), two other origins, and a fetch wrapper over a
 * registry of at most 2 origin limiters on a manual clock; `call` sends with `Bearer <key>`.
 */
async function threeOrigins(options: Parameters<typeof serve>[0]) {
  const server = await serve(options);
  const other = await serve();
  const third = await serve();
  const clock = new ManualClock();
  const registry = new RateLimiterRegistry({ clock, maxOriginLimiters: 2 });
  cleanups.push(() => registry.close());
  const f = rateLimitedFetch({ registry, maxAttempts: 1 });
  cleanups.push(() => f.close());
  const call = (origin: string, key?: string, signal?: AbortSignal) =>
    f(`${origin}/x`, { headers: key === undefined ? {} : { authorization: `Bearer ${key}` }, signal }).then(
      (r) => r.status,
      (e: unknown) => (e instanceof Error ? e.name : e),
    );
  return { server, other, third, registry, call };
}

describe('a pause record of the origin limiter (credential A) and the claim that follows', () => {
  it("B, never throttled, is not held by A's Retry-After: 600 after both limiters were dropped", async () => {
    // A is refused with Retry-After: 600; everyone else is answered 200.
    const { server, other, third, registry, call } = await threeOrigins({
      respond: (req, res) => {
        if (req.headers.authorization === 'Bearer A')
          res.writeHead(429, { 'retry-after': '600' }).end('slow');
        else res.writeHead(200).end('ok');
        return true;
      },
    });

    expect(await call(server.origin, 'A')).toBe(429); // A claims the origin's limiter; paused 600 s
    expect(await call(server.origin, 'B')).toBe(200); // B's own partition limiter
    const origin = new URL(server.origin).origin;
    expect(registry.get(origin)?.snapshot().pausedUntil).toBe(600_000);
    // Two other origins make room: A's paused limiter becomes a pause record, B's idle one goes.
    expect(await call(other.origin)).toBe(200);
    expect(await call(third.origin)).toBe(200);
    expect(registry.names().some((n) => n.startsWith(origin))).toBe(false);

    // B calls again: it was never throttled, its quota is its own.
    const abort = new AbortController();
    cleanups.push(() => abort.abort());
    let b: unknown;
    void call(server.origin, 'B', abort.signal).then(
      (s) => (b = s),
      (e: unknown) => (b = e),
    );
    await until(() => b !== undefined, "B's answer (held by A's 600 s pause?)", 2_000);
    // Before: RateLimitRejectedError 'max-wait' (B claimed the origin's new limiter, paused by A's record).
    expect(b instanceof Error ? `${b.name}: ${b.message}` : b).toBe(200);
  });

  it("B is not held by A's recorded pause when no limiter can be dropped (every one in flight)", async () => {
    const server = await serve({
      respond: (req, res) => {
        if (req.headers.authorization === 'Bearer A')
          res.writeHead(429, { 'retry-after': '600' }).end('slow');
        else res.writeHead(200).end('ok');
        return true;
      },
    });
    const busy = await Promise.all([holdingServer(), holdingServer()]);
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({ clock, maxOriginLimiters: 2, maxPausedOrigins: 1 });
    cleanups.push(() => registry.close());
    const f = rateLimitedFetch({ registry, maxAttempts: 1 });
    cleanups.push(() => f.close());
    const abort = new AbortController();
    cleanups.push(() => abort.abort());
    const call = (origin: string, path: string, key?: string) =>
      f(`${origin}${path}`, {
        headers: key === undefined ? {} : { authorization: `Bearer ${key}` },
        signal: abort.signal,
      }).then((r) => r.status);
    const origin = new URL(server.origin).origin;

    expect(await call(server.origin, '/x', 'A')).toBe(429); // A claims the origin's limiter; paused 600 s
    // Two requests held in flight to two other origins: A's paused limiter becomes a record, and
    // then no limiter can be dropped (both busy).
    const held = busy.map((b) => call(b.server.origin, '/slow').catch(() => undefined));
    await until(() => busy.every((b) => b.held.length === 1), 'both held requests at their servers', 2_000);
    expect(registry.names().some((n) => n.startsWith(origin))).toBe(false);

    let b: unknown;
    void call(server.origin, '/x', 'B').then(
      (s) => (b = s),
      (e: unknown) => (b = e),
    );
    await until(() => b !== undefined, "B's answer (held by A's 600 s pause?)", 2_000);
    // Before: RateLimitRejectedError 'max-wait' (the overflow limiter, paused by A's record).
    expect(b instanceof Error ? `${b.name}: ${b.message}` : b).toBe(200);
    // A is still paused: its next call waits out its own 600 s, and is refused.
    await expect(call(server.origin, '/x', 'A')).rejects.toMatchObject({ name: 'RateLimitRejectedError' });
    for (const x of busy) for (const res of x.held) res.writeHead(200).end('ok');
    await Promise.all(held);
  });

  it("B's own recorded pause is kept when the origin's limiter was dropped idle (B does not claim it)", async () => {
    // B is refused with Retry-After: 600; A (the origin limiter's first credential) is answered 200.
    let sentForB = 0;
    const { server, other, third, registry, call } = await threeOrigins({
      respond: (req, res) => {
        if (req.headers.authorization !== 'Bearer B') return false;
        sentForB++;
        res.writeHead(429, { 'retry-after': '600' }).end('slow');
        return true;
      },
    });

    expect(await call(server.origin, 'A')).toBe(200); // A claims the origin's limiter
    expect(await call(server.origin, 'B')).toBe(429); // B's own limiter, paused 600 s
    // Two other origins make room: the origin's idle limiter goes, then B's paused one becomes a
    // pause record.
    expect(await call(other.origin)).toBe(200);
    expect(await call(third.origin)).toBe(200);
    const origin = new URL(server.origin).origin;
    expect(registry.names().some((n) => n.startsWith(origin))).toBe(false);

    // B calls again within its 600 s: its pause is its own, and is kept.
    // Before: B claimed the origin's new limiter, unpaused, and its request was sent (a second 429).
    expect(await call(server.origin, 'B')).toBe('RateLimitRejectedError');
    expect(sentForB).toBe(1);
    expect(registry.get(origin)?.snapshot().pausedUntil).toBeUndefined();
  });
});
