import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { InterceptorOptions } from '../src/http/options.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { wrap } from '../src/wrap/wrap.js';
import {
  agentWith,
  cleanups,
  get,
  installGlobal,
  keepGlobalDispatcher,
  limit,
  serve,
} from './helpers/interceptor-fixtures.js';
import type { RateLimitedServer } from './helpers/rate-limited-server.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';
import { failOnUnhandledRejections, flush } from './helpers/unhandled.js';

// Attacks, through the HTTP adapters and `wrap`, on the line's early deadlines: a retry of a
// throttled request re-acquires with what it waited, so it has less of its maxWait left than a
// first attempt queued before it, and is refused at its own deadline from behind that head. Real
// node:http servers on 127.0.0.1, real undici Agents; a ManualClock drives the limiter; state is
// asserted, never a duration.

failOnUnhandledRejections();

/**
 * A server: `/a` is held at its first request (answered by the test), then 200; every other
 * path is 200 `ok <path>`.
 */
async function scripted(): Promise<{ server: RateLimitedServer; heldA: ServerResponse[] }> {
  const heldA: ServerResponse[] = [];
  let seenA = 0;
  const server = await serve({
    capacity: 1_000,
    respond: (req, res) => {
      if (req.url === '/a' && ++seenA === 1) {
        heldA.push(res);
        return true;
      }
      res.writeHead(200).end(`ok ${req.url}`);
      return true;
    },
  });
  return { server, heldA };
}

const THROTTLED_BODY = 'slow down: A, the first and only attempt';

/** Records the limiter's `rejected` and `canceled` events. */
function events(limiter: AdaptiveRateLimiter) {
  const seen: string[] = [];
  limiter.on('rejected', (e) => seen.push(`rejected:${e.reason}`));
  limiter.on('canceled', () => seen.push('canceled'));
  return seen;
}

/**
 * The scene: at 0 a pause of 30 s; A queues (deadline 60 s), is granted at 30 s and held at the
 * server; a pause to 40 s; B queues (deadline 90 s); A's 429 (Retry-After: 1) is answered, and
 * its retry queues behind B with 30 s of its maxWait left (deadline 60 s); a pause to 80 s.
 */
async function scene(
  send: (path: string, signal?: AbortSignal) => Promise<{ status: number; body: string }>,
  limiterOf: () => AdaptiveRateLimiter | undefined,
  heldA: ServerResponse[],
  clock: ManualClock,
  signalA?: AbortSignal,
  answer: { headers: Record<string, string>; body: string } = {
    headers: { 'retry-after': '1', 'x-which': 'A' },
    body: THROTTLED_BODY,
  },
) {
  expect((await send('/w')).status).toBe(200);
  const limiter = limiterOf() as AdaptiveRateLimiter;
  const seen = events(limiter);
  limiter.pauseFor(30_000);
  const a = settled(send('/a', signalA));
  await until(() => limiter.snapshot().queued === 1, 'A to queue');
  clock.advance(30_000);
  await until(() => heldA.length === 1, 'A to reach the server');
  limiter.pauseFor(10_000);
  const b = settled(send('/b'));
  await until(() => limiter.snapshot().queued === 1, 'B to queue');
  heldA[0]?.writeHead(429, answer.headers).end(answer.body);
  await until(() => limiter.snapshot().queued === 2, "A's retry to queue behind B");
  // Another instance's 429 (or a slow call's): the pause grows past the retry's deadline.
  limiter.pauseFor(50_000);
  return { limiter, seen, a, b };
}

type Send = (path: string, signal?: AbortSignal) => Promise<{ status: number; body: string }>;
interface SendOptions {
  signal?: AbortSignal | undefined;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
}
interface Adapter {
  send: (path: string, options?: SendOptions) => Promise<{ status: number; body: string }>;
  limiterOf: () => AdaptiveRateLimiter | undefined;
  close: () => void;
}
type Make = (server: RateLimitedServer, options: InterceptorOptions) => Adapter;

