import type { IncomingMessage, ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
import { Agent, request, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { serveLocal } from './helpers/llm-clients.js';

// A request body sent compressed is decoded (zlib's streams) before its draw. Here zlib's gunzip
// stream is held: it takes the bytes and gives nothing, until it is destroyed, so a call that the
// adapter would only stop once its body decoded hangs. Regressions: an abort, or the adapter's
// close, while the body decoded was seen only when the decoding ended (a "zip bomb" decodes for
// 0.5 s), where the adapters' rule is that an aborted call ends at once, even while it waits; and
// the decoding ran on to its end (zlib's one-call form cannot be stopped).

const held = vi.hoisted(() => ({ engines: [] as import('node:stream').Transform[] }));
vi.mock('node:zlib', async (original) => {
  const zlib = await original<typeof import('node:zlib')>();
  const { Transform } = await import('node:stream');
  return {
    ...zlib,
    createGunzip: () => {
      const engine = new Transform({ transform: () => {} });
      held.engines.push(engine);
      return engine;
    },
  };
});

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const engine of held.engines.splice(0)) engine.destroy();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const GZIPPED = { 'content-type': 'application/json', 'content-encoding': 'gzip', authorization: 'Bearer k' };
const BODY = gzipSync(JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }));

async function server() {
  const got: number[] = [];
  const origin = await serveLocal(async (req: IncomingMessage, res: ServerResponse) => {
    for await (const _ of req);
    got.push(1);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  }, cleanups);
  return { origin, got };
}

type Kind =
  | 'the interceptor'
  | "the fetch wrapper over undici's fetch"
  | "the fetch wrapper over Node's fetch";
const KINDS: Kind[] = [
  'the interceptor',
  "the fetch wrapper over undici's fetch",
  "the fetch wrapper over Node's fetch",
];

function client(kind: Kind, origin: string) {
  const options = {
    limiters: { llm: { origins: [origin], api: 'openai' as const } },
    default: false as const,
    clock: new ManualClock(),
  };
  if (kind !== 'the interceptor') {
    const f = rateLimitedFetch(
      kind === "the fetch wrapper over Node's fetch" ? options : { ...options, fetch: undiciFetch as never },
    );
    cleanups.push(() => f.close());
    const post = (signal?: AbortSignal) =>
      f(`${origin}/v1/chat/completions`, { method: 'POST', headers: GZIPPED, body: BODY, signal });
    return { post, close: () => f.close(), limiter: () => f.registry.get('llm') as AdaptiveRateLimiter };
  }
  const interceptor = adaptiveRateLimit(options);
  const agent = new Agent().compose(interceptor);
  cleanups.push(
    () => agent.close(),
    () => interceptor.close(),
  );
  const post = (signal?: AbortSignal) =>
    request(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: GZIPPED,
      body: BODY,
      signal,
      dispatcher: agent,
    });
  return {
    post,
    close: () => interceptor.close(),
    limiter: () => interceptor.registry.get('llm') as AdaptiveRateLimiter,
  };
}

/** How a call ended, once the event loop ran its turn: `pending` while it has not. */
async function settled(call: Promise<unknown>): Promise<unknown> {
  let outcome: unknown = 'pending';
  call.then(
    () => {
      outcome = 'answered';
    },
    (error: unknown) => {
      outcome = error;
    },
  );
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
  return outcome;
}

describe('a call whose compressed body is decoding', () => {
  it.each(KINDS)('ends at once when aborted, with the reason, nothing drawn or sent: %s', async (kind) => {
    const { origin, got } = await server();
    const { post, limiter } = client(kind, origin);
    const drawn: unknown[] = [];
    limiter().on('acquired', (e) => drawn.push(e));
    const abort = new AbortController();
    const call = post(abort.signal);
    expect(await settled(call)).toBe('pending');
    expect(held.engines.map((e) => e.destroyed)).toEqual([false]);
    const reason = new Error('stop');
    abort.abort(reason);
    expect(await settled(call)).toBe(reason);
    // The decoding stopped too.
    expect(held.engines.map((e) => e.destroyed)).toEqual([true]);
    expect(drawn).toEqual([]);
    expect(got).toEqual([]);
  });

  it.each(KINDS)('is refused at once when its adapter closes, nothing drawn or sent: %s', async (kind) => {
    const { origin, got } = await server();
    const { post, close, limiter } = client(kind, origin);
    const drawn: unknown[] = [];
    limiter().on('acquired', (e) => drawn.push(e));
    const call = post();
    expect(await settled(call)).toBe('pending');
    await close();
    const outcome = await settled(call);
    expect(outcome).toBeInstanceOf(RateLimitRejectedError);
    expect((outcome as RateLimitRejectedError).reason).toBe('closed');
    expect(held.engines.map((e) => e.destroyed)).toEqual([true]);
    expect(drawn).toEqual([]);
    expect(got).toEqual([]);
  });
});
