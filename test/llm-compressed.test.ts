import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { decodedBody } from '../src/http/llm-decode.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { llmAgent } from './helpers/llm-agent.js';

// Node's fetch asks for compressed answers (`accept-encoding: gzip, deflate, br`) and decodes them
// above the dispatcher: the interceptor, below it, sees the bytes as the server compressed them,
// as OpenAI's and Anthropic's JSON come to Node's fetch. Regression: the usage of such an answer
// was never read (no call corrected, the running average never learned), and a 429's body not
// parsed: a used-up quota (`insufficient_quota`) was retried as a rate limit, 4 times.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const HEADERS = {
  'x-ratelimit-limit-requests': '1000',
  'x-ratelimit-remaining-requests': '999',
  'x-ratelimit-reset-requests': '60ms',
  'x-ratelimit-limit-tokens': '600000',
  'x-ratelimit-remaining-tokens': '599000',
  'x-ratelimit-reset-tokens': '100ms',
};

const ENCODERS = {
  gzip: gzipSync,
  deflate: deflateSync,
  br: brotliCompressSync,
} as const;

type Encoding = keyof typeof ENCODERS;

/** An OpenAI-like server answering `status` and `json`, compressed with `encoding`. */
async function server(encoding: Encoding, status: number, json: unknown, type = 'application/json') {
  let hits = 0;
  const http = createServer((req: IncomingMessage, res: ServerResponse) => {
    hits++;
    req.resume();
    req.on('end', () => {
      const text = typeof json === 'string' ? json : JSON.stringify(json);
      // Compressed whether asked or not (Node 20's fetch asks for gzip and deflate only; it
      // decodes br all the same).
      res.writeHead(status, { 'content-type': type, 'content-encoding': encoding, ...HEADERS });
      const body = ENCODERS[encoding](text);
      res.end(body);
    });
  });
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  cleanups.push(() => new Promise((resolve) => http.close(resolve)));
  return { origin: `http://127.0.0.1:${(http.address() as AddressInfo).port}`, hits: () => hits };
}

/** A chat call through Node's own fetch over the interceptor, with a body the limiter cannot see (a stream). */
function call(origin: string) {
  const { interceptor, agent } = llmAgent(
    { origin, api: 'openai', rejection: 'response', clock: new ManualClock() },
    cleanups,
  );
  const body = JSON.stringify({
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 10,
  });
  const answer = fetch(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
    body: new Blob([body]).stream(),
    duplex: 'half',
    dispatcher: agent,
  } as RequestInit);
  return { interceptor, answer };
}

describe("api: 'openai' through Node's fetch, answers compressed", () => {
  for (const encoding of Object.keys(ENCODERS) as Encoding[]) {
    it(`${encoding}: the usage of a JSON answer corrects the estimate`, async () => {
      const usage = { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 };
      const api = await server(encoding, 200, { id: 'c', choices: [], usage });
      const { interceptor, answer } = call(api.origin);
      const limiter = interceptor.registry.get('llm') as AdaptiveRateLimiter;
      const charge = vi.spyOn(limiter, 'charge');
      const response = await answer;
      expect((await response.json()).usage).toEqual(usage); // the caller reads it decoded
      // Estimated 1,000 tokens (a body not seen, no answer yet), used 110.
      expect(charge).toHaveBeenCalledWith({ tokens: 110 - 1_000 });
    });
  }

  it('gzip: the usage of a stream of events corrects the estimate', async () => {
    const events =
      'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n' +
      'data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2}}\n\ndata: [DONE]\n\n';
    const api = await server('gzip', 200, events, 'text/event-stream');
    const { interceptor, answer } = call(api.origin);
    const charge = vi.spyOn(interceptor.registry.get('llm') as AdaptiveRateLimiter, 'charge');
    await (await answer).text();
    expect(charge).toHaveBeenCalledWith({ tokens: 42 - 1_000 });
  });

  it('gzip: a 429 for a used-up quota ends at once, with x-should-retry: false', async () => {
    const api = await server('gzip', 429, {
      error: {
        message: 'You exceeded your current quota',
        type: 'insufficient_quota',
        code: 'insufficient_quota',
      },
    });
    const { answer } = call(api.origin);
    const response = await answer;
    await response.text();
    expect({ hits: api.hits(), retry: response.headers.get('x-should-retry') }).toEqual({
      hits: 1,
      retry: 'false',
    });
  });
});

describe('decodedBody', () => {
  const text = new TextEncoder().encode('{"usage":{"prompt_tokens":1}}');

  it('decodes gzip, deflate (zlib or raw) and br, several in the order applied, and identity', () => {
    const raw = Buffer.from(text);
    expect(Buffer.from(decodedBody(gzipSync(raw), 'gzip', 1_000) ?? [])).toEqual(raw);
    expect(Buffer.from(decodedBody(deflateSync(raw), 'deflate', 1_000) ?? [])).toEqual(raw);
    expect(Buffer.from(decodedBody(brotliCompressSync(raw), 'br', 1_000) ?? [])).toEqual(raw);
    expect(Buffer.from(decodedBody(gzipSync(deflateSync(raw)), 'deflate, gzip', 1_000) ?? [])).toEqual(raw);
    expect(decodedBody(text, 'identity', 1_000)).toBe(text);
  });

  it('gives nothing for an unknown coding, bytes that do not decode, or more than the most it reads', () => {
    expect(decodedBody(text, 'zstd', 1_000)).toBeUndefined();
    expect(decodedBody(text, 'gzip', 1_000)).toBeUndefined();
    expect(decodedBody(gzipSync(Buffer.alloc(10_000)), 'gzip', 1_000)).toBeUndefined();
  });
});
