import type { ServerResponse } from 'node:http';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { CountingLimiter } from './helpers/counting-limiter.js';
import { advanceUntil } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';
import {
  countingServer,
  drip,
  getText,
  limitedAgent,
  limitedWrapper,
  nextTurn,
  turns,
} from './helpers/socket-counting-server.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

// Regression: the retry of a 429 dropped the 429's body as it went out, and a body that had not
// ended by then (one that needs more than one socket read: written in two parts) was aborted,
// its keep-alive connection closed: the retry, and the next request, opened a new socket (21
// connections for 20 requests each answered 429 then 200). The body is now read to its end
// before the retry goes (up to the 64 KiB a held body keeps, for a bounded time), and the retry
// goes over the same socket. Real node:http server on 127.0.0.1, real undici Agent, Node's
// fetch; a ManualClock for the limiter, no duration asserted.

failOnUnhandledRejections();

/** The 429's body, JSON, in two parts (2 KiB in all). */
const FIRST = `{"error":{"message":"${'slow down '.repeat(100)}`;
const SECOND = `${'and wait '.repeat(100)}"}}`;

/**
 * A keep-alive server that answers every odd request with a 429 (`Retry-After: retryAfter`) whose
 * body comes in two writes, the second when `finish` (by default: 25 ms after the first), and every
 * even one with a 200; it counts the connections it accepts.
 */
function throttleInTwoWrites(
  retryAfter: string,
  finish: (end: () => void) => void = (end) => setTimeout(end, 25),
) {
  return countingServer((_req, res, n) => {
    if (n % 2 === 0) {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      return;
    }
    res.writeHead(429, {
      'retry-after': retryAfter,
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(FIRST) + Buffer.byteLength(SECOND),
    });
    res.write(FIRST);
    finish(() => res.end(SECOND));
  });
}

/** Every permit granted was told its answer; nobody waiting. */
function expectSettled(limiter: CountingLimiter, granted: number) {
  expect({ granted: limiter.granted, open: limiter.open }).toEqual({ granted, open: 0 });
  expect(limiter.snapshot().queued).toBe(0);
}

describe('a 429 body in two writes is read to its end before its retry, which reuses the socket', () => {
  it('20 requests through undici request, each 429 (Retry-After: 0) then 200: one connection in all', async () => {
    const server = await throttleInTwoWrites('0');
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock());

    for (let i = 0; i < 20; i++) {
      expect(await getText(dispatcher, `${server.origin}/${i}`)).toEqual({ status: 200, body: 'ok' });
      await nextTurn();
    }
    expect(server.requests).toBe(40);
    expect(server.connections).toBe(1);
    expectSettled(limiter, 40);
  });

  it('with connections: 1 the retry takes the one socket once the body has ended', async () => {
    const server = await throttleInTwoWrites('0');
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock(), { connections: 1 });

    for (let i = 0; i < 5; i++) {
      expect(await getText(dispatcher, `${server.origin}/${i}`)).toEqual({ status: 200, body: 'ok' });
      await nextTurn();
    }
    expect(server.requests).toBe(10);
    expect(server.connections).toBe(1);
    expectSettled(limiter, 10);
  });

  it("20 requests through Node's fetch with the composed dispatcher: one connection in all", async () => {
    const server = await throttleInTwoWrites('0');
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock());

    for (let i = 0; i < 20; i++) {
      const response = await fetch(`${server.origin}/${i}`, { dispatcher } as RequestInit);
      expect({ status: response.status, body: await response.text() }).toEqual({ status: 200, body: 'ok' });
      await nextTurn();
    }
    expect(server.connections).toBe(1);
    expectSettled(limiter, 40);
  });

  it("20 requests through the fetch wrapper over undici's fetch: one connection in all", async () => {
    const server = await throttleInTwoWrites('0');
    const clock = new ManualClock();
    const { limiter, limited } = limitedWrapper(server.origin, clock);

    for (let i = 0; i < 20; i++) {
      const response = await limited(`${server.origin}/${i}`);
      expect({ status: response.status, body: await response.text() }).toEqual({ status: 200, body: 'ok' });
      await nextTurn();
    }
    expect(server.connections).toBe(1);
    expectSettled(limiter, 40);
  });

  it('Retry-After: 1 on a manual clock, the body still coming at the grant: the retry waits for its end, one connection', async () => {
    let end: (() => void) | undefined;
    const server = await throttleInTwoWrites('1', (finish) => {
      end = finish;
    });
    const clock = new ManualClock();
    const { limiter, dispatcher } = limitedAgent(server.origin, clock);

    const answer = settled(getText(dispatcher, `${server.origin}/`));
    await until(() => end !== undefined, 'the 429 to start');
    await advanceUntil(clock, () => limiter.granted === 2, 'the retry to be granted');
    // The retry's turn to go (after the turn undici takes to give a socket back) has passed.
    await nextTurn();
    await nextTurn();
    end?.();
    await until(() => answer.done, 'the retry to be answered');
    expect(answer.error).toBeUndefined();
    expect(answer.value).toEqual({ status: 200, body: 'ok' });
    expect(server.requests).toBe(2);
    expect(server.connections).toBe(1);
    expectSettled(limiter, 2);
  });
});

