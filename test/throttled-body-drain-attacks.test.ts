import type { IncomingMessage, ServerResponse } from 'node:http';
import { Agent, request } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { CountingLimiter } from './helpers/counting-limiter.js';
import { cleanups, limit, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';
import {
  type Answer,
  countingServer,
  drip,
  getText,
  limitedAgent,
  limitedWrapper,
  nextTurn,
  turns,
} from './helpers/socket-counting-server.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

failOnUnhandledRejections();

/** Odd requests: a 429 (Retry-After: 0) written by `throttle`; even ones: 200 'ok'. */
const oddThrottled =
  (throttle: (res: ServerResponse, req: IncomingMessage) => void): Answer =>
  (req, res, n) => {
    if (n % 2 === 0) res.writeHead(200).end('ok');
    else throttle(res, req);
  };

/** A 429 (Retry-After: 0) whose body trickles without end. */
const trickle = (res: ServerResponse) => {
  res.writeHead(429, { 'retry-after': '0' });
  drip(res);
};

/** A 429 (Retry-After: 0) whose 20-byte body comes in two writes, 20 ms apart. */
const inTwoWrites = (res: ServerResponse) => {
  res.writeHead(429, { 'retry-after': '0', 'content-length': '20' });
  res.write('x'.repeat(10));
  setTimeout(() => res.end('y'.repeat(10)), 20);
};

/** A 429's shape: its name, the method that asks for it, and how the server writes it. */
type Shape = [name: string, method: 'GET' | 'HEAD', throttle: (res: ServerResponse) => void];
const HEAD: Shape = [
  'HEAD',
  'HEAD',
  (res) => res.writeHead(429, { 'retry-after': '0', 'content-length': '50' }).end(),
];
const EMPTY: Shape = [
  'content-length 0',
  'GET',
  (res) => res.writeHead(429, { 'retry-after': '0', 'content-length': '0' }).end(),
];
const CHUNKED: Shape = [
  'chunked with trailers',
  'GET',
  (res) => {
    res.writeHead(429, { 'retry-after': '0', trailer: 'x-why' });
    res.write('part one ');
    setTimeout(() => {
      res.addTrailers({ 'x-why': 'busy' });
      res.end('part two');
    }, 20);
  },
];
const EXACT_CAP: Shape = [
  'exactly 64 KiB in two writes',
  'GET',
  (res) => {
    res.writeHead(429, { 'retry-after': '0', 'content-length': String(64 * 1024) });
    res.write(Buffer.alloc(32 * 1024, 'a'));
    setTimeout(() => res.end(Buffer.alloc(32 * 1024, 'b')), 20);
  },
];

function expectSettled(limiter: CountingLimiter, granted: number) {
  expect({ granted: limiter.granted, open: limiter.open }).toEqual({ granted, open: 0 });
}

describe('attacks on the read of a 429 body before its retry', () => {
  it('interceptor: the 429 body fails mid-way (socket destroyed) while the retry waits for it', async () => {
    let destroy: (() => void) | undefined;
    const s = await countingServer(
      oddThrottled((res) => {
        res.writeHead(429, { 'retry-after': '0', 'content-length': '100' });
        res.write('x'.repeat(10));
        destroy = () => res.socket?.destroy();
      }),
    );
    const { limiter, dispatcher } = limitedAgent(s.origin, new ManualClock());
    const answer = settled(getText(dispatcher, `${s.origin}/`));
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(5);
    expect(s.requests).toBe(1);
    destroy?.();
    await until(() => answer.done, 'the request to end');
    expect(answer.error).toBeUndefined();
    expect(answer.value).toEqual({ status: 200, body: 'ok' });
    expectSettled(limiter, 2);
  });

  it('fetch wrapper: the 429 body fails mid-way (socket destroyed) while the retry waits for it', async () => {
    let destroy: (() => void) | undefined;
    const s = await countingServer(
      oddThrottled((res) => {
        res.writeHead(429, { 'retry-after': '0', 'content-length': '100' });
        res.write('x'.repeat(10));
        destroy = () => res.socket?.destroy();
      }),
    );
    const { limiter, limited } = limitedWrapper(s.origin, new ManualClock());
    const answer = settled(
      limited(`${s.origin}/`).then(async (r) => ({ status: r.status, body: await r.text() })),
    );
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(5);
    expect(s.requests).toBe(1);
    destroy?.();
    await until(() => answer.done, 'the call to end');
    expect(answer.error).toBeUndefined();
    expect(answer.value).toEqual({ status: 200, body: 'ok' });
    expectSettled(limiter, 2);
  });

  it.each([HEAD, EMPTY, CHUNKED, EXACT_CAP])(
    'interceptor: a 429 (%s) then 200, 10 times: its connections reused',
    async (_name, method, throttle) => {
      const s = await countingServer(oddThrottled(throttle));
      const { limiter, dispatcher } = limitedAgent(s.origin, new ManualClock());
      for (let i = 0; i < 10; i++) {
        expect((await getText(dispatcher, `${s.origin}/${i}`, method)).status).toBe(200);
        await nextTurn();
      }
      expect(s.requests).toBe(20);
      // undici closes the connection of every HEAD answer, with or without the interceptor.
      expect(s.connections).toBe(method === 'HEAD' ? 20 : 1);
      expectSettled(limiter, 20);
    },
  );

  it.each([HEAD, EMPTY, EXACT_CAP])(
    'fetch wrapper: a 429 (%s) then 200, 10 times: its connections reused',
    async (_name, method, throttle) => {
      const s = await countingServer(oddThrottled(throttle));
      const { limiter, limited } = limitedWrapper(s.origin, new ManualClock());
      for (let i = 0; i < 10; i++) {
        const r = await limited(`${s.origin}/${i}`, { method });
        await r.text();
        expect(r.status).toBe(200);
        await nextTurn();
      }
      expect(s.requests).toBe(20);
      // undici closes the connection of every HEAD answer, with or without the interceptor.
      expect(s.connections).toBe(method === 'HEAD' ? 20 : 1);
      expectSettled(limiter, 20);
    },
  );

  it('interceptor: 6 at once with maxConcurrent: 1 and connections: 1, each 429 in two writes then 200', async () => {
    const s = await countingServer(oddThrottled(inTwoWrites));
    const { limiter, dispatcher } = limitedAgent(
      s.origin,
      new ManualClock(),
      { connections: 1 },
      { maxConcurrent: 1 },
    );
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => getText(dispatcher, `${s.origin}/${i}`)),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(s.connections).toBe(1);
    expectSettled(limiter, 12);
  });

  it('fetch wrapper: 6 at once with maxConcurrent: 1, each 429 in two writes then 200', async () => {
    const s = await countingServer(oddThrottled(inTwoWrites));
    const { limiter, limited } = limitedWrapper(s.origin, new ManualClock(), { maxConcurrent: 1 });
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        limited(`${s.origin}/${i}`).then((r) => r.text().then(() => r.status)),
      ),
    );
    expect(answers).toEqual([200, 200, 200, 200, 200, 200]);
    expectSettled(limiter, 12);
  });

  it('interceptor: closed while the 429 body trickles before the retry (clock never advanced): the caller gets the 429 at once', async () => {
    const s = await countingServer(oddThrottled(trickle));
    const { limiter, rl, dispatcher } = limitedAgent(s.origin, new ManualClock());
    const answer = settled(request(`${s.origin}/`, { dispatcher }));
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(5);
    rl.close();
    await until(() => answer.done, 'the request to end', 500);
    expect(answer.value?.statusCode).toBe(429);
    answer.value?.body.destroy();
    expect(s.requests).toBe(1);
  });

  it('fetch wrapper: closed while the 429 body trickles before the retry (clock never advanced): the caller gets the 429 at once', async () => {
    const s = await countingServer(oddThrottled(trickle));
    const { limiter, limited } = limitedWrapper(s.origin, new ManualClock());
    const answer = settled(limited(`${s.origin}/`));
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(5);
    limited.close();
    await until(() => answer.done, 'the call to end', 500);
    expect(answer.value?.status).toBe(429);
    await answer.value?.body?.cancel();
    expect(s.requests).toBe(1);
  });
});

