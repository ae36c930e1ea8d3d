import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { until } from './helpers/rate-limited-server.js';

// `api: 'openai'`: a call the API refuses with a 4xx that is not a throttle (400
// invalid_request_error: `max_tokens` too large) used no tokens. Its token estimate is given back
// when the answer comes; the request stays charged; a `usage` in such an answer is charged in the
// estimate's place. A real node:http server on 127.0.0.1 announces 10,000 tokens/min; the
// limiter runs on a manual clock, moved only while a call waits for its tokens.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const QUOTA = {
  'content-type': 'application/json',
  'x-ratelimit-limit-requests': '100',
  'x-ratelimit-remaining-requests': '99',
  'x-ratelimit-reset-requests': '1s',
  'x-ratelimit-limit-tokens': '10000',
  'x-ratelimit-remaining-tokens': '9000',
  'x-ratelimit-reset-tokens': '6s',
};

/** 400 invalid_request_error for `max_tokens` > 100,000 (with `usage` when asked), else 200 with usage. */
async function serve(refusalUsage?: number) {
  const seen: number[] = [];
  /** A refusal with usage sends its head, and its body once released (its usage comes later). */
  const held: (() => void)[] = [];
  const server: Server = createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    const maxTokens = JSON.parse(body).max_tokens as number;
    seen.push(maxTokens);
    if (maxTokens > 100_000) {
      const error = { message: 'max_tokens is too large', type: 'invalid_request_error' };
      if (refusalUsage === undefined) {
        res.writeHead(400, QUOTA).end(JSON.stringify({ error }));
        return;
      }
      res.writeHead(400, QUOTA).flushHeaders();
      held.push(() => res.end(JSON.stringify({ error, usage: { prompt_tokens: refusalUsage } })));
    } else {
      res.writeHead(200, QUOTA).end(JSON.stringify({ usage: { prompt_tokens: 5, completion_tokens: 5 } }));
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  const release = () => {
    for (const end of held.splice(0)) end();
  };
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, release };
}

type Kind = 'fetch wrapper' | 'interceptor';

/** What both clients answer: a status and a body to read. */
interface Answer {
  readonly status: number;
  text(): Promise<string>;
}

function client(
  kind: Kind,
  origin: string,
  clock: ManualClock,
  more: readonly string[] = [],
): {
  limiter: AdaptiveRateLimiter;
  call: (maxTokens: number, to?: string) => Promise<Answer>;
} {
  const options = { limiters: { llm: { origins: [origin, ...more], api: 'openai' as const } }, clock };
  const body = (maxTokens: number) =>
    JSON.stringify({ model: 'gpt-x', messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens });
  const init = (maxTokens: number) => ({
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
    body: body(maxTokens),
  });
  if (kind === 'fetch wrapper') {
    const f = rateLimitedFetch(options);
    cleanups.push(() => f.close());
    const limiter = f.registry.get('llm') as AdaptiveRateLimiter;
    return {
      limiter,
      call: (maxTokens: number, to = origin) => f(`${to}/v1/chat/completions`, init(maxTokens)),
    };
  }
  const interceptor = adaptiveRateLimit({ ...options, default: false });
  const agent = new Agent().compose(interceptor);
  cleanups.push(
    () => agent.close(),
    () => interceptor.close(),
  );
  const limiter = interceptor.registry.get('llm') as AdaptiveRateLimiter;
  return {
    limiter,
    // undici's request hands the interceptor the body as a string, which it reads (its fetch, a stream).
    call: async (maxTokens: number, to = origin) => {
      const { method, headers, body } = init(maxTokens);
      const answer = await agent.request({ origin: to, path: '/v1/chat/completions', method, headers, body });
      return { status: answer.statusCode, text: () => answer.body.text() };
    },
  };
}

/** Moves the clock a second at a time until `promise` settles (the round trips run in real time). */
async function drive<T>(clock: ManualClock, promise: Promise<T>): Promise<T> {
  let done = false;
  const settled = promise.finally(() => {
    done = true;
  });
  await until(
    () => {
      if (!done) clock.advance(1_000);
      return done;
    },
    'the call to settle',
    600,
  );
  return settled;
}

const tokens = (limiter: AdaptiveRateLimiter) => limiter.snapshot().budgets?.tokens?.tokens ?? Number.NaN;

describe("api: 'openai': a call the API refuses with 400 gives back its token estimate", () => {
  it.each<Kind>(['fetch wrapper', 'interceptor'])(
    'the next call is sent, not refused for a debt of a million tokens: %s',
    async (kind) => {
      const { origin, seen } = await serve();
      const clock = new ManualClock();
      const { limiter, call } = client(kind, origin, clock);

      expect((await call(10)).status).toBe(200);
      const refused = await drive(clock, call(1_000_000));
      expect(refused.status).toBe(400);
      // The answer's body is not read: the estimate is given back when its head comes.
      expect(tokens(limiter)).toBeGreaterThan(0);
      const requests = limiter.snapshot().budgets?.requests?.tokens ?? Number.NaN;

      const next = await call(10);
      expect(next.status).toBe(200);
      await next.text();
      expect(seen).toEqual([10, 1_000_000, 10]);
      // The refused call's request stayed charged (an API counts the requests it refuses).
      expect(limiter.snapshot().budgets?.requests?.tokens).toBeLessThan(requests);
    },
  );

  it.each<Kind>(['fetch wrapper', 'interceptor'])(
    'a refusal whose body reports usage is charged that usage, not the estimate: %s',
    async (kind) => {
      const { origin, release } = await serve(3_000);
      const clock = new ManualClock();
      const { limiter, call } = client(kind, origin, clock);
      expect((await call(10)).status).toBe(200);

      const refused = await drive(clock, call(1_000_000));
      const before = tokens(limiter);
      release();
      await refused.text();
      // Charged what the usage says (the call was not admitted: not max_tokens), against what is
      // charged now (nothing: the estimate was given back when the answer's head came).
      expect(before - tokens(limiter)).toBe(3_000);
    },
  );
});

/** An origin on 127.0.0.1 where nothing listens: a connection to it is refused. */
async function deadOrigin(): Promise<string> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

describe("api: 'openai': a call that never reached the API gives back its token estimate", () => {
  it.each<Kind>(['fetch wrapper', 'interceptor'])(
    'a refused connection keeps the request drawn and gives the 5,000 tokens back: %s',
    async (kind) => {
      const { origin } = await serve();
      const dead = await deadOrigin();
      const clock = new ManualClock();
      const { limiter, call } = client(kind, origin, clock, [dead]);
      expect((await call(10)).status).toBe(200);
      const before = tokens(limiter);
      const requests = limiter.snapshot().budgets?.requests?.tokens ?? Number.NaN;

      const error = await call(5_000, dead).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(Error);
      // The clock stood still: no refill. The tokens are back; the request stays drawn.
      expect(tokens(limiter)).toBe(before);
      expect(limiter.snapshot().budgets?.requests?.tokens).toBe(requests - 1);
    },
  );
});
