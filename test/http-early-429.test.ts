import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { Agent, request, setGlobalDispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { cleanups, keepGlobalDispatcher } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// A slow, long one-shot body answered early with a 429: the retry waits for units (a pause of
// 1 s on a manual clock) while the first attempt goes on sending its body past
// maxReplayBodyBytes. The body can then no longer be replayed: the caller must get the 429, not
// an error about a body that was not kept.

const CHUNK = 64 * 1024;
const CHUNKS = 48; // 3 MiB
const MAX_REPLAY = 1024 * 1024;

keepGlobalDispatcher();

/** Answers `429 Retry-After: 1` before reading the request body, then drains it (counted). */
async function earlyThrottleServer() {
  const stats = { requests: 0, bodyBytes: 0 };
  const server: Server = createServer((req, res) => {
    stats.requests++;
    res.writeHead(429, { 'retry-after': '1', 'content-type': 'text/plain' });
    res.write('slow down');
    // The answer ends once the body is drained: the request goes on sending meanwhile.
    req.on('data', (chunk: Buffer) => {
      stats.bodyBytes += chunk.byteLength;
    });
    req.on('end', () => res.end());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, stats };
}

/** 3 MiB in 64 KiB chunks, each yielded on the next macrotask; counts what was read. */
function slowBody(read: { bytes: number }) {
  return async function* () {
    for (let i = 0; i < CHUNKS; i++) {
      await new Promise((resolve) => setImmediate(resolve));
      read.bytes += CHUNK;
      yield Buffer.alloc(CHUNK, 97);
    }
  };
}

function interceptorAgent(clock: ManualClock) {
  const interceptor = adaptiveRateLimit({ clock, maxReplayBodyBytes: MAX_REPLAY });
  const agent = new Agent();
  cleanups.push(
    () => agent.destroy(),
    () => interceptor.close(),
  );
  return agent.compose(interceptor);
}

/** Lets the retry have its units once the first attempt has read the body past the cap. */
async function pastTheCapThenRetry(read: { bytes: number }, clock: ManualClock) {
  await until(() => read.bytes > MAX_REPLAY, 'the body to be read past maxReplayBodyBytes');
  // Past the pause, and past the refill of the rate the 429 cut.
  clock.advance(60_000);
}

describe('an early 429 on a slow one-shot body longer than maxReplayBodyBytes', () => {
  it.each([
    ['an async generator', (read: { bytes: number }) => slowBody(read)() as unknown as Readable],
    ['a Readable', (read: { bytes: number }) => Readable.from(slowBody(read)())],
  ])('hands the 429 to the caller of undici request() with %s', async (_name, body) => {
    const server = await earlyThrottleServer();
    const clock = new ManualClock();
    const dispatcher = interceptorAgent(clock);
    const read = { bytes: 0 };

    const answer = request(`${server.origin}/upload`, { dispatcher, method: 'PUT', body: body(read) });
    await pastTheCapThenRetry(read, clock);
    const res = await answer;

    expect(res.statusCode).toBe(429);
    expect(await res.body.text()).toBe('slow down');
    expect(server.stats.requests).toBe(1);
  });

  it("hands the 429 to Node's fetch through setGlobalDispatcher, with a ReadableStream body", async () => {
    const server = await earlyThrottleServer();
    const clock = new ManualClock();
    setGlobalDispatcher(interceptorAgent(clock));
    const read = { bytes: 0 };

    const answer = fetch(`${server.origin}/upload`, {
      method: 'PUT',
      body: Readable.toWeb(Readable.from(slowBody(read)())) as ReadableStream,
      duplex: 'half',
    } as RequestInit);
    await pastTheCapThenRetry(read, clock);
    const res = await answer;

    expect(res.status).toBe(429);
    expect(await res.text()).toBe('slow down');
    expect(server.stats.requests).toBe(1);
  });

  it('hands the 429 to the caller of the fetch wrapper, with an async generator body', async () => {
    const server = await earlyThrottleServer();
    const clock = new ManualClock();
    const f = rateLimitedFetch({ clock, maxReplayBodyBytes: MAX_REPLAY });
    cleanups.push(() => f.close());
    const read = { bytes: 0 };

    const answer = f(`${server.origin}/upload`, {
      method: 'PUT',
      body: slowBody(read)() as unknown as BodyInit,
      duplex: 'half',
    } as RequestInit);
    await pastTheCapThenRetry(read, clock);
    const res = await answer;

    expect(res.status).toBe(429);
    expect(await res.text()).toBe('slow down');
    expect(server.stats.requests).toBe(1);
  });
});
