import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { wrap } from '../src/wrap/wrap.js';
import { until } from './helpers/rate-limited-server.js';
import { failOnUnhandledRejections, flush } from './helpers/unhandled.js';

// Attack: an LLM call's `usage` correction at the end of its answer, and a refused call's token
// give-back, racing a throttled call's retry on the same limiter (api: 'openai', one partition):
// (a) a stream's correction lands while B's retry waits, after it is granted, after it is answered;
// (b) a 400 gives its draw back while B's retry is queued on the tokens budget (C granted before
// or after B; its body's usage charged in place of the estimate); (c) the stream aborted by its
// caller or failed (no correction); (d) the same give-back through `wrap` with an SDK-shaped
// function. Real node:http servers on 127.0.0.1, undici Agents and Node's fetch, a ManualClock.
// Every check passed when written: these stay as regression tests.

failOnUnhandledRejections();

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

type Respond = (req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>) => void;

/** An OpenAI-like server on 127.0.0.1: each call is answered by the handler its body's `user` names. */
async function api() {
  const handlers = new Map<string, Respond[]>();
  const seen: string[] = [];
  const server = createServer(async (req, res) => {
    let text = '';
    for await (const chunk of req) text += chunk;
    const body = JSON.parse(text) as Record<string, unknown>;
    const tag = String(body.user);
    seen.push(tag);
    const queue = handlers.get(tag) ?? [];
    const handler = queue.length > 1 ? queue.shift() : queue[0];
    if (handler === undefined) res.writeHead(500).end();
    else handler(req, res, body);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  );
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const on = (tag: string, ...answers: Respond[]) => handlers.set(tag, answers);
  return { origin, on, seen };
}

const LIMIT = 10_000;
/** OpenAI's quota headers: 10,000 tokens a minute, `remaining` as given. */
const quota = (remaining: number) => ({
  'content-type': 'application/json',
  'x-ratelimit-limit-requests': '1000',
  'x-ratelimit-remaining-requests': '999',
  'x-ratelimit-reset-requests': '60ms',
  'x-ratelimit-limit-tokens': String(LIMIT),
  'x-ratelimit-remaining-tokens': String(remaining),
  'x-ratelimit-reset-tokens': '6s',
});

const ok =
  (remaining: number, promptTokens: number): Respond =>
  (_req, res) =>
    res
      .writeHead(200, quota(remaining))
      .end(JSON.stringify({ usage: { prompt_tokens: promptTokens, completion_tokens: 1 } }));

/** A 429 of the tokens budget, asking `waitMs` (retry-after-ms). */
const tokens429 =
  (remaining: number, waitMs: number, type = 'tokens'): Respond =>
  (_req, res) =>
    res
      .writeHead(429, { ...quota(remaining), 'retry-after-ms': String(waitMs) })
      .end(JSON.stringify({ error: { type, code: 'rate_limit_exceeded', message: 'Rate limit reached' } }));

/** A chat body: `chars` characters of prompt (chars/4 tokens), `max_tokens` as given. */
const chat = (user: string, chars: number, maxTokens: number, stream = false) =>
  JSON.stringify({
    model: 'gpt-x',
    user,
    max_tokens: maxTokens,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    messages: [{ role: 'user', content: 'x'.repeat(chars) }],
  });

const level = (limiter: AdaptiveRateLimiter) => limiter.snapshot().budgets?.tokens?.tokens ?? Number.NaN;

type Kind = 'interceptor' | 'fetch wrapper';

/** What both clients answer: a status, and a body read to its end as text (or its error). */
interface Answer {
  readonly status: number;
  text(): Promise<string>;
}

function client(kind: Kind, origin: string, clock: ManualClock) {
  const headers = { 'content-type': 'application/json', authorization: 'Bearer k' };
  if (kind === 'interceptor') {
    const interceptor = adaptiveRateLimit({
      limiters: { llm: { origins: [origin], api: 'openai' } },
      default: false,
      clock,
    });
    const agent = new Agent().compose(interceptor);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
    );
    return {
      limiter: () => interceptor.registry.get('llm') as AdaptiveRateLimiter,
      call: async (body: string, signal?: AbortSignal): Promise<Answer> => {
        const r = await agent.request({
          origin,
          path: '/v1/chat/completions',
          method: 'POST',
          headers,
          body,
          signal,
        });
        return { status: r.statusCode, text: () => r.body.text() };
      },
    };
  }
  const f = rateLimitedFetch({ limiters: { llm: { origins: [origin], api: 'openai' } }, clock });
  cleanups.push(() => f.close());
  return {
    limiter: () => f.registry.get('llm') as AdaptiveRateLimiter,
    call: async (body: string, signal?: AbortSignal): Promise<Answer> => {
      const r = await f(`${origin}/v1/chat/completions`, { method: 'POST', headers, body, signal });
      return { status: r.status, text: () => r.text() };
    },
  };
}