const viaInterceptor: Make = (server, options) => {
  const rl = limit(options);
  const agent = agentWith(rl);
  return {
    send: (path, { signal, method = 'GET', headers, body } = {}) =>
      get(agent, `${server.origin}${path}`, {
        method: method as Dispatcher.HttpMethod,
        ...(signal === undefined ? {} : { signal }),
        ...(headers === undefined ? {} : { headers }),
        ...(body === undefined ? {} : { body }),
      }),
    limiterOf: () => rl.registry.get(server.origin),
    close: () => rl.close(),
  };
};

/** `Adapter.send` through a fetch (the wrapper, or Node's own) to `origin`. */
const sendByFetch =
  (fetchOf: typeof fetch, origin: string): Adapter['send'] =>
  async (path, { signal, method = 'GET', headers, body } = {}) => {
    const response = await fetchOf(`${origin}${path}`, {
      method,
      ...(signal === undefined ? {} : { signal }),
      ...(headers === undefined ? {} : { headers }),
      ...(body === undefined ? {} : { body }),
    });
    return { status: response.status, body: await response.text() };
  };

const viaFetch: Make = (server, options) => {
  const limited = rateLimitedFetch(options);
  cleanups.push(() => limited.close());
  return {
    send: sendByFetch(limited, server.origin),
    limiterOf: () => limited.registry.get(server.origin),
    close: () => limited.close(),
  };
};

/** `send(path, signal)` of an adapter. */
const sendOf =
  (adapter: Adapter): Send =>
  (path, signal) =>
    adapter.send(path, { signal });

/** Node's own fetch through the interceptor installed as undici's global dispatcher. */
const viaNodeFetch: Make = (server, options) => {
  const rl = installGlobal(options);
  return {
    send: sendByFetch(fetch, server.origin),
    limiterOf: () => rl.registry.get(server.origin),
    close: () => rl.close(),
  };
};

/** A first call through `adapter` (which makes its limiter); its `send`, limiter and events. */
async function warm(adapter: Adapter) {
  const send = sendOf(adapter);
  expect((await send('/w')).status).toBe(200);
  const limiter = adapter.limiterOf() as AdaptiveRateLimiter;
  return { send, limiter, seen: events(limiter) };
}

/** Past the pause (20 s on), B is served and the line is empty. */
async function servedAfter(
  clock: ManualClock,
  b: { done: boolean; value?: { status: number } | undefined },
  limiter: AdaptiveRateLimiter,
) {
  clock.advance(20_000);
  await until(() => b.done, "B's answer");
  expect(b.value?.status).toBe(200);
  expect(limiter.snapshot().queued).toBe(0);
}

/**
 * At 35 s the adapter closes: the retry (A) gets its held 429 with `body`, B a refusal, each
 * told once (`rejected: closed`), and nothing more later.
 */
async function closedAt35s(
  clock: ManualClock,
  adapter: Adapter,
  { limiter, seen, a, b }: Awaited<ReturnType<typeof scene>>,
  body: string,
) {
  clock.advance(5_000);
  await flush();
  adapter.close();
  await until(() => a.done && b.done, 'both to settle');
  expect(a.value?.status).toBe(429);
  expect(a.value?.body).toBe(body);
  expect(b.value).toBeUndefined();
  expect(limiter.snapshot().queued).toBe(0);
  expect(seen).toEqual(['rejected:closed', 'rejected:closed']);
  clock.advance(60_000);
  await flush();
  expect(seen).toHaveLength(2);
}

keepGlobalDispatcher();

const ADAPTERS: [string, Make][] = [
  ['the interceptor', viaInterceptor],
  ['the fetch wrapper', viaFetch],
  ["Node's fetch through the global interceptor", viaNodeFetch],
];

/** An OpenAI-shaped server: the call with `x-id: A` is held at its first request; the rest 200 with usage. */
async function openaiServer(): Promise<{ server: RateLimitedServer; heldA: ServerResponse[] }> {
  const heldA: ServerResponse[] = [];
  const server = await serve({
    capacity: 1_000,
    respond: (req, res) => {
      if (req.headers['x-id'] === 'A' && heldA.length === 0) {
        heldA.push(res);
        return true;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          id: String(req.headers['x-id']),
          usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 },
        }),
      );
      return true;
    },
  });
  return { server, heldA };
}

