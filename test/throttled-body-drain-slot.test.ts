import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request, fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { CountingLimiter } from './helpers/counting-limiter.js';
import { cleanups, limit, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

// Regression: the retry of a 429 read the rest of the 429's body (for up to 1 s on the limiter's
// clock) after it had taken its `maxConcurrent` slot, so a body that trickles without end held
// the slot for that second: at `maxConcurrent: 1`, three such requests took three 1 s steps of
// the clock, one after another. The body is now read before the retry waits for its slot: the
// others go meanwhile, and the three need one step. A first fix gave the slot back once the retry
// had its units and took one again after the read: its units were then taken before a wait for
// the slot behind the requests that came meanwhile (the newer request's test). The cap is never
// passed at the server, a body that ends at once keeps the order a retry always had, an abort or
// a close ends the read at once. Interceptor, the fetch wrapper over the undici package's fetch
// and over Node's own. Real node:http server, real undici Agent, ManualClock.

failOnUnhandledRejections();

/** How many 1 s steps of `clock` it takes until `done`: a step only once nothing moves without one. */
async function clockSteps(clock: ManualClock, done: () => boolean): Promise<number> {
  for (let steps = 0; steps < 10; steps++) {
    try {
      await until(done, 'every request answered', 300);
      return steps;
    } catch {
      clock.advance(1_000);
    }
  }
  throw new Error('not answered in 10 steps');
}

type Kind = 'interceptor' | 'fetch wrapper (undici fetch)' | "fetch wrapper (Node's fetch)";
const KINDS: Kind[] = ['interceptor', 'fetch wrapper (undici fetch)', "fetch wrapper (Node's fetch)"];

/** A limited client of `kind` for `origin` at `maxConcurrent`, over a limiter the test owns. */
function client(kind: Kind, origin: string, clock: ManualClock, maxConcurrent: number, maxWait?: number) {
  const limiter = new CountingLimiter({
    clock,
    ...NEVER_BINDS,
    ...(maxWait === undefined ? {} : { maxWait }),
  });
  cleanups.push(() => limiter.close());
  const limiters = { x: { origins: [origin], limiter, maxConcurrent } };
  if (kind === 'interceptor') {
    const rl = limit({ limiters, default: false, clock });
    const agent = new Agent();
    cleanups.push(() => agent.destroy());
    const dispatcher = agent.compose(rl);
    return {
      limiter,
      close: () => rl.close(),
      send: async (path: string, signal?: AbortSignal) => {
        const r = await request(`${origin}${path}`, { dispatcher, signal });
        return { status: r.statusCode, body: await r.body.text() };
      },
    };
  }
  const agent = new Agent();
  cleanups.push(() => agent.destroy());
  const limited = rateLimitedFetch({
    limiters,
    default: false,
    clock,
    ...(kind === "fetch wrapper (Node's fetch)"
      ? {}
      : {
          fetch: (input, init) =>
            undiciFetch(
              input as string,
              { ...init, dispatcher: agent } as never,
            ) as unknown as Promise<Response>,
        }),
  });
  cleanups.push(() => limited.close());
  return {
    limiter,
    close: () => limited.close(),
    send: async (path: string, signal?: AbortSignal) => {
      const r = await limited(`${origin}${path}`, { signal });
      return { status: r.status, body: await r.text() };
    },
  };
}

/**
 * A server that tells what it sees: `/slow*`'s first request is a 429 (Retry-After: 0) whose body
 * ends only when `end(path)` is called (`'never'`: it trickles until then), its second a 200;
 * `/held*` is answered only when `answer(path)` is called; any other path at once. `arrivals`:
 * each request as it comes, with `granted()` then; `max`: the most requests it held unanswered
 * (no headers written yet) at once.
 */
async function scriptedServer(granted: () => number, shortBody = false) {
  const arrivals: { path: string; granted: number }[] = [];
  const ends = new Map<string, () => void>();
  const answers = new Map<string, () => void>();
  const seen = new Map<string, number>();
  let active = 0;
  let max = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const path = req.url ?? '';
      arrivals.push({ path, granted: granted() });
      const n = (seen.get(path) ?? 0) + 1;
      seen.set(path, n);
      active++;
      max = Math.max(max, active);
      const head = (status: number, headers: Record<string, string> = {}) => {
        active--;
        res.writeHead(status, headers);
      };
      if (path.startsWith('/slow') && n === 1) {
        head(429, { 'retry-after': '0', 'content-type': 'text/plain' });
        if (shortBody) return void res.end('slow down');
        res.write('x');
        const drip = setInterval(() => res.write('x'), 5);
        res.on('close', () => clearInterval(drip));
        ends.set(path, () => {
          clearInterval(drip);
          res.end('x');
        });
      } else if (path.startsWith('/held')) {
        answers.set(path, () => {
          head(200);
          res.end('ok');
        });
      } else {
        // A moment before the headers: requests in flight overlap at the server if too many go.
        setTimeout(() => {
          head(200);
          res.end('ok');
        }, 2);
      }
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    arrivals,
    get max() {
      return max;
    },
    end: (path: string) => ends.get(path)?.(),
    answer: (path: string) => answers.get(path)?.(),
  };
}

/** Lets the client's sockets and microtasks settle (for I/O, never to measure time). */
const turns = (n = 20) => new Promise<void>((resolve) => setTimeout(resolve, n));

