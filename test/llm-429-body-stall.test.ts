import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { QuotaExhaustedError, ThrottledBodyTimeoutError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { REFUSAL_READ_TIMEOUT_MS } from '../src/http/llm.js';
import { advanceUntil, agentWith, cleanups, limit, NEVER_BINDS } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// With `api`, both adapters read a 429's body before they judge it (a spend cap says so only in
// its body). A 429 whose body stalls (its headers sent, then nothing, the connection left open)
// held the call until the body ended or undici's bodyTimeout (300 s) passed. The read stops after
// REFUSAL_READ_TIMEOUT_MS on the limiter's clock (a manual one here): the 429 is judged on its
// status and headers, its connection closed. Time moves only by the manual clock: no assertion
// reads a duration.

const CALL = JSON.stringify({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
/** The start of a 429's JSON body: sent, then the body stalls. */
const PARTIAL = '{"error":{"type":"requests","message":"Rate limit reached';

/**
 * Answers its first `stalls` requests with a 429 (`Retry-After: 0`, JSON) whose body stops after
 * {@link PARTIAL} and never ends; every later one with a 200 carrying `usage`. `cut` counts the
 * stalled answers whose connection the client closed.
 */
async function stallingServer(stalls: number) {
  const seen = { requests: 0, cut: 0 };
  const open: ServerResponse[] = [];
  const server = createServer((req, res) => {
    req.resume();
    seen.requests++;
    if (seen.requests > stalls) {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"usage":{"prompt_tokens":3}}');
      return;
    }
    res.writeHead(429, { 'retry-after': '0', 'content-type': 'application/json' });
    res.write(PARTIAL);
    open.push(res);
    res.on('close', () => {
      if (!res.writableEnded) seen.cut++;
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  /** Ends the stalled answers (their connections closed): a call still waiting on one then fails. */
  const drop = () => {
    for (const r of open) r.destroy();
  };
  cleanups.push(() => {
    drop();
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, drop };
}

/** Reads a body (a web stream or undici's Readable) to its end or its error. */
async function readAll(body: AsyncIterable<Uint8Array> | null) {
  const chunks: Uint8Array[] = [];
  let error: unknown;
  try {
    for await (const chunk of body ?? []) chunks.push(chunk);
  } catch (e) {
    error = e;
  }
  return { text: Buffer.concat(chunks).toString('utf8'), error };
}

/** The library's error, or the `cause` of fetch's `TypeError` that carries it. */
const typed = (error: unknown) =>
  error instanceof ThrottledBodyTimeoutError ? error : (error as Error)?.cause;

type Outcome = { status?: number; response?: Response; error?: unknown };

describe('an LLM API 429 whose body stalls after its headers: the interceptor', () => {
  function setup({ origin, drop }: { origin: string; drop: () => void }, maxAttempts?: number) {
    const clock = new ManualClock();
    const rl = limit({
      clock,
      ...(maxAttempts !== undefined && { maxAttempts }),
      limiters: { llm: { origins: [origin], api: 'openai', ...NEVER_BINDS } },
    });
    const agent = agentWith(rl);
    // First at the cleanup: the agent's close waits for its calls, which a stalled body would hold.
    cleanups.push(drop);
    return { clock, rl, agent };
  }

  it("through Node's fetch: judged a throttle once the read times out, its connection closed, and retried", async () => {
    const server = await stallingServer(1);
    const { origin, seen } = server;
    const { clock, rl, agent } = setup(server);
    let outcome: Outcome | undefined;
    fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: CALL,
      dispatcher: agent,
    } as RequestInit).then(
      (response) => (outcome = { response }),
      (error: unknown) => (outcome = { error }),
    );
    await advanceUntil(clock, () => outcome !== undefined, 'the call to end');
    expect(outcome?.error).toBeUndefined();
    expect(outcome?.response?.status).toBe(200);
    expect(await outcome?.response?.json()).toEqual({ usage: { prompt_tokens: 3 } });
    expect(seen.requests).toBe(2);
    await until(() => seen.cut === 1, 'the stalled connection to be closed');
    // The stalled attempt's permit was settled as a throttle (a rate limit: its body not JSON).
    expect(rl.registry.get('llm')?.snapshot().throttles).toBe(1);
  });

  it('through request(): the last 429 reaches the caller with the bytes received, then ThrottledBodyTimeoutError', async () => {
    const server = await stallingServer(Number.POSITIVE_INFINITY);
    const { origin, seen } = server;
    const { clock, agent } = setup(server, 2);
    let outcome:
      | { status: number; headers: Record<string, unknown>; body: ReturnType<typeof readAll> }
      | undefined;
    let failed: unknown;
    request(`${origin}/v1/chat/completions`, {
      dispatcher: agent,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: CALL,
    }).then(
      (r) => (outcome = { status: r.statusCode, headers: r.headers, body: readAll(r.body) }),
      (error: unknown) => (failed = error),
    );
    await advanceUntil(clock, () => outcome !== undefined || failed !== undefined, 'the call to end');
    expect(failed).toBeUndefined();
    expect(outcome?.status).toBe(429);
    expect(outcome?.headers['retry-after']).toBe('0');
    const { text, error } = await (outcome?.body ?? readAll(null));
    expect(text).toBe(PARTIAL);
    expect(error).toBeInstanceOf(ThrottledBodyTimeoutError);
    expect(error).toMatchObject({
      code: 'ERR_THROTTLED_BODY_TIMEOUT',
      status: 429,
      timeoutMs: REFUSAL_READ_TIMEOUT_MS,
    });
    expect(seen.requests).toBe(2);
    await until(() => seen.cut === 2, 'both stalled connections to be closed');
  });

  it("through Node's fetch: the last 429 reaches the caller with the bytes received, then the typed error", async () => {
    const server = await stallingServer(Number.POSITIVE_INFINITY);
    const { origin, seen } = server;
    const { clock, agent } = setup(server, 1);
    let outcome: (Outcome & { body?: ReturnType<typeof readAll> }) | undefined;
    fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: CALL,
      dispatcher: agent,
    } as RequestInit).then(
      // Read at once, as a caller does: a web stream's error drops the chunks not yet read.
      (response) => (outcome = { response, body: readAll(response.body) }),
      (error: unknown) => (outcome = { error }),
    );
    await advanceUntil(clock, () => outcome !== undefined, 'the call to end');
    expect(outcome?.error).toBeUndefined();
    const response = outcome?.response as Response;
    expect(response.status).toBe(429);
    const { text, error } = await (outcome?.body ?? readAll(null));
    expect(text).toBe(PARTIAL);
    expect(typed(error)).toBeInstanceOf(ThrottledBodyTimeoutError);
    expect(seen.requests).toBe(1);
    await until(() => seen.cut === 1, 'the stalled connection to be closed');
  });
});

describe('an LLM API 429 whose body stalls after its headers: the fetch wrapper', () => {
  function setup({ origin, drop }: { origin: string; drop: () => void }, maxAttempts?: number) {
    const clock = new ManualClock();
    const f = rateLimitedFetch({
      clock,
      ...(maxAttempts !== undefined && { maxAttempts }),
      limiters: { llm: { origins: [origin], api: 'openai', ...NEVER_BINDS } },
    });
    cleanups.push(() => f.close(), drop);
    return { clock, f };
  }

  const call = (f: typeof fetch, origin: string, sink: (o: Outcome) => void) =>
    f(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: CALL,
    }).then(
      (response) => sink({ response }),
      (error: unknown) => sink({ error }),
    );

  it('judges it a throttle once the read times out, closes its connection, and retries', async () => {
    const server = await stallingServer(1);
    const { origin, seen } = server;
    const { clock, f } = setup(server);
    let outcome: Outcome | undefined;
    void call(f, origin, (o) => (outcome = o));
    await advanceUntil(clock, () => outcome !== undefined, 'the call to end');
    expect(outcome?.error).toBeUndefined();
    expect(outcome?.response?.status).toBe(200);
    expect(await outcome?.response?.json()).toEqual({ usage: { prompt_tokens: 3 } });
    expect(seen.requests).toBe(2);
    await until(() => seen.cut === 1, 'the stalled connection to be closed');
    expect(f.registry.get('llm')?.snapshot().throttles).toBe(1);
  });

  it('hands over the last 429 with the bytes received, its body ending with ThrottledBodyTimeoutError', async () => {
    const server = await stallingServer(Number.POSITIVE_INFINITY);
    const { origin, seen } = server;
    const { clock, f } = setup(server, 2);
    let outcome: Outcome | undefined;
    void call(f, origin, (o) => (outcome = o));
    await advanceUntil(clock, () => outcome !== undefined, 'the call to end');
    expect(outcome?.error).toBeUndefined();
    const response = outcome?.response as Response;
    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toBe('0');
    const { text, error } = await readAll(response.body);
    expect(text).toBe(PARTIAL);
    expect(error).toBeInstanceOf(ThrottledBodyTimeoutError);
    expect(error).toMatchObject({ code: 'ERR_THROTTLED_BODY_TIMEOUT', status: 429 });
    expect(seen.requests).toBe(2);
    await until(() => seen.cut === 2, 'both stalled connections to be closed');
  });
});

describe('an LLM API 429 whose body stalls: the caller aborts while it is read', () => {
  it('the fetch wrapper ends the call with the abort, not with the 429', async () => {
    const server = await stallingServer(Number.POSITIVE_INFINITY);
    const clock = new ManualClock();
    const f = rateLimitedFetch({
      clock,
      limiters: { llm: { origins: [server.origin], api: 'openai', ...NEVER_BINDS } },
    });
    cleanups.push(() => f.close(), server.drop);
    const controller = new AbortController();
    const armed = clock.pendingTimers;
    let outcome: Outcome | undefined;
    f(`${server.origin}/v1/chat/completions`, { method: 'POST', body: CALL, signal: controller.signal }).then(
      (response) => (outcome = { response }),
      (error: unknown) => (outcome = { error }),
    );
    await until(() => clock.pendingTimers > armed, "the read's timer");
    const reason = new Error('caller gave up');
    controller.abort(reason);
    await until(() => outcome !== undefined, 'the call to end');
    expect(outcome?.response).toBeUndefined();
    expect(outcome?.error).toBe(reason);
  });
});

describe("an LLM API 429 whose body ends before the read's time is up", () => {
  const QUOTA =
    '{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}';

  /** Answers a 429 with half of a used-up quota's body; `finish()` sends the rest. */
  async function slowQuotaServer() {
    const seen = { requests: 0, cut: 0 };
    const open: ServerResponse[] = [];
    const server = createServer((req, res) => {
      req.resume();
      seen.requests++;
      res.writeHead(429, { 'content-type': 'application/json' });
      res.write(QUOTA.slice(0, 40));
      open.push(res);
      res.on('close', () => {
        if (!res.writableEnded) seen.cut++;
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const drop = () => {
      for (const r of open) r.destroy();
    };
    cleanups.push(() => {
      drop();
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    });
    const finish = () => {
      for (const r of open) r.end(QUOTA.slice(40));
    };
    return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, drop, finish };
  }

  it.each(['interceptor', 'fetch wrapper'] as const)(
    '%s: is judged by its body (a used-up quota), not cut',
    async (adapter) => {
      const { origin, seen, drop, finish } = await slowQuotaServer();
      const clock = new ManualClock();
      const options = {
        clock,
        limiters: { llm: { origins: [origin], api: 'openai' as const, ...NEVER_BINDS } },
      };
      let send: () => Promise<unknown>;
      if (adapter === 'interceptor') {
        const agent = agentWith(limit(options));
        send = () =>
          request(`${origin}/v1/chat/completions`, { dispatcher: agent, method: 'POST', body: CALL });
      } else {
        const f = rateLimitedFetch(options);
        cleanups.push(() => f.close());
        send = () => f(`${origin}/v1/chat/completions`, { method: 'POST', body: CALL });
      }
      cleanups.push(drop);
      const armed = clock.pendingTimers;
      let outcome: { error: unknown } | undefined;
      send().then(
        () => (outcome = { error: undefined }),
        (error: unknown) => (outcome = { error }),
      );
      // The 429's headers came: the read's timer runs. Just short of its end, the body ends.
      await until(() => clock.pendingTimers > armed, "the read's timer");
      clock.advance(REFUSAL_READ_TIMEOUT_MS - 1);
      finish();
      await until(() => outcome !== undefined, 'the call to end');
      expect(outcome?.error).toBeInstanceOf(QuotaExhaustedError);
      expect(seen).toEqual({ requests: 1, cut: 0 });
      // Its timer was cleared with the body's end.
      expect(clock.pendingTimers).toBe(armed);
    },
  );
});

describe('an LLM API 429 whose connection resets while its body is read', () => {
  /** Answers its first `resets` requests with a 429 whose body stops after PARTIAL, its socket then destroyed; later ones 200. */
  async function resettingServer(resets: number) {
    const seen = { requests: 0 };
    const server = createServer((req, res) => {
      req.resume();
      seen.requests++;
      if (seen.requests > resets) {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"usage":{"prompt_tokens":3}}');
        return;
      }
      res.writeHead(429, { 'retry-after': '0', 'content-type': 'application/json' });
      res.write(PARTIAL, () => res.socket?.destroy());
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    cleanups.push(() => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    });
    return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
  }

  function wrapper(origin: string, maxAttempts: number) {
    const clock = new ManualClock();
    const f = rateLimitedFetch({
      clock,
      maxAttempts,
      limiters: { llm: { origins: [origin], api: 'openai', ...NEVER_BINDS } },
    });
    cleanups.push(() => f.close());
    return { clock, f };
  }

  /** The call's response, the manual clock moved on while it waits (a retry waits on it). */
  async function post(f: typeof fetch, clock: ManualClock, origin: string): Promise<Response> {
    let outcome: Outcome | undefined;
    f(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: CALL,
    }).then(
      (response) => (outcome = { response }),
      (error: unknown) => (outcome = { error }),
    );
    await advanceUntil(clock, () => outcome !== undefined, 'the call to end');
    expect(outcome?.error).toBeUndefined();
    return outcome?.response as Response;
  }

  it('the fetch wrapper judges it a throttle by its status and headers, and retries', async () => {
    const { origin, seen } = await resettingServer(1);
    const { clock, f } = wrapper(origin, 2);
    const response = await post(f, clock, origin);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ usage: { prompt_tokens: 3 } });
    expect(seen.requests).toBe(2);
    expect(f.registry.get('llm')?.snapshot().throttles).toBe(1);
  });

  it("the fetch wrapper hands over the last 429 with the bytes received, its body ending with the connection's error", async () => {
    const { origin, seen } = await resettingServer(Number.POSITIVE_INFINITY);
    const { clock, f } = wrapper(origin, 1);
    const response = await post(f, clock, origin);
    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toBe('0');
    const { text, error } = await readAll(response.body);
    expect(text).toBe(PARTIAL);
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toBeInstanceOf(ThrottledBodyTimeoutError);
    expect(seen.requests).toBe(1);
  });

  it('the interceptor hands over the last 429 the same way (request())', async () => {
    const { origin, seen } = await resettingServer(Number.POSITIVE_INFINITY);
    const agent = agentWith(
      limit({ maxAttempts: 1, limiters: { llm: { origins: [origin], api: 'openai', ...NEVER_BINDS } } }),
    );
    const r = await request(`${origin}/v1/chat/completions`, {
      dispatcher: agent,
      method: 'POST',
      body: CALL,
    });
    expect(r.statusCode).toBe(429);
    const { text, error } = await readAll(r.body);
    expect(text).toBe(PARTIAL);
    expect(error).toBeInstanceOf(Error);
    expect(seen.requests).toBe(1);
  });
});