const OPENAI_429 = JSON.stringify({
  error: { message: 'Rate limit reached for requests', type: 'requests', code: 'rate_limit_exceeded' },
});

/** `send(path, signal)` as an OpenAI call: every call to one path, told apart by `x-id`. */
const openaiSendOf =
  (adapter: Adapter): Send =>
  (path, signal) =>
    adapter.send('/v1/chat/completions', {
      signal,
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-id': path.slice(1).toUpperCase() },
      body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 }),
    });

const OPENAI_ANSWER = {
  headers: { 'retry-after': '1', 'content-type': 'application/json' },
  body: OPENAI_429,
};

/** A server and how a call reaches it: plain GETs, or OpenAI calls (`api: 'openai'`, two budgets). */
interface Kind {
  serve: () => Promise<{ server: RateLimitedServer; heldA: ServerResponse[] }>;
  sendOf: (adapter: Adapter) => Send;
  answer: { headers: Record<string, string>; body: string };
  api?: 'openai';
}

const KINDS: [string, Kind][] = [
  [
    'plain',
    {
      serve: scripted,
      sendOf,
      answer: { headers: { 'retry-after': '1', 'x-which': 'A' }, body: THROTTLED_BODY },
    },
  ],
  [
    "api 'openai' (two budgets)",
    { serve: openaiServer, sendOf: openaiSendOf, answer: OPENAI_ANSWER, api: 'openai' },
  ],
];

const MATRIX = ADAPTERS.flatMap(([name, make]) =>
  KINDS.map(([kindName, kind]) => [`${name}, ${kindName}`, make, kind] as const),
);

describe.each(MATRIX)('%s: a retry refused from behind the head at its deadline', (_name, make, kind) => {
  async function setUp(maxConcurrent?: number, signalA?: AbortSignal) {
    const clock = new ManualClock();
    const { server, heldA } = await kind.serve();
    const adapter = make(server, {
      clock,
      maxAttempts: 2,
      default: {
        ...(kind.api ? { api: kind.api } : {}),
        initialUnitsPerMinute: 600,
        maxWait: 60_000,
        ...(maxConcurrent ? { maxConcurrent } : {}),
      },
    });
    const scened = await scene(kind.sendOf(adapter), adapter.limiterOf, heldA, clock, signalA, kind.answer);
    return { clock, server, adapter, ...scened };
  }

  for (const maxConcurrent of [undefined, 2]) {
    it(`gives the caller the held 429, once, body intact; B is served after (maxConcurrent ${maxConcurrent})`, async () => {
      const { clock, server, limiter, seen, a, b } = await setUp(maxConcurrent);
      clock.advance(29_000); // 59 s
      await flush();
      expect(a.done).toBe(false);
      clock.advance(1_000); // 60 s: the retry's deadline
      await until(() => a.done, "A's answer");
      expect(a.value?.status).toBe(429);
      expect(a.value?.body).toBe(kind.answer.body);
      expect(seen).toEqual(['rejected:max-wait']);
      expect(limiter.snapshot().queued).toBe(1);
      await servedAfter(clock, b, limiter); // 20 s on: the pause over
      if (kind.api === undefined) expect(server.received.filter((r) => r.path === '/a')).toHaveLength(1);
      expect(seen).toEqual(['rejected:max-wait']);
    });
  }

  it('ends the retry with the abort of its caller while it waits behind the head; nothing more at its deadline', async () => {
    const controller = new AbortController();
    const { clock, limiter, seen, a, b } = await setUp(undefined, controller.signal);
    clock.advance(5_000); // 35 s
    await flush();
    controller.abort(new Error('caller went away'));
    await until(() => a.done, "A's abort");
    expect(a.value).toBeUndefined();
    expect(seen).toEqual(['canceled']);
    expect(limiter.snapshot().queued).toBe(1);
    clock.advance(25_000); // 60 s: its deadline, passed with nobody
    await flush();
    expect(seen).toEqual(['canceled']);
    await servedAfter(clock, b, limiter); // 20 s on: the pause over
    expect(seen).toEqual(['canceled']);
  });

  it("settles both at close(): the retry gets its held 429, B a 'closed' refusal", async () => {
    const { clock, adapter, limiter, seen, a, b } = await setUp();
    await closedAt35s(clock, adapter, { limiter, seen, a, b }, kind.answer.body);
  });
});