describe('the read before the retry is bounded', () => {
  /** A server whose first answer is a 429 (`Retry-After: 0`) with `body`, then 200s; counts connections. */
  function firstThrottled(body: (res: ServerResponse) => void) {
    return countingServer((_req, res, n) => {
      if (n > 1) return void res.end('ok');
      res.writeHead(429, { 'retry-after': '0', 'content-type': 'application/json' });
      body(res);
    }, undefined);
  }

  it('a body that trickles without end is read for 1 s on the limiter clock, then cut, and the retry goes', async () => {
    const server = await firstThrottled(drip);
    const clock = new ManualClock();
    const { limiter, dispatcher } = limitedAgent(server.origin, clock);

    const answer = settled(getText(dispatcher, `${server.origin}/`));
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(10);
    expect(server.requests).toBe(1); // the retry waits for the body
    clock.advance(999);
    await turns(10);
    expect(server.requests).toBe(1);
    clock.advance(1);
    await until(() => answer.done, 'the retry to be answered');
    expect(answer.value).toEqual({ status: 200, body: 'ok' });
    expect(server.requests).toBe(2);
    expect(server.connections).toBeGreaterThan(1); // the cut closed the 429's connection
    expectSettled(limiter, 2);
  });

  it('an abort while the body is read before the retry: nothing more is sent, the caller gets its reason, the books settle', async () => {
    const server = await firstThrottled(drip);
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock());
    const abort = new AbortController();
    const reason = new Error('caller gave up');

    const answer = settled(request(`${server.origin}/`, { dispatcher, signal: abort.signal }));
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(10);
    abort.abort(reason);
    await until(() => answer.done, 'the request to end');
    expect(answer.error).toBe(reason);
    expect(server.requests).toBe(1);
    expectSettled(limiter, 2);
  });

  it('a 1 MiB body in two writes is cut at the 64 KiB kept, and the retry goes without waiting', async () => {
    const server = await firstThrottled((res) => {
      res.write(Buffer.alloc(512 * 1024, 'a'));
      setTimeout(() => res.end(Buffer.alloc(512 * 1024, 'b')), 25);
    });
    const { limiter, dispatcher } = limitedAgent(server.origin, new ManualClock());

    expect(await getText(dispatcher, `${server.origin}/`)).toEqual({ status: 200, body: 'ok' });
    expect(server.requests).toBe(2);
    expectSettled(limiter, 2);
  });

  it('the fetch wrapper: a body that trickles without end is cut after 1 s on the limiter clock, and the retry goes', async () => {
    const server = await firstThrottled(drip);
    const clock = new ManualClock();
    const { limiter, limited } = limitedWrapper(server.origin, clock);

    const answer = settled(
      limited(`${server.origin}/`).then(async (r) => ({ status: r.status, body: await r.text() })),
    );
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(10);
    expect(server.requests).toBe(1);
    clock.advance(1_000);
    await until(() => answer.done, 'the retry to be answered');
    expect(answer.value).toEqual({ status: 200, body: 'ok' });
    expect(server.connections).toBeGreaterThan(1);
    expectSettled(limiter, 2);
  });

  it('the fetch wrapper: an abort while the body is read before the retry ends the call with its reason at once', async () => {
    const server = await firstThrottled(drip);
    const clock = new ManualClock();
    const { limiter, limited } = limitedWrapper(server.origin, clock);
    const abort = new AbortController();
    const reason = new Error('caller gave up');

    const answer = settled(limited(`${server.origin}/`, { signal: abort.signal }));
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(10);
    abort.abort(reason);
    await until(() => answer.done, 'the call to end');
    expect(answer.error).toBe(reason);
    expect(server.requests).toBe(1);
    expectSettled(limiter, 2);
  });
});
