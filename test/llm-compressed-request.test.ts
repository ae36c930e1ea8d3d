import type { IncomingMessage, ServerResponse } from 'node:http';
import { gunzipSync, gzipSync } from 'node:zlib';
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { OutgoingRequest } from '../src/http/options.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { serveLocal } from './helpers/llm-clients.js';

// A request body sent compressed (`content-encoding: gzip`) to an LLM API's limiter, through both
// adapters, against a real node:http server. Regressions: the `units` and `partition` callbacks saw
// its compressed bytes (a JSON chat sent gzipped was bytes, not its object), and a "zip bomb"
// (100 kB that decode to 100 MiB of zeros) was decoded to the 64 MiB cap synchronously, the event
// loop standing still for 0.59 s (here) before the request went on.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const CHAT = { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 };
const GZIPPED = { 'content-type': 'application/json', 'content-encoding': 'gzip', authorization: 'Bearer k' };

/** An OpenAI-like server: it answers each call 200 with a usage, and keeps the bodies it got, decoded. */
async function server() {
  const got: unknown[] = [];
  const origin = await serveLocal(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    try {
      got.push(JSON.parse(gunzipSync(body, { maxOutputLength: 1024 * 1024 }).toString()));
    } catch {
      got.push(body.byteLength);
    }
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 } }));
  }, cleanups);
  return { origin, got };
}

/** 100 kB of gzip that decode to 100 MiB of zeros. */
const BOMB = gzipSync(Buffer.alloc(100 * 1024 * 1024));

type Kind = 'the fetch wrapper' | 'the interceptor';
const KINDS: Kind[] = ['the fetch wrapper', 'the interceptor'];

/**
 * A client of `origin` metered as OpenAI (its limiter `llm`), with `units` and `partition`
 * callbacks that record what they see; `post` sends `body` with `GZIPPED` headers and resolves at
 * the answer's end.
 */
function client(kind: Kind, origin: string, seen: { units: unknown[]; partition: unknown[] }) {
  const options = {
    limiters: { llm: { origins: [origin], api: 'openai' as const } },
    default: false as const,
    clock: new ManualClock(),
    units: (r: OutgoingRequest) => {
      seen.units.push(r.body);
      return 1;
    },
    partition: (r: OutgoingRequest) => {
      seen.partition.push(r.body);
      return undefined;
    },
  };
  if (kind === 'the fetch wrapper') {
    const f = rateLimitedFetch(options);
    cleanups.push(() => f.close());
    const limiter = () => f.registry.get('llm') as AdaptiveRateLimiter;
    const post = async (body: Buffer, signal?: AbortSignal) => {
      const answer = await f(`${origin}/v1/chat/completions`, {
        method: 'POST',
        headers: GZIPPED,
        body: body as BodyInit,
        signal,
      });
      await answer.text();
    };
    return { post, limiter };
  }
  const interceptor = adaptiveRateLimit(options);
  const agent = new Agent().compose(interceptor);
  cleanups.push(
    () => agent.close(),
    () => interceptor.close(),
  );
  const limiter = () => interceptor.registry.get('llm') as AdaptiveRateLimiter;
  const post = async (body: Buffer, signal?: AbortSignal) => {
    const answer = await request(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: GZIPPED,
      body,
      signal,
      dispatcher: agent,
    });
    await answer.body.text();
  };
  return { post, limiter };
}

describe('a request body sent compressed', () => {
  it.each(KINDS)('is seen decoded by the units and partition callbacks: %s', async (kind) => {
    const { origin, got } = await server();
    const seen = { units: [] as unknown[], partition: [] as unknown[] };
    const { post } = client(kind, origin, seen);
    await post(gzipSync(JSON.stringify(CHAT)));
    // Parsed as the JSON its content type says, as an uncompressed body is.
    expect(seen.units).toEqual([CHAT]);
    expect(seen.partition).toEqual([CHAT]);
    // Sent as it was given: compressed.
    expect(got).toEqual([CHAT]);
  });

  it.each(KINDS)('is seen as sent by the callbacks when it does not decode: %s', async (kind) => {
    const { origin } = await server();
    const seen = { units: [] as unknown[], partition: [] as unknown[] };
    const { post } = client(kind, origin, seen);
    const truncated = gzipSync(JSON.stringify(CHAT)).subarray(0, 20);
    await post(truncated);
    expect(seen.units).toHaveLength(1);
    expect(Buffer.from(seen.units[0] as Uint8Array).equals(truncated)).toBe(true);
  });

  it.each(KINDS)(
    'that decodes past the cap (100 kB to 100 MiB of zeros) is decoded off the event loop: %s',
    async (kind) => {
      const { origin, got } = await server();
      const seen = { units: [] as unknown[], partition: [] as unknown[] };
      const events: string[] = [];
      const { post, limiter } = client(kind, origin, seen);
      // The call draws its estimate once the body is read for it.
      limiter().on('acquired', () => events.push('drawn'));
      setImmediate(() => events.push('immediate'));
      // The immediate, scheduled before the call, ran while its body was decoded (it ran after
      // the draw: the decoding, then the draw, ran in the call, the event loop standing still).
      await post(BOMB);
      expect(events).toEqual(['immediate', 'drawn']);
      // Past the cap: a body not seen, its bytes as sent.
      expect((seen.units[0] as Uint8Array).byteLength).toBe(BOMB.byteLength);
      expect(got).toEqual([BOMB.byteLength]);
    },
  );

  it.each(KINDS)('aborted while it is decoded, is neither drawn for nor sent: %s', async (kind) => {
    const { origin, got } = await server();
    const seen = { units: [] as unknown[], partition: [] as unknown[] };
    const events: string[] = [];
    const { post, limiter } = client(kind, origin, seen);
    limiter().on('acquired', () => events.push('drawn'));
    const abort = new AbortController();
    setImmediate(() => abort.abort());
    await expect(post(BOMB, abort.signal)).rejects.toThrow(/abort/i);
    // (Refused at the abort, the decoding's result dropped: see test/review-llm-decode-stop.test.ts.)
    expect(events).toEqual([]);
    expect(got).toEqual([]);
  });
});