describe.each(ADAPTERS)('%s: a registry passed in, left open at close', (_name, make) => {
  it('with a registry passed in (left open at close): the retry gets its held 429, B a refusal, once each', async () => {
    const clock = new ManualClock();
    const { server, heldA } = await scripted();
    const registry = new RateLimiterRegistry({
      clock,
      default: { initialUnitsPerMinute: 600, maxWait: 60_000 },
    });
    cleanups.push(() => registry.close());
    const adapter = make(server, { maxAttempts: 2, registry });
    const { limiter, seen, a, b } = await scene(sendOf(adapter), adapter.limiterOf, heldA, clock);
    await closedAt35s(clock, adapter, { limiter, seen, a, b }, THROTTLED_BODY);
  });
});

describe.each(ADAPTERS)(
  '%s: two retries behind one head, refused each at its own deadline',
  (_name, make) => {
    it('gives each caller its own held 429 (no swap), in deadline order', async () => {
      const clock = new ManualClock();
      const held = new Map<string, ServerResponse>();
      const server = await serve({
        capacity: 1_000,
        respond: (req, res) => {
          const path = req.url ?? '';
          if ((path === '/a1' || path === '/a2') && !held.has(path)) {
            held.set(path, res);
            return true;
          }
          res.writeHead(200).end(`ok ${path}`);
          return true;
        },
      });
      const adapter = make(server, {
        clock,
        maxAttempts: 2,
        default: { initialUnitsPerMinute: 600, maxWait: 60_000 },
      });
      const { send, limiter, seen } = await warm(adapter);
      limiter.pauseFor(30_000);
      const a1 = settled(send('/a1')); // queued at 0: its retry will have 30 s left
      await until(() => limiter.snapshot().queued === 1, 'A1 to queue');
      clock.advance(5_000);
      const a2 = settled(send('/a2')); // queued at 5 s: its retry will have 35 s left
      await until(() => limiter.snapshot().queued === 2, 'A2 to queue');
      clock.advance(25_000); // 30 s: A1 granted
      await until(() => held.has('/a1'), 'A1 at the server');
      clock.advance(200); // A2 granted
      await until(() => held.has('/a2'), 'A2 at the server');
      limiter.pauseFor(10_000);
      const b = settled(send('/b'));
      await until(() => limiter.snapshot().queued === 1, 'B to queue');
      held.get('/a2')?.writeHead(429, { 'retry-after': '1' }).end('throttled A2');
      await until(() => limiter.snapshot().queued === 2, "A2's retry");
      held.get('/a1')?.writeHead(429, { 'retry-after': '1' }).end('throttled A1');
      await until(() => limiter.snapshot().queued === 3, "A1's retry");
      limiter.pauseFor(50_000); // to 80.2 s
      clock.advance(29_700); // 59.9 s
      await flush();
      expect([a1.done, a2.done]).toEqual([false, false]);
      clock.advance(400); // 60.3 s: past A1's retry's deadline (60.2 s: 30 s left at 30.2 s)
      await until(() => a1.done, "A1's answer");
      expect([a1.value?.status, a1.value?.body]).toEqual([429, 'throttled A1']);
      expect(a2.done).toBe(false);
      clock.advance(5_000); // 65.3 s: past A2's retry's deadline (65.1 s: 34.9 s left at 30.2 s)
      await until(() => a2.done, "A2's answer");
      expect([a2.value?.status, a2.value?.body]).toEqual([429, 'throttled A2']);
      expect(seen).toEqual(['rejected:max-wait', 'rejected:max-wait']);
      expect(limiter.snapshot().queued).toBe(1);
      await servedAfter(clock, b, limiter); // 20 s on: the pause over
    });
  },
);