/** A stream held open after its first event until `end(promptTokens)` or `fail()`. */
function heldStream(remaining: number) {
  const open: ServerResponse[] = [];
  const respond: Respond = (_req, res) => {
    res.writeHead(200, { ...quota(remaining), 'content-type': 'text/event-stream' });
    res.write('data: {"choices":[{"delta":{"content":"he"}}]}\n\n');
    open.push(res);
  };
  const end = (promptTokens: number) => {
    const res = open.shift() as ServerResponse;
    res.end(
      `data: {"choices":[],"usage":{"prompt_tokens":${promptTokens},"completion_tokens":5}}\n\ndata: [DONE]\n\n`,
    );
  };
  const fail = () => (open.shift() as ServerResponse).destroy();
  return { respond, end, fail, open };
}

/** An answer held at the server until released (its head and body at once). */
function heldAnswer(answer: Respond) {
  const waiting: (() => void)[] = [];
  const respond: Respond = (req, res, body) => waiting.push(() => answer(req, res, body));
  const release = () => (waiting.shift() as () => void)();
  return { respond, release, waiting };
}

/** The tokens level at each step of a scenario (NaN: not reached). */
const NO_LEVELS = {
  warm: Number.NaN,
  aDrawn: Number.NaN,
  drawn: Number.NaN,
  bWaits: Number.NaN,
  aCorrected: Number.NaN,
  aDelta: Number.NaN,
  cRefunded: Number.NaN,
  cDelta: Number.NaN,
  end: Number.NaN,
  settled: Number.NaN,
  rate: Number.NaN,
};

const count = (seen: readonly string[], tag: string) => seen.filter((t) => t === tag).length;

/** Moves the clock a second at a time (at most `limit` times) until `condition` holds. */
async function advanceUntil(clock: ManualClock, condition: () => boolean, what: string, limit = 120) {
  for (let i = 0; !condition(); i++) {
    if (i >= limit) throw new Error(`gave up waiting for ${what}`);
    clock.advance(1_000);
    await until(() => true);
    await flush();
  }
}

/** Settles every few ms until `condition` holds (real I/O), never measuring time. */
const io = (condition: () => boolean, what: string) => until(condition, what, 5_000);

/** The clock time (ms) at which every run's books are compared. */
const SETTLE_AT = 30_000;

type When = 'while B waits' | 'after B is granted' | 'after B is answered';

/**
 * Scenario (a): W warms the limiter (10,000 tokens/min announced); A streams (estimate 3,000 tokens:
 * 12,000 characters of prompt), B (estimate 1,000) gets a tokens 429 asking 2 s and waits to be sent
 * again; A's `usage` (`aUsed` prompt tokens) lands `when`. Returns the tokens level after each step.
 */
async function scenarioA(kind: Kind, when: When, aUsed: number | 'abort' | 'error') {
  const { origin, on, seen } = await api();
  const clock = new ManualClock();
  const { limiter, call } = client(kind, origin, clock);
  on('w', ok(10_000, 1));
  const a = heldStream(7_000);
  on('a', a.respond);
  const bRetry = heldAnswer(ok(6_000, 1));
  on('b', tokens429(7_000, 2_000), bRetry.respond);
  await (await call(chat('w', 4, 10))).text();
  const levels = { ...NO_LEVELS, warm: level(limiter()) };
  const abort = new AbortController();
  const aAnswer = await call(chat('a', 12_000, 10, true), abort.signal);
  let aEnd: unknown;
  const aText = aAnswer.text().then(
    () => {
      aEnd = 'read';
    },
    (error: unknown) => {
      aEnd = error;
    },
  );
  levels.aDrawn = level(limiter());
  let bStatus: number | undefined;
  const b = call(chat('b', 4_000, 10)).then(async (r) => {
    await r.text();
    bStatus = r.status;
  });
  await io(() => count(seen, 'b') === 1, "B's 429");
  await io(() => limiter().snapshot().queued === 1, "B's retry queued");
  levels.bWaits = level(limiter());
  const landA = async () => {
    const before = level(limiter());
    if (aUsed === 'abort') abort.abort(new Error('caller gave up'));
    else if (aUsed === 'error') a.fail();
    else a.end(aUsed);
    await aText;
    if (aUsed === 'abort' && a.open.length > 0) a.end(1_000); // too late: nobody reads it
    levels.aCorrected = level(limiter());
    levels.aDelta = levels.aCorrected - before;
  };
  if (when === 'while B waits') await landA();
  await advanceUntil(clock, () => bRetry.waiting.length === 1, "B's retry at the server");
  if (when === 'after B is granted') await landA();
  bRetry.release();
  await b;
  if (when === 'after B is answered') await landA();
  levels.end = level(limiter());
  // Compared at one time in every run: the refill since is then the same when the rate is.
  expect(clock.now()).toBeLessThan(SETTLE_AT);
  clock.advanceTo(SETTLE_AT);
  levels.settled = level(limiter());
  levels.rate = limiter().snapshot().budgets?.tokens?.rate ?? Number.NaN;
  const snapshot = limiter().snapshot();
  return { levels, seen, bStatus, aEnd, queued: snapshot.queued, queuedUnits: snapshot.queuedUnits };
}

