import diagnosticsChannel from 'node:diagnostics_channel';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import {
  Agent,
  Client,
  type Dispatcher,
  FormData,
  interceptors,
  Pool,
  request,
  fetch as undiciFetch,
} from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateController } from '../src/controllers/types.js';
import { DIAGNOSTICS_CHANNELS } from '../src/diagnostics.js';
import { ConfigError, InvalidCallbackValueError, RateLimitRejectedError } from '../src/errors.js';
import { adaptiveRateLimit, runtimeOf } from '../src/http/interceptor.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';
import {
  agentWith,
  cleanups,
  firstAnswers,
  get,
  limit,
  NEVER_BINDS,
  serve,
} from './helpers/interceptor-fixtures.js';
import { RateLimitedServer, until } from './helpers/rate-limited-server.js';
import { undiciMajor } from './helpers/undici-version.js';

/** Moves a manual clock forward in steps until `promise` settles (the HTTP round trips run in real time). */
async function settle<T>(clock: ManualClock, promise: Promise<T>, stepMs = 1_000): Promise<T> {
  let done = false;
  promise.then(
    () => (done = true),
    () => (done = true),
  );
  await until(() => {
    if (!done) clock.advance(stepMs);
    return done;
  }, 'the request to settle');
  return promise;
}

describe('adaptiveRateLimit: throttling', () => {
  it('cuts the rate and pauses the origin on a 429', async () => {
    const server = await serve({ capacity: 2, retryAfter: '30' });
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1 });
    const agent = agentWith(rl);
    const paused = vi.fn();
    rl.registry.limiterFor(server.origin)?.on('paused', paused);

    expect((await get(agent, `${server.origin}/1`)).status).toBe(200);
    expect((await get(agent, `${server.origin}/2`)).status).toBe(200);
    expect((await get(agent, `${server.origin}/3`)).status).toBe(429);

    const snapshot = rl.registry.get(server.origin)?.snapshot();
    expect(snapshot?.cuts).toBe(1);
    expect(snapshot?.rate).toBeLessThan(Number.POSITIVE_INFINITY);
    expect(snapshot?.pausedUntil).toBe(clock.now() + 30_000);
    expect(paused).toHaveBeenCalledWith(expect.objectContaining({ ms: 30_000, requestedMs: 30_000 }));
  });

  it('sends a throttled request again once the Retry-After pause is over', async () => {
    const server = await serve({ respond: firstAnswers(1, 429, { 'retry-after': '30' }) });
    const clock = new ManualClock();
    const rl = limit({ clock });
    const agent = agentWith(rl);

    const response = get(agent, `${server.origin}/item`);
    await until(() => rl.registry.get(server.origin)?.snapshot().queued === 1, 'the retry to queue');
    expect(server.requests).toBe(1); // paused: the retry waits for the clock

    expect((await settle(clock, response)).status).toBe(200);
    expect(server.received.map((r) => r.status)).toEqual([429, 200]);
    expect(clock.now()).toBeGreaterThanOrEqual(30_000);
  });

  it('a retry whose Agent was closed while it waited out the pause ends with the 429 it held', async () => {
    const server = await serve({ respond: firstAnswers(1, 429, { 'retry-after': '30' }) });
    const clock = new ManualClock();
    const rl = limit({ clock });
    const agent = new Agent().compose(rl); // closed here, not by the cleanups

    const response = get(agent, `${server.origin}/item`);
    await until(() => rl.registry.get(server.origin)?.snapshot().queued === 1, 'the retry to queue');
    await agent.close(); // the app shuts down in the wrong order: the Agent before the interceptor

    const answer = await settle(clock, response);
    expect(answer).toMatchObject({ status: 429, body: 'scripted 429' });
    expect(answer.headers['retry-after']).toBe('30');
    expect(server.requests).toBe(1);
    expect(rl.registry.get(server.origin)?.snapshot().queued).toBe(0);
  });

  it('leaves other origins untouched', async () => {
    const throttling = await serve({ capacity: 0, retryAfter: '30' });
    const other = await serve();
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1 });
    const agent = agentWith(rl);

    expect((await get(agent, `${throttling.origin}/`)).status).toBe(429);
    expect((await get(agent, `${other.origin}/`)).status).toBe(200);

    expect(rl.registry.get(throttling.origin)?.snapshot()).toMatchObject({ cuts: 1, throttles: 1 });
    expect(rl.registry.get(other.origin)?.snapshot()).toMatchObject({
      cuts: 0,
      throttles: 0,
      pausedUntil: undefined,
      rate: Number.POSITIVE_INFINITY,
    });
  });

  it('cuts once for a burst of 429s sent before the cut', async () => {
    const server = await serve({ capacity: 0, retryAfter: undefined });
    const rl = limit({ clock: new ManualClock(), maxAttempts: 1 });
    const agent = agentWith(rl);

    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => get(agent, `${server.origin}/${i}`)),
    );

    expect(answers.map((a) => a.status)).toEqual([429, 429, 429, 429, 429]);
    expect(rl.registry.get(server.origin)?.snapshot()).toMatchObject({ throttles: 5, cuts: 1 });
  });

  it('returns the 429 itself after 4 throttled attempts', async () => {
    const server = await serve({ capacity: 0, retryAfter: '0' });
    const agent = agentWith(limit({ default: NEVER_BINDS }));

    const answer = await get(agent, `${server.origin}/gave-up`);

    expect(answer).toMatchObject({ status: 429, body: 'slow down', headers: { 'retry-after': '0' } });
    expect(server.requests).toBe(4);
  });

  it('never retries with maxAttempts: 1', async () => {
    const server = await serve({ capacity: 0, retryAfter: '0' });
    const agent = agentWith(limit({ default: NEVER_BINDS, maxAttempts: 1 }));
    expect((await get(agent, `${server.origin}/`)).status).toBe(429);
    expect(server.requests).toBe(1);
  });

  it('pauses no longer than maxPause for a hostile Retry-After: 999999999', async () => {
    const server = await serve({ capacity: 0, retryAfter: '999999999' });
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1, default: { maxPause: 5_000 } });
    const paused = vi.fn();
    rl.registry.limiterFor(server.origin)?.on('paused', paused);

    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(429);

    expect(paused).toHaveBeenCalledWith(expect.objectContaining({ ms: 5_000, requestedMs: 999_999_999_000 }));
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(clock.now() + 5_000);
  });

  it('pauses without cutting on a 503 with Retry-After, and hands the 503 to the caller', async () => {
    const server = await serve({ respond: firstAnswers(1, 503, { 'retry-after': '20' }) });
    const clock = new ManualClock();
    const rl = limit({ clock });

    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(503);

    expect(server.requests).toBe(1);
    expect(rl.registry.get(server.origin)?.snapshot()).toMatchObject({
      cuts: 0,
      throttles: 0,
      pausedUntil: clock.now() + 20_000,
    });
  });

  it('retries a 503 when 503 is one of the throttleStatuses', async () => {
    const server = await serve({ respond: firstAnswers(2, 503, { 'retry-after': '0' }) });
    const rl = limit({ default: NEVER_BINDS, throttleStatuses: [429, 503] });

    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(200);
    expect(server.received.map((r) => r.status)).toEqual([503, 503, 200]);
    expect(rl.registry.get(server.origin)?.snapshot().throttles).toBe(2);
  });

  it("classifies with classify(): GitHub's 403 with x-ratelimit-remaining: 0 is throttled", async () => {
    const server = await serve({ respond: firstAnswers(1, 403, { 'x-ratelimit-remaining': '0' }) });
    const rl = limit({
      default: NEVER_BINDS,
      classify: (status, headers) =>
        status === 403 && headers['x-ratelimit-remaining'] === '0' ? 'throttled' : undefined,
    });

    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(200);
    expect(server.received.map((r) => r.status)).toEqual([403, 200]);
  });

  it('charges units(request) and corrects them with responseUnits(status, headers)', async () => {
    const server = await serve({ headers: { 'x-actual-cost': '2' } });
    const clock = new ManualClock();
    const units = vi.fn((r: { headers: Record<string, unknown> }) => Number(r.headers['x-cost']));
    const rl = limit({
      clock,
      default: { initialUnitsPerMinute: 600, burst: 'second' }, // a bucket of 10 units
      units,
      responseUnits: (_status, headers) => Number(headers['x-actual-cost']),
    });
    const acquired = vi.fn();
    rl.registry.limiterFor(server.origin)?.on('acquired', acquired);

    await get(agentWith(rl), `${server.origin}/report?x=1`, { headers: { 'X-Cost': '5' } });

    expect(units).toHaveBeenCalledWith({
      origin: server.origin,
      method: 'GET',
      path: '/report?x=1',
      headers: expect.objectContaining({ 'x-cost': '5' }),
    });
    expect(acquired).toHaveBeenCalledWith(expect.objectContaining({ units: 5 }));
    expect(rl.registry.get(server.origin)?.snapshot().tokens).toBe(8); // 10 - 5, then 3 given back
  });

  it('counts a success when the response starts, before its body ends', async () => {
    let release = () => {};
    const server = await serve({
      respond: (_req, res) => {
        res.writeHead(200).write('first part');
        release = () => res.end();
        return true;
      },
    });
    const onSuccess = vi.fn(() => undefined);
    const controller: RateController = { onThrottled: (s) => s.rate / 2, onSuccess };
    const rl = limit({ clock: new ManualClock(), default: { controller, initialUnitsPerMinute: 600 } });

    const response = await request(`${server.origin}/`, { dispatcher: agentWith(rl) });

    expect(onSuccess).toHaveBeenCalledTimes(1);
    release();
    expect(await response.body.text()).toBe('first part');
  });
});