describe('more reads before a retry', () => {
  it('interceptor with its own registry: closed while the 429 body trickles: the caller gets the 429 at once', async () => {
    const s = await countingServer(oddThrottled(trickle));
    const clock = new ManualClock();
    const rl = limit({ limiters: { x: { origins: [s.origin], ...NEVER_BINDS } }, default: false, clock });
    const agent = new Agent();
    cleanups.push(() => agent.close());
    const answer = settled(request(`${s.origin}/`, { dispatcher: agent.compose(rl) }));
    await until(() => s.requests === 1, 'the 429');
    await turns(10);
    rl.close();
    await until(() => answer.done, 'the request to end', 500);
    expect(answer.value?.statusCode).toBe(429);
    answer.value?.body.destroy();
    expect(s.requests).toBe(1);
  });

  it("Node's fetch over the composed dispatcher: an abort while the body is read before the retry ends it with its reason", async () => {
    const s = await countingServer(oddThrottled(trickle));
    const { limiter, dispatcher } = limitedAgent(s.origin, new ManualClock());
    const abort = new AbortController();
    const reason = new Error('caller gave up');
    const answer = settled(fetch(`${s.origin}/`, { dispatcher, signal: abort.signal } as RequestInit));
    await until(() => limiter.granted === 2, 'the retry to be granted');
    await turns(10);
    abort.abort(reason);
    await until(() => answer.done, 'the call to end', 500);
    expect(answer.error).toBe(reason);
    // fetch rejects at the abort itself; the request's books settle on a later turn.
    await until(() => limiter.open === 0, 'the retry permit to settle', 500);
    expect(s.requests).toBe(1);
    expectSettled(limiter, 2);
  });

  it('a 429 body of 64 KiB + 1 in two writes is cut at the cap and the retry goes at once', async () => {
    const s = await countingServer(
      oddThrottled((res) => {
        res.writeHead(429, { 'retry-after': '0', 'content-length': String(64 * 1024 + 1) });
        res.write(Buffer.alloc(32 * 1024, 'a'));
        setTimeout(() => res.end(Buffer.alloc(32 * 1024 + 1, 'b')), 20);
      }),
    );
    const { limiter, dispatcher } = limitedAgent(s.origin, new ManualClock());
    expect(await getText(dispatcher, `${s.origin}/`)).toEqual({ status: 200, body: 'ok' });
    const { limiter: l2, limited } = limitedWrapper(s.origin, new ManualClock());
    const r = await limited(`${s.origin}/`);
    expect({ status: r.status, body: await r.text() }).toEqual({ status: 200, body: 'ok' });
    expectSettled(limiter, 2);
    expectSettled(l2, 2);
  });
});

describe('under fake timers (the default clock)', () => {
  it('a 429 body that ends goes on to its retry with no timer run: the read waits on the socket, not on the clock', async () => {
    let end: (() => void) | undefined;
    const s = await countingServer(
      oddThrottled((res) => {
        res.writeHead(429, { 'retry-after': '0', 'content-length': '20' });
        res.write('x'.repeat(10));
        end = () => res.end('y'.repeat(10));
      }),
    );
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'Date'] });
    try {
      const rl = limit({ limiters: { x: { origins: [s.origin], ...NEVER_BINDS } }, default: false });
      const agent = new Agent();
      cleanups.push(() => agent.close());
      const answer = settled(getText(agent.compose(rl), `${s.origin}/`));
      for (let i = 0; i < 200 && end === undefined; i++) await nextTurn();
      for (let i = 0; i < 20; i++) await nextTurn();
      expect(s.requests).toBe(1);
      end?.();
      for (let i = 0; i < 2000 && !answer.done; i++) await nextTurn();
      expect(answer.value).toEqual({ status: 200, body: 'ok' });
      expect(s.connections).toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });
});