describe("(a) a stream's usage correction races a throttled retry of the same limiter", () => {
  const kinds: Kind[] = ['interceptor', 'fetch wrapper'];
  const whens: When[] = ['while B waits', 'after B is granted', 'after B is answered'];
  for (const kind of kinds) {
    for (const when of whens) {
      it(`${kind}: A's refund of 2,000 lands ${when}: counted once, never above the level before A drew`, async () => {
        const exact = await scenarioA(kind, when, 3_000);
        const refunded = await scenarioA(kind, when, 1_000);
        for (const run of [exact, refunded]) {
          expect(run.bStatus).toBe(200);
          expect(run.seen).toEqual(['w', 'a', 'b', 'b']);
          expect(run.queued).toBe(0);
          expect(run.queuedUnits).toBe(0);
        }
        // A's usage equal to its estimate changes nothing.
        expect(exact.levels.aDelta).toBe(0);
        // The refund lifts the level by at most what A drew beyond its usage, once.
        expect(refunded.levels.rate).toBe(exact.levels.rate);
        const gained = refunded.levels.settled - exact.levels.settled;
        expect(gained).toBeGreaterThanOrEqual(0);
        expect(gained).toBeLessThanOrEqual(2_000);
        expect(refunded.levels.aDelta).toBeLessThanOrEqual(2_000);
        // Never above the level before A drew (the clock moved: plus what it refilled since).
        expect(refunded.levels.aCorrected).toBeLessThanOrEqual(refunded.levels.warm);
      });
      it(`${kind}: A's charge of 2,000 lands ${when}: counted once`, async () => {
        const exact = await scenarioA(kind, when, 3_000);
        const charged = await scenarioA(kind, when, 5_000);
        expect(charged.bStatus).toBe(200);
        expect(charged.queued).toBe(0);
        expect(charged.levels.aDelta).toBe(-2_000);
        // Landing while B waits, the charge puts B's retry later, when the controller's raise after
        // B's wait comes later too: the refill since differs, and the runs are not compared.
        if (when === 'while B waits') return;
        expect(charged.levels.rate).toBe(exact.levels.rate);
        const lost = exact.levels.settled - charged.levels.settled;
        expect(lost).toBeGreaterThanOrEqual(0);
        expect(lost).toBeLessThanOrEqual(2_000);
      });
    }
  }
});

/** A 400 invalid_request_error (with `usage` when given): the API refused the call without doing it. */
const refused400 =
  (remaining: number, usage?: number): Respond =>
  (_req, res) =>
    res.writeHead(400, quota(remaining)).end(
      JSON.stringify({
        error: { type: 'invalid_request_error', message: 'max_tokens is too large' },
        ...(usage === undefined ? {} : { usage: { prompt_tokens: usage } }),
      }),
    );

type Order = 'C granted before B' | 'C granted after B';

/**
 * Scenario (b): W warms; B (estimate 1,000) and C (estimate 2,000: max_tokens) are both at the
 * server; B's tokens 429 (2 s) comes first and B's retry waits in the line; then C's 400 (its
 * draw given back), its body with `usage` when given.
 */
