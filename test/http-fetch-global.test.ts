import { Agent } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import {
  cleanups,
  installGlobal,
  keepGlobalDispatcher,
  NEVER_BINDS,
  serve,
} from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// Node's own fetch (its bundled undici), routed through an undici 7 Agent with the interceptor:
// `setGlobalDispatcher(new Agent().compose(adaptiveRateLimit()))`.

keepGlobalDispatcher();

/** Answers the first `n` requests with a 429 and `Retry-After: 0`, then lets the bucket decide. */
function first429s(n: number) {
  let left = n;
  return (_req: unknown, res: import('node:http').ServerResponse) => {
    if (left <= 0) return false;
    left--;
    res.writeHead(429, { 'retry-after': '0' }).end('slow down');
    return true;
  };
}

describe("Node's global fetch through setGlobalDispatcher", () => {
  it('meters a GET and retries its 429', async () => {
    const server = await serve({ respond: first429s(1) });
    const rl = installGlobal({ default: NEVER_BINDS });

    const response = await fetch(`${server.origin}/items?page=2`);

    expect(response.status).toBe(200);
    expect(await response.text()).toBe('ok GET /items?page=2');
    expect(server.received.map((r) => r.status)).toEqual([429, 200]);
    expect(rl.registry.get(server.origin)?.snapshot().throttles).toBe(1);
  });

  it('retries a POST with a JSON body intact', async () => {
    const server = await serve({ respond: first429s(2) });
    installGlobal({ default: NEVER_BINDS });
    const json = JSON.stringify({ name: 'widget', tags: ['a', 'b'], note: 'é'.repeat(100) });

    const response = await fetch(`${server.origin}/widgets`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: json,
    });

    expect(response.status).toBe(200);
    expect(server.received.map((r) => [r.status, r.body])).toEqual([
      [429, json],
      [429, json],
      [200, json],
    ]);
    for (const r of server.received) {
      expect(r.headers['content-length']).toBe(String(Buffer.byteLength(json)));
    }
  });

  it('retries a streamed upload (duplex: half) with its bytes', async () => {
    const server = await serve({ respond: first429s(1) });
    installGlobal({ default: NEVER_BINDS });
    const parts = ['streamed ', 'upload'];
    const body = new ReadableStream({
      pull(controller) {
        const part = parts.shift();
        if (part === undefined) controller.close();
        else controller.enqueue(new TextEncoder().encode(part));
      },
    });

    const response = await fetch(`${server.origin}/upload`, {
      method: 'PUT',
      body,
      duplex: 'half',
    } as RequestInit);

    expect(response.status).toBe(200);
    expect(server.received.map((r) => r.body)).toEqual(['streamed upload', 'streamed upload']);
  });

  it('hands over the 429 for a body longer than maxReplayBodyBytes, sent once', async () => {
    const server = await serve({ respond: first429s(1) });
    installGlobal({ default: NEVER_BINDS, maxReplayBodyBytes: 10 });

    const response = await fetch(`${server.origin}/big`, { method: 'POST', body: 'more than ten bytes' });

    expect(response.status).toBe(429);
    expect(await response.text()).toBe('slow down');
    expect(server.received.map((r) => r.body)).toEqual(['more than ten bytes']);
  });

  it('returns the 429 response after maxAttempts', async () => {
    const server = await serve({ capacity: 0, retryAfter: '0' });
    installGlobal({ default: NEVER_BINDS, maxAttempts: 3 });

    const response = await fetch(`${server.origin}/`);

    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toBe('0');
    expect(server.requests).toBe(3);
  });

  it('rejects a fetch aborted while it waits, before the server sees it, and returns its units', async () => {
    const server = await serve({ capacity: 1, retryAfter: '600' });
    const clock = new ManualClock();
    const rl = installGlobal({ clock, maxAttempts: 1, default: { maxWait: 3_600_000 } });
    await (await fetch(`${server.origin}/`)).text();
    expect((await fetch(`${server.origin}/`)).status).toBe(429); // paused for 10 minutes
    const limiter = rl.registry.get(server.origin);
    const abort = new AbortController();

    const pending = fetch(`${server.origin}/waiting`, { signal: abort.signal });
    await until(() => limiter?.snapshot().queued === 1, 'the request to queue');
    abort.abort();

    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    await until(() => limiter?.snapshot().queued === 0, 'the reservation to be returned');
    expect(limiter?.snapshot().queuedUnits).toBe(0);
    expect(server.requests).toBe(2);
  });

  it('rejects with a TypeError whose cause is the RateLimitRejectedError', async () => {
    const server = await serve({ capacity: 0, retryAfter: '600' });
    installGlobal({ clock: new ManualClock(), maxAttempts: 1 });
    await (await fetch(`${server.origin}/`)).text();

    const error = await fetch(`${server.origin}/`).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TypeError);
    expect((error as TypeError).cause).toBeInstanceOf(RateLimitRejectedError);
    expect((error as TypeError).cause).toMatchObject({ reason: 'max-wait' });
    expect(server.requests).toBe(1);
  });

  it('meters fetch(url, { dispatcher }) with that dispatcher', async () => {
    const server = await serve({ respond: first429s(1) });
    const rl = adaptiveRateLimit({ default: NEVER_BINDS });
    const agent = new Agent();
    cleanups.push(
      () => agent.close(),
      () => rl.close(),
    );

    const response = await fetch(`${server.origin}/`, { dispatcher: agent.compose(rl) } as RequestInit);

    expect(response.status).toBe(200);
    expect(server.requests).toBe(2);
  });
});