describe.each(KINDS)('%s: the slot while a retry reads its 429 body', (kind) => {
  it('3 at maxConcurrent: 1, each 429 with a body that never ends, then 200: one 1 s step, not 3', async () => {
    const clock = new ManualClock();
    let limiter: CountingLimiter | undefined;
    const s = await scriptedServer(() => limiter?.granted ?? 0);
    const c = client(kind, s.origin, clock, 1);
    limiter = c.limiter;
    const answers = [0, 1, 2].map((i) => settled(c.send(`/slow${i}`)));
    const steps = await clockSteps(clock, () => answers.every((a) => a.done));
    expect(answers.map((a) => a.value)).toEqual([0, 1, 2].map(() => ({ status: 200, body: 'ok' })));
    expect(s.arrivals).toHaveLength(6);
    expect(steps).toBe(1);
    expect({ granted: limiter.granted, open: limiter.open }).toEqual({ granted: 6, open: 0 });
  });

  it('a newer request takes the slot meanwhile; the retry takes its units only once it has a slot again', async () => {
    const clock = new ManualClock();
    let limiter: CountingLimiter | undefined;
    const s = await scriptedServer(() => limiter?.granted ?? 0);
    const c = client(kind, s.origin, clock, 1);
    limiter = c.limiter;
    const a = settled(c.send('/slow'));
    await until(() => s.arrivals.length === 1, 'the 429');
    await turns();
    const b = settled(c.send('/held'));
    await until(() => s.arrivals.length === 2, 'the newer request to go while the body is read');
    s.end('/slow');
    await turns();
    // The retry waits for the slot the newer request holds, with no units taken.
    expect(limiter.granted).toBe(2);
    s.answer('/held');
    await until(() => a.done && b.done, 'both answered');
    expect([a.value, b.value]).toEqual([
      { status: 200, body: 'ok' },
      { status: 200, body: 'ok' },
    ]);
    expect(s.arrivals).toEqual([
      { path: '/slow', granted: 1 },
      { path: '/held', granted: 2 },
      { path: '/slow', granted: 3 },
    ]);
    expect(s.max).toBe(1);
    expect({ granted: limiter.granted, open: limiter.open }).toEqual({ granted: 3, open: 0 });
  });

  it('maxConcurrent: 2 is never passed at the server: 6 requests, each a 429 whose body trickles without end, then 200', async () => {
    const clock = new ManualClock();
    const s = await scriptedServer(() => 0);
    const c = client(kind, s.origin, clock, 2);
    const answers = [0, 1, 2, 3, 4, 5].map((i) => settled(c.send(`/slow${i}`)));
    const steps = await clockSteps(clock, () => answers.every((a) => a.done));
    expect(answers.map((a) => a.value)).toEqual(answers.map(() => ({ status: 200, body: 'ok' })));
    expect(s.max).toBeLessThanOrEqual(2);
    expect(s.arrivals).toHaveLength(12);
    expect(steps).toBe(1);
  });

  it('a 429 whose body ends at once: answered with no step of the clock, in the order a retry always had', async () => {
    const clock = new ManualClock();
    const s = await scriptedServer(() => 0, true);
    const c = client(kind, s.origin, clock, 1);
    const answers = ['/slow', '/b', '/c'].map((path) => settled(c.send(path)));
    await until(() => answers.every((a) => a.done), 'every request answered');
    expect(answers.map((a) => a.value)).toEqual(answers.map(() => ({ status: 200, body: 'ok' })));
    expect(s.arrivals.map((a) => a.path)).toEqual(['/slow', '/b', '/c', '/slow']);
    expect(s.max).toBe(1);
  });

  it('a retry refused its slot after the read (max-wait) gives the caller the 429 with its body whole, not cut', async () => {
    const clock = new ManualClock();
    const s = await scriptedServer(() => 0);
    const c = client(kind, s.origin, clock, 1, 5_000);
    const a = settled(c.send('/slow'));
    await until(() => s.arrivals.length === 1, 'the 429');
    await turns();
    const b = settled(c.send('/held'));
    await until(() => s.arrivals.length === 2, 'the newer request to go while the body is read');
    clock.advance(1_000); // the read's 1 s: the retry now waits for the slot
    await turns();
    clock.advance(5_000); // its maxWait
    await turns();
    s.end('/slow');
    await until(() => a.done, 'the 429 to reach its caller');
    expect(a.error).toBeUndefined();
    expect(a.value?.status).toBe(429);
    expect(a.value?.body).toMatch(/^x{3,}$/);
    s.answer('/held');
    await until(() => b.done, 'the newer request answered');
    expect(s.arrivals).toHaveLength(2);
    expect(c.limiter.open).toBe(0);
  });

  it('an abort while the body is read ends the request with its reason at once (clock never advanced)', async () => {
    const clock = new ManualClock();
    const s = await scriptedServer(() => 0);
    const c = client(kind, s.origin, clock, 1);
    const abort = new AbortController();
    const reason = new Error('caller gave up');
    const a = settled(c.send('/slow', abort.signal));
    await until(() => s.arrivals.length === 1, 'the 429');
    await turns();
    abort.abort(reason);
    await until(() => a.done, 'the request to end');
    expect(a.error).toBe(reason);
    expect(s.arrivals).toHaveLength(1);
    expect(c.limiter.open).toBe(0);
  });

  it('closed while the body is read (clock never advanced): the caller gets the 429 at once, nothing more is sent', async () => {
    const clock = new ManualClock();
    const s = await scriptedServer(() => 0);
    const c = client(kind, s.origin, clock, 1);
    const a = settled(c.send('/slow'));
    await until(() => s.arrivals.length === 1, 'the 429');
    await turns();
    const closed = c.close();
    s.end('/slow');
    await closed;
    await until(() => a.done, 'the request to end');
    expect(a.value?.status).toBe(429);
    expect(s.arrivals).toHaveLength(1);
    expect(c.limiter.open).toBe(0);
  });
});