async function scenarioB(kind: Kind, order: Order, cUsage?: number) {
  const { origin, on, seen } = await api();
  const clock = new ManualClock();
  const { limiter, call } = client(kind, origin, clock);
  on('w', ok(10_000, 1));
  const bFirst = heldAnswer(tokens429(7_000, 2_000));
  on('b', bFirst.respond, ok(6_000, 1));
  const c = heldAnswer(refused400(7_000, cUsage));
  on('c', c.respond);
  await (await call(chat('w', 4, 10))).text();
  const levels = { ...NO_LEVELS, warm: level(limiter()) };
  let bStatus: number | undefined;
  let cStatus: number | undefined;
  const send = (tag: 'b' | 'c') =>
    tag === 'b'
      ? call(chat('b', 4_000, 10)).then(async (r) => {
          await r.text();
          bStatus = r.status;
        })
      : call(chat('c', 4, 2_000)).then(async (r) => {
          await r.text();
          cStatus = r.status;
        });
  const first = order === 'C granted before B' ? 'c' : 'b';
  const second = first === 'b' ? 'c' : 'b';
  const one = send(first);
  await io(() => count(seen, first) === 1, `${first} at the server`);
  const two = send(second);
  await io(() => count(seen, second) === 1, `${second} at the server`);
  levels.drawn = level(limiter());
  bFirst.release();
  await io(() => limiter().snapshot().queued === 1, "B's retry queued");
  levels.bWaits = level(limiter());
  c.release();
  await io(() => cStatus !== undefined, "C's answer");
  levels.cRefunded = level(limiter());
  levels.cDelta = levels.cRefunded - levels.bWaits;
  await advanceUntil(clock, () => bStatus !== undefined, "B's retry answered");
  await Promise.all([one, two]);
  levels.end = level(limiter());
  // Compared at one time in every run: the refill since is then the same when the rate is.
  expect(clock.now()).toBeLessThan(SETTLE_AT);
  clock.advanceTo(SETTLE_AT);
  levels.settled = level(limiter());
  levels.rate = limiter().snapshot().budgets?.tokens?.rate ?? Number.NaN;
  const snapshot = limiter().snapshot();
  return { levels, seen, bStatus, cStatus, queued: snapshot.queued, queuedUnits: snapshot.queuedUnits };
}

describe("(b) a refused call's give-back races a throttled retry queued on the tokens budget", () => {
  const kinds: Kind[] = ['interceptor', 'fetch wrapper'];
  const orders: Order[] = ['C granted before B', 'C granted after B'];
  for (const kind of kinds) {
    for (const order of orders) {
      it(`${kind}, ${order}: C's 400 gives back at most its 2,000 tokens, once`, async () => {
        const run = await scenarioB(kind, order);
        expect(run.cStatus).toBe(400);
        expect(run.bStatus).toBe(200);
        expect(count(run.seen, 'b')).toBe(2);
        expect(count(run.seen, 'c')).toBe(1);
        expect(run.queued).toBe(0);
        expect(run.queuedUnits).toBe(0);
        expect(run.levels.cDelta).toBeGreaterThanOrEqual(0);
        expect(run.levels.cDelta).toBeLessThanOrEqual(2_000);
        expect(run.levels.cRefunded).toBeLessThanOrEqual(run.levels.warm - 1_000);
      });
      it(`${kind}, ${order}: C's 400 with usage 300 is charged 300 in place of its estimate`, async () => {
        const plain = await scenarioB(kind, order);
        const used = await scenarioB(kind, order, 300);
        expect(used.cStatus).toBe(400);
        expect(used.bStatus).toBe(200);
        expect(used.queued).toBe(0);
        expect(used.levels.rate).toBe(plain.levels.rate);
        const lost = plain.levels.settled - used.levels.settled;
        expect(lost).toBeGreaterThanOrEqual(0);
        expect(lost).toBeLessThanOrEqual(300);
      });
    }
  }
});

describe('(c) a streamed call aborted by its caller, or whose stream fails, while a throttled retry waits', () => {
  const kinds: Kind[] = ['interceptor', 'fetch wrapper'];
  const whens: When[] = ['while B waits', 'after B is granted', 'after B is answered'];
  for (const kind of kinds) {
    for (const when of whens) {
      for (const end of ['abort', 'error'] as const) {
        it(`${kind}: A's stream ends by ${end} ${when}: no correction, A keeps its estimate, B is served`, async () => {
          const exact = await scenarioA(kind, when, 3_000);
          const cut = await scenarioA(kind, when, end);
          expect(cut.aEnd).toBeInstanceOf(Error);
          if (end === 'abort') expect((cut.aEnd as Error).message).toMatch(/caller gave up|aborted/);
          expect(cut.levels.aDelta).toBe(0);
          expect(cut.bStatus).toBe(200);
          expect(cut.seen).toEqual(['w', 'a', 'b', 'b']);
          expect(cut.queued).toBe(0);
          expect(cut.queuedUnits).toBe(0);
          // As a call whose usage equals its estimate: the same books.
          expect(cut.levels.settled).toBeCloseTo(exact.levels.settled, 6);
        });
      }
    }
  }
});

