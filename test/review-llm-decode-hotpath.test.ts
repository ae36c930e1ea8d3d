import type { IncomingMessage, ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
import { Agent, type Dispatcher, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { serveLocal } from './helpers/llm-clients.js';

// A body sent as it is (no `content-encoding`: the common case) through an adapter whose limiter
// reads it (an LLM API's, with `units`): only a compressed body is decoded first, off the event
// loop, so this one must draw in the call itself, with no promise or await before it, and its
// headers made into a record once. Regression: the interceptor made a Buffer body's header record
// twice (once to find its `content-encoding`, once for the callbacks).

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const CHAT = JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });

async function server() {
  return serveLocal(async (req: IncomingMessage, res: ServerResponse) => {
    for await (const _ of req);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  }, cleanups);
}

const options = (origin: string) => ({
  limiters: { llm: { origins: [origin], api: 'openai' as const } },
  default: false as const,
  clock: new ManualClock(),
  units: () => 1,
});

/** `headers` as a plain object that counts how often its fields are listed. */
function counted(headers: Record<string, string>) {
  const count = { listed: 0 };
  const proxy = new Proxy(headers, {
    ownKeys(target) {
      count.listed++;
      return Reflect.ownKeys(target);
    },
  });
  return { proxy, count };
}

/** Dispatches `body` through the interceptor; resolves at the answer's end. */
function dispatched(agent: Dispatcher, origin: string, body: string | Buffer, headers: object) {
  return new Promise<void>((resolve, reject) => {
    agent.dispatch(
      { origin, path: '/v1/chat/completions', method: 'POST', headers: headers as never, body },
      {
        onRequestStart: () => {},
        onResponseStart: () => {},
        onResponseData: () => {},
        onResponseEnd: () => resolve(),
        onResponseError: (_c, error) => reject(error),
      },
    );
  });
}

describe('a body sent as it is, its limiter reading it', () => {
  it.each([
    ['a string', CHAT],
    ['a Buffer', Buffer.from(CHAT)],
  ] as const)('draws inside the interceptor dispatch call: %s', async (_kind, body) => {
    const origin = await server();
    const interceptor = adaptiveRateLimit(options(origin));
    const agent = new Agent().compose(interceptor);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
    );
    const drawn: string[] = [];
    (interceptor.registry.get('llm') as AdaptiveRateLimiter).on('acquired', () => drawn.push('drawn'));
    const done = dispatched(agent, origin, body, { 'content-type': 'application/json' });
    expect(drawn).toEqual(['drawn']);
    await done;
  });

  it('has its headers made into a record once by the interceptor, a Buffer as a string', async () => {
    const origin = await server();
    const interceptor = adaptiveRateLimit(options(origin));
    const agent = new Agent().compose(interceptor);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
    );
    const listed: number[] = [];
    for (const body of [CHAT, Buffer.from(CHAT)]) {
      const { proxy, count } = counted({ 'content-type': 'application/json', authorization: 'Bearer k' });
      await dispatched(agent, origin, body, proxy);
      listed.push(count.listed);
    }
    expect(listed[1]).toBe(listed[0]);
  });

  it.each([
    ["undici's fetch", undiciFetch as never],
    ["Node's fetch", undefined],
  ] as const)('draws inside the fetch wrapper call, a Buffer: over %s', async (_kind, fetch) => {
    const origin = await server();
    const f = rateLimitedFetch({ ...options(origin), fetch });
    cleanups.push(() => f.close());
    const drawn: string[] = [];
    (f.registry.get('llm') as AdaptiveRateLimiter).on('acquired', () => drawn.push('drawn'));
    const call = f(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: Buffer.from(CHAT),
    });
    expect(drawn).toEqual(['drawn']);
    await (await call).text();
  });
});

describe('a body sent compressed, its limiter not partitioned', () => {
  it('is not waited for when only partition or partitionName would read it (no partition)', async () => {
    const origin = await server();
    // The adapter's `partition`, but the limiter partitions nothing (`partitionBy: false`, no `api`).
    const interceptor = adaptiveRateLimit({
      limiters: { a: { origins: [origin], partitionBy: false } },
      default: false,
      clock: new ManualClock(),
      partition: () => 'p',
      partitionName: () => 'n',
    });
    const agent = new Agent().compose(interceptor);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
    );
    const drawn: string[] = [];
    (interceptor.registry.get('a') as AdaptiveRateLimiter).on('acquired', () => drawn.push('drawn'));
    const done = dispatched(agent, origin, gzipSync(CHAT), {
      'content-type': 'application/json',
      'content-encoding': 'gzip',
    });
    expect(drawn).toEqual(['drawn']);
    await done;
  });
});