describe('wrap with costs and maxAttempts: a retry refused from behind the head', () => {
  const sdk429 = (n: number) =>
    Object.assign(new Error(`429 #${n}`), { status: 429, headers: { 'retry-after': '1' } });

  it("ends the call with the SDK's own error, once; the next call's costs are its own", async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      initialUnitsPerMinute: 600,
      maxWait: 60_000,
      budgets: { tokens: { initialUnitsPerMinute: 600_000 } },
    });
    cleanups.push(() => limiter.close());
    const seen = events(limiter);
    let gate: (() => void) | undefined;
    let calls = 0;
    const errors: Error[] = [];
    const call = wrap(
      limiter,
      async (id: string) => {
        if (id !== 'A') return `ok ${id}`;
        calls++;
        // The first attempt is in flight until the test lets it answer.
        await new Promise<void>((resolve) => {
          gate = resolve;
        });
        const error = sdk429(calls);
        errors.push(error);
        throw error;
      },
      { costs: { tokens: 500 }, maxAttempts: 2 },
    );
    limiter.pauseFor(30_000);
    const a = settled(call('A'));
    await until(() => limiter.snapshot().queued === 1, 'A to queue');
    clock.advance(30_000);
    await until(() => gate !== undefined, 'A in flight');
    limiter.pauseFor(10_000);
    const b = settled(call('B'));
    await until(() => limiter.snapshot().queued === 1, 'B to queue');
    gate?.();
    await until(() => limiter.snapshot().queued === 2, "A's retry");
    limiter.pauseFor(50_000); // to 80 s
    clock.advance(30_000); // 60 s
    await until(() => a.done, "A's end");
    expect(a.error).toBe(errors[0]);
    expect(calls).toBe(1);
    expect(seen).toEqual(['rejected:max-wait']);
    expect(limiter.snapshot().queued).toBe(1);
    clock.advance(20_000); // 80 s
    await until(() => b.done, "B's end");
    expect(b.value).toBe('ok B');
    expect(limiter.snapshot().queued).toBe(0);
    expect(seen).toEqual(['rejected:max-wait']);
  });
});

describe.each(ADAPTERS)(
  '%s: a first attempt queued after maxWait was lowered (behind a longer deadline)',
  (_name, make) => {
    for (const rejection of ['error', 'response'] as const) {
      it(`is refused at its own deadline from behind the head (rejection: '${rejection}'); the head is served after`, async () => {
        const clock = new ManualClock();
        const { server } = await scripted();
        const adapter = make(server, {
          clock,
          maxAttempts: 2,
          rejection,
          default: { initialUnitsPerMinute: 600, maxWait: 60_000 },
        });
        const { send, limiter, seen } = await warm(adapter);
        limiter.pauseFor(10_000);
        const a = settled(send('/x')); // deadline 60 s
        await until(() => limiter.snapshot().queued === 1, 'A to queue');
        limiter.update({ maxWait: 20_000 });
        clock.advance(1_000);
        const b = settled(send('/y')); // deadline 21 s, behind A's 60 s
        await until(() => limiter.snapshot().queued === 2, 'B to queue');
        limiter.pauseFor(50_000); // to 51 s
        clock.advance(19_500); // 20.5 s
        await flush();
        expect(b.done).toBe(false);
        clock.advance(1_000); // 21.5 s
        await until(() => b.done, "B's refusal");
        if (rejection === 'response') {
          expect(b.value?.status).toBe(429);
          expect(JSON.parse(b.value?.body ?? '{}').error?.reason).toBe('max-wait');
        } else {
          expect(b.value).toBeUndefined();
          expect(b.error).toBeDefined();
        }
        expect(seen).toEqual(['rejected:max-wait']);
        expect(limiter.snapshot().queued).toBe(1);
        clock.advance(30_000); // 51.5 s: the pause is over
        await until(() => a.done, "A's answer");
        expect(a.value?.status).toBe(200);
        expect(limiter.snapshot().queued).toBe(0);
        expect(server.received.map((r) => r.path)).toEqual(['/w', '/x']);
      });
    }
  },
);