/** openai's `APIError` as the SDK throws it: `status`, `headers`, and the body's `error`. */
class SdkError extends Error {
  constructor(
    readonly status: number,
    readonly headers: Record<string, string>,
    readonly error: Record<string, unknown>,
  ) {
    super(`${status} ${String(error.message)}`);
  }
}

describe('(d) wrap with an SDK-shaped function: a 400 gives back its draw while a throttled retry waits', () => {
  it("C's 400 gives back its 2,000 tokens once (never above the level before it drew); B's retry is served", async () => {
    const { origin, on, seen } = await api();
    const clock = new ManualClock();
    // 600,000 tokens/min in one-second buckets: 10,000 tokens.
    const limiter = new AdaptiveRateLimiter({
      clock,
      budgets: {
        requests: { initialUnitsPerMinute: 600, burst: 'second' },
        tokens: { initialUnitsPerMinute: 600_000, burst: 'second' },
      },
    });
    cleanups.push(() => limiter.close());
    const bFirst = heldAnswer(tokens429(7_000, 2_000));
    on('b', bFirst.respond, ok(6_000, 1));
    const c = heldAnswer(refused400(7_000));
    on('c', c.respond);
    /** The SDK's `create`: the answer's JSON, or the SDK's error for a 4xx. */
    const create = async (request: { user: string; max_tokens: number }) => {
      const r = await fetch(`${origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-x', messages: [], ...request }),
      });
      const body = (await r.json()) as { error?: Record<string, unknown>; usage?: { prompt_tokens: number } };
      if (r.status >= 400) {
        const headers: Record<string, string> = {};
        r.headers.forEach((value, name) => {
          headers[name] = value;
        });
        throw new SdkError(r.status, headers, { param: null, code: null, ...body.error });
      }
      return body;
    };
    const limited = wrap(limiter, create, {
      costs: (request) => ({ tokens: request.max_tokens }),
    });
    const levels = { start: level(limiter), bWaits: Number.NaN, cRefunded: Number.NaN, drawn: Number.NaN };
    const cCall = limited({ user: 'c', max_tokens: 2_000 }).then(
      () => 'served',
      (error: unknown) => error,
    );
    await io(() => count(seen, 'c') === 1, 'C at the server');
    const bCall = limited({ user: 'b', max_tokens: 1_000 }).then(
      (answer) => answer,
      (error: unknown) => error,
    );
    await io(() => count(seen, 'b') === 1, 'B at the server');
    levels.drawn = level(limiter);
    bFirst.release();
    await io(() => limiter.snapshot().queued === 1, "B's retry queued");
    levels.bWaits = level(limiter);
    c.release();
    const cEnd = await cCall;
    levels.cRefunded = level(limiter);
    expect(cEnd).toBeInstanceOf(SdkError);
    expect((cEnd as SdkError).status).toBe(400);
    // Given back once, at most what C drew, and never above the level before C drew.
    expect(levels.cRefunded - levels.bWaits).toBeGreaterThanOrEqual(0);
    expect(levels.cRefunded - levels.bWaits).toBeLessThanOrEqual(2_000);
    expect(levels.cRefunded).toBeLessThanOrEqual(levels.start - 1_000);
    let bEnd: unknown;
    void bCall.then((end) => {
      bEnd = end;
    });
    await advanceUntil(clock, () => bEnd !== undefined, "B's retry answered");
    expect(bEnd).toEqual({ usage: { prompt_tokens: 1, completion_tokens: 1 } });
    expect(seen).toEqual(['c', 'b', 'b']);
    expect(limiter.snapshot().queued).toBe(0);
    expect(limiter.snapshot().queuedUnits).toBe(0);
    // The caller's own correction of B's usage (1 token of 1,000 drawn), as the docs show: once.
    const before = level(limiter);
    limiter.charge({ tokens: 1 - 1_000 });
    expect(level(limiter) - before).toBeLessThanOrEqual(999);
    expect(level(limiter)).toBeLessThanOrEqual(limiter.snapshot().budgets?.tokens?.capacity ?? 0);
  });
});
