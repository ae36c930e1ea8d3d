import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, type Dispatcher, request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { ThrottledBodyTimeoutError } from '../src/errors.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { advanceUntil, cleanups } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';

const KIB = 1024;
const MAX_REPLAY = 1024 * KIB;

/**
 * First request: 429 Retry-After: 1 at once, body unread, connection closed (with `endless`, its
 * body never ends: a 429 that cannot be kept while its retry goes). Later: 200 with the body's length.
 */
async function earlyThenCount(endless = false) {
  const seen: { status: number; length: number }[] = [];
  const open: ServerResponse[] = [];
  const server = createServer((req, res) => {
    if (seen.length === 0) {
      seen.push({ status: 429, length: -1 });
      res.writeHead(429, { 'retry-after': '1', connection: 'close' });
      if (!endless) res.end('slow down');
      else {
        res.write('slow');
        open.push(res);
      }
      return;
    }
    let length = 0;
    const entry = { status: 0, length: -1 };
    seen.push(entry);
    req.on('data', (c: Buffer) => {
      length += c.length;
    });
    req.on('end', () => {
      entry.status = 200;
      entry.length = length;
      res.end(`got ${length}`);
    });
    req.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => {
    for (const r of open) r.destroy();
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

/** A PUT of 1.2 MiB (over the cap) whose second chunk lands just as attempt 2 is handed to undici. */
async function race(endless: boolean) {
  const server = await earlyThenCount(endless);
  const clock = new ManualClock();
  const rl = adaptiveRateLimit({ clock, maxReplayBodyBytes: MAX_REPLAY });
  // The slow producer: 600 KiB now, 600 KiB more once `release` is called (1.2 MiB > the cap).
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  async function* body() {
    yield Buffer.alloc(600 * KIB, 97);
    await gate;
    yield Buffer.alloc(600 * KIB, 98);
  }
  // Observes the attempts below the limiter: the producer's next chunk arrives just as attempt 2
  // is handed to undici (before its connection is up): a slow upstream's chunk landing then.
  let dispatches = 0;
  const observer: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) => {
    dispatches++;
    if (dispatches === 2) release();
    return dispatch(opts, handler);
  };
  const agent = new Agent();
  cleanups.push(
    () => agent.destroy(),
    () => rl.close(),
  );
  const dispatcher = agent.compose(observer, rl);

  const answer = settled(
    request(`${server.origin}/upload`, {
      dispatcher,
      method: 'PUT',
      body: body() as unknown as Dispatcher.DispatchOptions['body'],
    }).then(
      async (res) => {
        // An endless body is cut (see HELD_BODY_DRAIN_MS): the bytes kept, then its error.
        const chunks: string[] = [];
        try {
          for await (const chunk of res.body) chunks.push(String(chunk));
        } catch (error) {
          return { status: res.statusCode, body: chunks.join(''), error };
        }
        return { status: res.statusCode, body: chunks.join('') };
      },
      (error: unknown) => ({ error }),
    ),
  );
  await until(() => (rl.registry.limiterFor(server.origin)?.snapshot().throttles ?? 0) >= 1, 'the 429');
  clock.advance(60_000);
  // The retry reads on a 429 body still coming for up to 1 s on the clock before it goes.
  await advanceUntil(clock, () => answer.done, 'the answer');
  return { outcome: answer.value, seen: server.seen };
}

describe('a one-shot body whose pending chunk lands as its retry goes out', () => {
  it('hands the caller the 429 (not an untyped Error) when the body passes maxReplayBodyBytes while the retry connects', async () => {
    const { outcome, seen } = await race(false);
    // A longer body is sent once and its caller gets the 429.
    expect(outcome).toEqual({ status: 429, body: 'slow down' });
    expect(seen.filter((s) => s.status === 200)).toEqual([]);
  });

  it('hands the caller the 429 cut after 1 s when its body was still coming (not an untyped Error)', async () => {
    const { outcome, seen } = await race(true);
    // Read on for 1 s before the retry went, then cut: the 429 is kept, with the bytes that came.
    expect(outcome).toMatchObject({ status: 429, body: 'slow' });
    const { error } = outcome as { error: unknown };
    expect(error).toBeInstanceOf(ThrottledBodyTimeoutError);
    expect(error).toMatchObject({ code: 'ERR_THROTTLED_BODY_TIMEOUT', status: 429, timeoutMs: 1_000 });
    expect(seen.filter((s) => s.status === 200)).toEqual([]);
  });
});