describe.each(ADAPTERS)(
  '%s, maxConcurrent 1: a retry waiting for the slot a queued B holds',
  (_name, make) => {
    it('is refused at its deadline with its held 429, once; B is served after', async () => {
      const clock = new ManualClock();
      const { server, heldA } = await scripted();
      const adapter = make(server, {
        clock,
        maxAttempts: 2,
        default: { initialUnitsPerMinute: 600, maxWait: 60_000, maxConcurrent: 1 },
      });
      const { send, limiter, seen } = await warm(adapter);
      limiter.pauseFor(30_000);
      const a = settled(send('/a'));
      await until(() => limiter.snapshot().queued === 1, 'A to queue');
      clock.advance(30_000);
      await until(() => heldA.length === 1, 'A at the server');
      limiter.pauseFor(10_000);
      const b = settled(send('/b')); // waits for A's slot
      await flush();
      heldA[0]?.writeHead(429, { 'retry-after': '1' }).end(THROTTLED_BODY);
      // B takes the slot and waits in the line; A's retry waits for the slot (30 s left).
      await until(() => limiter.snapshot().queued === 1, 'B to queue in the line');
      await new Promise((resolve) => setTimeout(resolve, 20));
      limiter.pauseFor(50_000); // to 80 s
      clock.advance(29_000); // 59 s
      await flush();
      expect(a.done).toBe(false);
      clock.advance(1_500); // 60.5 s
      await until(() => a.done, "A's answer");
      expect(a.value?.status).toBe(429);
      expect(a.value?.body).toBe(THROTTLED_BODY);
      expect(seen).toEqual(['rejected:max-wait']);
      await servedAfter(clock, b, limiter); // 20 s on: the pause over
      expect(seen).toEqual(['rejected:max-wait']);
      expect(server.received.filter((r) => r.path === '/a')).toHaveLength(1);
    });
  },
);

describe.each(ADAPTERS)('%s: a held 429 of many chunks', (_name, make) => {
  it('comes back byte for byte when its retry is refused from behind the head', async () => {
    const clock = new ManualClock();
    const { server, heldA } = await scripted();
    const adapter = make(server, {
      clock,
      maxAttempts: 2,
      default: { initialUnitsPerMinute: 600, maxWait: 60_000 },
    });
    // Just under the hold's cap (64 KiB), in many chunks.
    const body = Array.from({ length: 60 * 1024 }, (_, i) => String.fromCharCode(97 + (i % 26))).join('');
    const { limiter, seen, a } = await scene(sendOf(adapter), adapter.limiterOf, heldA, clock, undefined, {
      headers: { 'retry-after': '1', 'content-length': String(body.length) },
      body,
    });
    clock.advance(30_500);
    await until(() => a.done, "A's answer");
    expect(a.value?.status).toBe(429);
    expect(a.value?.body).toBe(body);
    expect(seen).toEqual(['rejected:max-wait']);
    adapter.close();
    await flush();
    expect(limiter.snapshot().queued).toBe(0);
  });
});

describe.each(ADAPTERS)('%s: announced quota headers answered out of grant order (held)', (_name, make) => {
  for (const [late, read] of [
    [8, false],
    [1, true],
  ] as const) {
    it(`a slow call's late answer with ${late} left (the last reading: 2) is ${read ? '' : 'not '}read`, async () => {
      const clock = new ManualClock();
      const held = new Map<string, ServerResponse>();
      const server = await serve({
        capacity: 1_000,
        respond: (req, res) => {
          held.set(req.url ?? '', res);
          return true;
        },
      });
      const adapter = make(server, { clock, maxAttempts: 1, default: { initialUnitsPerMinute: 6_000 } });
      const send = sendOf(adapter);
      const p1 = settled(send('/p1'));
      await until(() => held.has('/p1'), 'p1 at the server');
      const p2 = settled(send('/p2'));
      await until(() => held.has('/p2'), 'p2 at the server');
      const limiter = adapter.limiterOf() as AdaptiveRateLimiter;
      const quota = (left: number) => ({
        ratelimit: `"default";r=${left};t=60`,
        'ratelimit-policy': '"default";q=100;w=60',
      });
      held.get('/p2')?.writeHead(200, quota(2)).end('p2');
      await until(() => p2.done, 'p2');
      const after2 = limiter.snapshot().announcedRate;
      expect(after2).toBeDefined();
      held.get('/p1')?.writeHead(200, quota(late)).end('p1');
      await until(() => p1.done, 'p1');
      const after1 = limiter.snapshot().announcedRate;
      if (read) expect(after1).not.toBe(after2);
      else expect(after1).toBe(after2);
    });
  }
});