describe('adaptiveRateLimit: a throttled answer dropped for its retry', () => {
  it('cuts a body still trickling in when the retry goes out: with one connection the retry is sent', async () => {
    let requests = 0;
    const server = createServer((_req, res) => {
      if (++requests > 1) return void res.end('ok');
      // A 429 whose body never ends (a proxy's page written a byte at a time).
      res.writeHead(429, { 'retry-after': '0' });
      const drip = setInterval(() => res.write('x'), 50);
      res.on('close', () => clearInterval(drip));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    cleanups.push(() => {
      server.closeAllConnections();
      server.close();
    });
    const rl = limit();
    const agent = new Agent({ connections: 1 });
    cleanups.push(() => agent.close());
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const answer = await request(origin, { dispatcher: agent.compose(rl) });
    expect(answer.statusCode).toBe(200);
    expect(await answer.body.text()).toBe('ok');
  });
});

describe("adaptiveRateLimit: a caller's abort of the last 429, held whole", () => {
  it('ends with onResponseError and nothing after, as undici alone ends it', async () => {
    const server = createServer((_req, res) => res.writeHead(429, { 'retry-after': '0' }).end('slow down'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const run = (dispatcher: Dispatcher) =>
      new Promise<string[]>((resolve) => {
        const told: string[] = [];
        dispatcher.dispatch({ origin, path: '/', method: 'GET' }, {
          onRequestStart() {},
          onResponseStart(controller, status) {
            told.push(`start ${status}`);
            controller.abort(new Error('the caller aborts'));
          },
          onResponseData() {
            told.push('data');
          },
          onResponseEnd() {
            told.push('end');
            resolve(told);
          },
          onResponseError(_controller, error) {
            told.push(`error: ${error.message}`);
            resolve(told);
          },
        } as Dispatcher.DispatchHandler);
      });
    const agent = new Agent();
    cleanups.push(() => agent.close());
    const expected = ['start 429', 'error: the caller aborts'];
    expect(await run(agent)).toEqual(expected);
    // Its second attempt's 429 is held whole, then handed over: the abort ends it there.
    expect(await run(agent.compose(limit({ maxAttempts: 2 })))).toEqual(expected);
  });
});

describe('adaptiveRateLimit: waiting', () => {
  /** A limiter paused for 10 minutes by a 429, which still queues requests (maxWait 1 h). */
  async function pausedFor10Minutes() {
    const server = await serve({ capacity: 0, retryAfter: '600' });
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1, default: { maxWait: 3_600_000 } });
    const agent = agentWith(rl);
    expect((await get(agent, `${server.origin}/`)).status).toBe(429);
    const limiter = rl.registry.get(server.origin);
    expect(limiter?.snapshot().pausedUntil).toBe(clock.now() + 600_000);
    server.refill(100);
    return { server, agent, limiter: limiter!, seen: server.requests };
  }

  it('rejects a request() aborted while it waits, before the server sees it, and returns its units', async () => {
    const { server, agent, limiter, seen } = await pausedFor10Minutes();
    const abort = new AbortController();

    const pending = request(`${server.origin}/waiting`, { dispatcher: agent, signal: abort.signal });
    await until(() => limiter.snapshot().queued === 1, 'the request to queue');
    abort.abort();

    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    expect(limiter.snapshot()).toMatchObject({ queued: 0, queuedUnits: 0 });
    expect(server.requests).toBe(seen);
  });

  it("rejects undici's fetch aborted while it waits and returns its units", async () => {
    const { server, agent, limiter, seen } = await pausedFor10Minutes();
    const abort = new AbortController();

    const pending = undiciFetch(`${server.origin}/waiting`, { dispatcher: agent, signal: abort.signal });
    await until(() => limiter.snapshot().queued === 1, 'the request to queue');
    abort.abort();

    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    await until(() => limiter.snapshot().queued === 0, 'the reservation to be returned');
    expect(server.requests).toBe(seen);
  });

  it('rejects with RateLimitRejectedError when the wait would pass maxWait', async () => {
    const server = await serve({ capacity: 0, retryAfter: '600' });
    const rl = limit({ clock: new ManualClock(), maxAttempts: 1 });
    const agent = agentWith(rl);
    await get(agent, `${server.origin}/`);

    const error = await request(`${server.origin}/`, { dispatcher: agent }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RateLimitRejectedError);
    expect(error).toMatchObject({ reason: 'max-wait', limiter: server.origin });

    const viaFetch = await undiciFetch(`${server.origin}/`, { dispatcher: agent }).catch((e: unknown) => e);
    expect(viaFetch).toBeInstanceOf(TypeError);
    expect((viaFetch as TypeError).cause).toBeInstanceOf(RateLimitRejectedError);
    expect(server.requests).toBe(1);
  });

  it('frees a maxConcurrent slot when the response starts, not when its body ends', async () => {
    const open: import('node:http').ServerResponse[] = [];
    const server = await serve({
      respond: (_req, res) => {
        res.writeHead(200).write('started');
        open.push(res);
        return true;
      },
    });
    const rl = limit({ limiters: { api: { origins: [server.origin], maxConcurrent: 1, ...NEVER_BINDS } } });
    const agent = agentWith(rl);

    // With the slot held until the body ends, the second request would never be sent.
    const responses = await Promise.all(
      [1, 2, 3].map(() => request(`${server.origin}/`, { dispatcher: agent })),
    );

    expect(server.requests).toBe(3);
    for (const res of open) res.end();
    for (const r of responses) expect(await r.body.text()).toBe('started');
  });

  it('holds back a second request until the first response starts under maxConcurrent: 1', async () => {
    let startFirst = () => {};
    const server = await serve({
      respond: (req, res) => {
        if (req.url === '/slow') {
          startFirst = () => res.writeHead(200).end('slow');
          return true;
        }
        return false;
      },
    });
    const rl = limit({ limiters: { api: { origins: [server.origin], maxConcurrent: 1, ...NEVER_BINDS } } });
    const agent = agentWith(rl);

    const slow = get(agent, `${server.origin}/slow`);
    await server.waitForRequests(1);
    const fast = get(agent, `${server.origin}/fast`);
    const gate = runtimeOf(rl).gateOf(rl.registry.get('api')!)!;
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    expect(gate.inFlight).toBe(1);
    expect(server.requests).toBe(1);

    startFirst();
    expect((await slow).body).toBe('slow');
    expect((await fast).status).toBe(200);
    expect(server.received.map((r) => r.path)).toEqual(['/slow', '/fast']);
  });
});

describe('adaptiveRateLimit: request bodies of retried attempts', () => {
  const text = 'x'.repeat(200);
  const bodies: [string, () => unknown][] = [
    ['a string', () => text],
    ['a Buffer', () => Buffer.from(text)],
    ['a Uint8Array', () => new TextEncoder().encode(text)],
    ['a Readable', () => Readable.from([text.slice(0, 50), text.slice(50)])],
    [
      'an async generator',
      () =>
        (async function* () {
          yield text.slice(0, 120);
          yield text.slice(120);
        })(),
    ],
    [
      'a web ReadableStream',
      () =>
        new ReadableStream({
          start(controller) {
            controller.enqueue(new TextEncoder().encode(text.slice(0, 10)));
            controller.enqueue(new TextEncoder().encode(text.slice(10)));
            controller.close();
          },
        }),
    ],
  ];

  it.each(bodies)('replays %s whole', async (_name, body) => {
    const server = await serve({ respond: firstAnswers(2, 429, { 'retry-after': '0' }) });
    const agent = agentWith(limit({ default: NEVER_BINDS }));

    const answer = await get(agent, `${server.origin}/upload`, {
      method: 'PUT',
      body: body() as Dispatcher.DispatchOptions['body'],
    });

    expect(answer.status).toBe(200);
    expect(server.received.map((r) => [r.status, r.body])).toEqual([
      [429, text],
      [429, text],
      [200, text],
    ]);
  });

  it('sends a one-shot body longer than maxReplayBodyBytes once, and hands over the 429', async () => {
    const server = await serve({ respond: firstAnswers(1, 429, { 'retry-after': '0' }) });
    const agent = agentWith(limit({ default: NEVER_BINDS, maxReplayBodyBytes: 100 }));

    const answer = await get(agent, `${server.origin}/upload`, {
      method: 'POST',
      body: Readable.from([text.slice(0, 80), text.slice(80)]),
    });

    expect(answer.status).toBe(429);
    expect(server.received.map((r) => r.body)).toEqual([text]);
  });

  it('replays a long stream the server answered with 429 before reading it', async () => {
    const lengths: number[] = [];
    const early = createServer((req, res) => {
      if (lengths.length === 0) {
        lengths.push(-1);
        req.resume();
        res.writeHead(429, { 'retry-after': '0', connection: 'close' }).end('early');
        return;
      }
      let length = 0;
      req.on('data', (chunk: Buffer) => {
        length += chunk.length;
      });
      req.on('end', () => {
        lengths.push(length);
        res.end('ok');
      });
    });
    early.listen(0, '127.0.0.1');
    await once(early, 'listening');
    cleanups.push(() => new Promise((resolve) => early.close(resolve)));
    const origin = `http://127.0.0.1:${(early.address() as AddressInfo).port}`;
    const agent = agentWith(limit({ default: NEVER_BINDS }));
    const chunks = Array.from({ length: 50 }, () => Buffer.alloc(16 * 1024, 97));

    const answer = await get(agent, `${origin}/upload`, { method: 'PUT', body: Readable.from(chunks) });

    expect(answer).toMatchObject({ status: 200, body: 'ok' });
    expect(lengths).toEqual([-1, 50 * 16 * 1024]);
  });

  it('replays FormData', async () => {
    const server = await serve({ respond: firstAnswers(1, 429, { 'retry-after': '0' }) });
    const agent = agentWith(limit({ default: NEVER_BINDS }));
    const form = new FormData(); // undici's: undici 7 cannot send Node 20's own FormData
    form.set('field', 'value');

    expect((await get(agent, `${server.origin}/form`, { method: 'POST', body: form })).status).toBe(200);
    // Each attempt serializes the form anew, with a boundary of its own.
    for (const r of server.received) expect(r.body).toMatch(/name="field"\r\n\r\nvalue\r\n/);
    expect(server.received.map((r) => r.status)).toEqual([429, 200]);
  });
});

describe('adaptiveRateLimit: with undici', () => {
  it("works with undici's fetch, retrying a POST with its body", async () => {
    const server = await serve({ respond: firstAnswers(1, 429, { 'retry-after': '0' }) });
    const agent = agentWith(limit({ default: NEVER_BINDS }));

    const response = await undiciFetch(`${server.origin}/json`, {
      dispatcher: agent,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ a: 1 }),
    });

    expect(response.status).toBe(200);
    expect(await response.text()).toBe('ok POST /json');
    expect(server.received.map((r) => r.body)).toEqual(['{"a":1}', '{"a":1}']);
  });

  it('works on a Pool composed with the origin option', async () => {
    const server = await serve({ respond: firstAnswers(1, 429, { 'retry-after': '0' }) });
    const rl = limit({ origin: server.origin, default: NEVER_BINDS });
    const pool = new Pool(server.origin);
    cleanups.push(() => pool.close());

    const response = await pool.compose(rl).request({ path: '/pooled', method: 'GET' });

    expect(response.statusCode).toBe(200);
    await response.body.text();
    expect(server.requests).toBe(2);
    expect(rl.registry.get(server.origin)?.snapshot().throttles).toBe(1);
  });

  it('fails a request that has no origin when the origin option is missing', () => {
    const sent = vi.fn(() => true);
    const onResponseError = vi.fn();

    limit()(sent)({ path: '/', method: 'GET' }, { onRequestStart: () => {}, onResponseError });

    expect(onResponseError).toHaveBeenCalledOnce();
    expect(onResponseError.mock.calls[0]![1]).toMatchObject({
      code: 'ERR_INVALID_ORIGIN',
      message: expect.stringContaining('`origin`'),
    });
    expect(sent).not.toHaveBeenCalled();
  });

  it.runIf(undiciMajor === 7)(
    'fails a Client request that has no origin when the origin option is missing (undici 7)',
    async () => {
      const server = await serve();
      const client = new Client(server.origin);
      cleanups.push(() => client.close());

      const error = await client
        .compose(limit())
        .request({ path: '/', method: 'GET' })
        .catch((e: unknown) => e);

      expect(error).toMatchObject({
        code: 'ERR_INVALID_ORIGIN',
        message: expect.stringContaining('`origin`'),
      });
      expect(server.requests).toBe(0);
    },
  );

  it.runIf(undiciMajor >= 8)(
    "meters a Client request with the Client's origin (undici 8 fills it in)",
    async () => {
      const server = await serve();
      const client = new Client(server.origin);
      cleanups.push(() => client.close());
      const rl = limit({ default: NEVER_BINDS });

      const response = await client.compose(rl).request({ path: '/', method: 'GET' });

      expect(response.statusCode).toBe(200);
      await response.body.text();
      expect(rl.registry.get(server.origin)?.snapshot().throttles).toBe(0);
      expect(server.requests).toBe(1);
    },
  );

  it('works inside interceptors.retry, which retries what the limiter does not (a 500)', async () => {
    let n = 0;
    const server = await serve({
      respond: (_req, res) => {
        n++;
        if (n === 1) res.writeHead(500).end('oops');
        else if (n === 2) res.writeHead(429, { 'retry-after': '0' }).end('slow down');
        else return false;
        return true;
      },
    });
    const rl = limit({ default: NEVER_BINDS });
    // The last listed runs first: retry -> limiter -> Agent.
    const agent = agentWith(rl, interceptors.retry({ statusCodes: [500], minTimeout: 1, maxRetries: 2 }));

    expect((await get(agent, `${server.origin}/`)).status).toBe(200);
    expect(server.received.map((r) => r.status)).toEqual([500, 429, 200]);
    expect(rl.registry.get(server.origin)?.snapshot().throttles).toBe(1);
  });

  it('meters each redirect hop with its own origin inside interceptors.redirect', async () => {
    const target = await serve();
    const start = await serve({
      respond: (_req, res) => {
        res.writeHead(302, { location: `${target.origin}/landed` }).end();
        return true;
      },
    });
    const rl = limit({ default: NEVER_BINDS });
    const agent = agentWith(rl, interceptors.redirect({ maxRedirections: 2 }));

    expect((await get(agent, `${start.origin}/go`)).body).toBe('ok GET /landed');
    expect(rl.registry.names()).toEqual([start.origin, target.origin]);
  });

  it('sees the host name, not the address, outside interceptors.dns', async () => {
    const server = await serve();
    const rl = limit({ default: NEVER_BINDS });
    const agent = agentWith(interceptors.dns({ affinity: 4 }), rl);
    const url = `http://localhost:${server.port}/`;

    expect((await get(agent, url)).status).toBe(200);
    expect(rl.registry.names()).toEqual([`http://localhost:${server.port}`]);
  });

  it('passes origins through with default: false', async () => {
    const server = await serve({ capacity: 0, retryAfter: '0' });
    const rl = limit({ default: false });
    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(429);
    expect(server.requests).toBe(1);
    expect(rl.registry.names()).toEqual([]);
  });

  it('takes limiters from a registry passed in, and leaves closing it to its owner', async () => {
    const server = await serve();
    const registry = new RateLimiterRegistry({ limiters: { api: { origins: [server.origin] } } });
    cleanups.push(() => registry.close());
    const rl = adaptiveRateLimit({ registry });

    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(200);
    rl.close();
    expect(registry.get('api')?.snapshot().closed).toBe(false);
  });
});

describe('adaptiveRateLimit: options and observability', () => {
  it('validates options when called, naming the field and the value', () => {
    expect(() => adaptiveRateLimit({ maxAttempts: 0 })).toThrow(ConfigError);
    expect(() => adaptiveRateLimit({ maxAttempts: 0 })).toThrow(/maxAttempts.*received 0/);
    expect(() => adaptiveRateLimit({ throttleStatuses: [200] })).toThrow(/throttleStatuses\.0.*received 200/);
    expect(() => adaptiveRateLimit({ maxReplayBodyBytes: -1 })).toThrow(/maxReplayBodyBytes/);
    expect(() => adaptiveRateLimit({ units: 3 as never })).toThrow(/units.*must be a function/);
    expect(() => adaptiveRateLimit({ origin: 'ftp://x' })).toThrow(/origin.*"ftp:\/\/x"/);
    expect(() => adaptiveRateLimit({ maxAtempts: 2 } as never)).toThrow(/maxAtempts/);
    expect(() => adaptiveRateLimit({ limiters: { a: { maxWait: -1 } } })).toThrow(/limiters\.a\.maxWait/);
    const registry = new RateLimiterRegistry();
    expect(() => adaptiveRateLimit({ registry, default: false })).toThrow(/default.*registry/);
    registry.close();
  });

  it('refuses an origin option with a path, credentials or a wildcard, with the other bad fields', () => {
    for (const [origin, message] of [
      ['https://api.test/v1', 'no path'],
      ['https://user:secret@api.test', 'no user name or password'],
      ['*.api.test', 'must be an http or https origin'],
      [new URL('https://api.test/v1?key=1'), 'no path'],
    ] as const) {
      const limiters = { a: { origins: ['https://a.test'], maxWait: -1 } };
      const error = configError(() => adaptiveRateLimit({ origin, limiters }));
      expect(error.message).toMatch(/^invalid adaptiveRateLimit options:/);
      expect(error.issues.map((i) => i.path)).toEqual(['origin', 'limiters.a.maxWait']);
      expect(error.issues.find((i) => i.path === 'origin')?.message).toContain(message);
    }
    const rl = adaptiveRateLimit({ origin: new URL('HTTPS://API.test:443/') });
    expect(runtimeOf(rl).options.origin).toBe('https://api.test');
    rl.close();
  });

  it('fails the request when classify() answers something else than a verdict', async () => {
    const server = await serve();
    const rl = limit({ default: NEVER_BINDS, classify: () => 'Throttled' as never });
    const agent = agentWith(rl);

    const error = await request(`${server.origin}/`, { dispatcher: agent }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(InvalidCallbackValueError);
    expect(error).toMatchObject({
      code: 'ERR_INVALID_CALLBACK_VALUE',
      callback: 'classify',
      received: 'Throttled',
    });
    expect((error as Error).message).toMatch(/classify\(200\) returned "Throttled"/);
  });

  it('fails the request, sending nothing, when units() answers something else than a positive number', async () => {
    const server = await serve();
    const rl = limit({ default: NEVER_BINDS, units: () => 0 });

    const error = await request(`${server.origin}/`, { dispatcher: agentWith(rl) }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(InvalidCallbackValueError);
    expect(error).toMatchObject({ code: 'ERR_INVALID_CALLBACK_VALUE', callback: 'units', received: 0 });
    expect(server.requests).toBe(0);
  });

  it('publishes throttle, rate and pause on diagnostics channels', async () => {
    const server = await serve({ capacity: 0, retryAfter: '5' });
    const seen: [string, unknown][] = [];
    const listeners = Object.values(DIAGNOSTICS_CHANNELS).map((name) => {
      const listener = (message: unknown) => seen.push([name, message]);
      diagnosticsChannel.subscribe(name, listener);
      return () => diagnosticsChannel.unsubscribe(name, listener);
    });
    cleanups.push(() => {
      for (const unsubscribe of listeners) unsubscribe();
    });
    const rl = limit({ clock: new ManualClock(), maxAttempts: 1 });

    await get(agentWith(rl), `${server.origin}/`);

    // The pause comes first, so that a failing controller cannot let sends through it.
    expect(seen.map(([name]) => name)).toEqual([
      'adaptive-rate-limit:pause',
      'adaptive-rate-limit:rate',
      'adaptive-rate-limit:throttle',
    ]);
    expect(seen[2]?.[1]).toEqual({ limiter: server.origin, retryAfterMs: 5_000, cut: true });
  });

  it('leaves no open handles after close()', async () => {
    const count = () => {
      const counts = new Map<string, number>();
      for (const r of process.getActiveResourcesInfo()) counts.set(r, (counts.get(r) ?? 0) + 1);
      return counts;
    };
    const before = count();
    const server = await RateLimitedServer.start({ capacity: 1, retryAfter: '600' });
    const rl = adaptiveRateLimit({ clock: new ManualClock(), default: { maxWait: 3_600_000 } });
    const agent = new Agent().compose(rl);
    await get(agent, `${server.origin}/`);
    const throttled = get(agent, `${server.origin}/`).catch((e: unknown) => e); // retried: waits 10 min
    await until(() => rl.registry.get(server.origin)?.snapshot().queued === 1, 'the retry to queue');

    rl.close();
    // The retry is refused (closed): the caller gets the server's last answer, the 429.
    expect(await throttled).toMatchObject({ status: 429, body: 'slow down' });
    await agent.close();
    await server.close();

    await until(() => {
      const after = count();
      return [...after].every(([kind, n]) => n <= (before.get(kind) ?? 0));
    }, 'handles to close');
  });
});
