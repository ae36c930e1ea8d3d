import { afterEach, describe, expect, it } from 'vitest';
import { UsageScanner } from '../src/http/llm.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { type LlmClientKind, llmClient, serveLocal } from './helpers/llm-clients.js';

// `api: 'openai'`: a JSON answer longer than the 8 MiB kept for its `usage` (embeddings of a few
// hundred texts: 2,048 base64 vectors of 1,536 dimensions are 17 MB) has its `usage` at its end:
// it is read from the answer's last bytes. It was not read: such a call kept its estimate (through
// Node's fetch, the running average of the chats: 1,000 tokens for 30,000). A real node:http
// server on 127.0.0.1 announces 1,000,000 tokens/min; the limiter's clock stands still, so the
// tokens a call leaves drawn are what it was charged.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const QUOTA = {
  'content-type': 'application/json',
  'x-ratelimit-limit-requests': '1000',
  'x-ratelimit-remaining-requests': '999',
  'x-ratelimit-reset-requests': '60ms',
  'x-ratelimit-limit-tokens': '1000000',
  'x-ratelimit-remaining-tokens': '1000000',
  'x-ratelimit-reset-tokens': '0s',
};

/** An embeddings answer of about 9 MiB whose usage, at its end, says 30,000 tokens. */
function bigAnswer(): string {
  const vector = 'A'.repeat(8_192);
  const data = Array.from({ length: 1_150 }, (_, index) => ({
    object: 'embedding',
    index,
    embedding: vector,
  }));
  const usage = { prompt_tokens: 30_000, total_tokens: 30_000 };
  return JSON.stringify({ object: 'list', data, model: 'text-embedding-3-small', usage });
}

async function serve() {
  const big = bigAnswer();
  let n = 0;
  return serveLocal(async (req, res) => {
    for await (const _ of req);
    // The first answer announces the bucket; the second is the large one.
    res.writeHead(200, QUOTA).end(n++ === 0 ? '{}' : big);
  }, cleanups);
}

const BODY = JSON.stringify({ model: 'text-embedding-3-small', input: 'abcd' });

const tokens = (limiter: AdaptiveRateLimiter) => limiter.snapshot().budgets?.tokens?.tokens ?? Number.NaN;

describe("api: 'openai': a JSON answer longer than 8 MiB", () => {
  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    'is corrected by the usage at its end: %s',
    async (kind) => {
      const origin = await serve();
      const { limiter, post } = llmClient(kind, origin, 'openai', cleanups);
      await post('/v1/embeddings', BODY);
      const before = tokens(limiter);
      expect((await post('/v1/embeddings', BODY)).length).toBeGreaterThan(8 * 1024 * 1024);
      expect(before - tokens(limiter)).toBe(30_000);
    },
  );
});

describe('UsageScanner: a JSON answer longer than 8 MiB', () => {
  const bytes = (text: string) => new TextEncoder().encode(text);

  it('reads the usage at its end, whatever the chunks, and nothing when the end has none', () => {
    const big = bigAnswer();
    for (const size of [1, 4_096, 16 * 1024 * 1024]) {
      const scanner = new UsageScanner('application/json');
      const all = bytes(big);
      // Byte by byte only near the end (the start is read in large pieces).
      const cut = size === 1 ? all.length - 200 : 0;
      if (cut > 0) scanner.push(all.subarray(0, cut));
      for (let i = cut; i < all.length; i += size) scanner.push(all.subarray(i, i + size));
      expect(scanner.end()).toEqual({ prompt_tokens: 30_000, total_tokens: 30_000 });
    }
    const none = new UsageScanner('application/json');
    none.push(bytes(`{"data":"${'A'.repeat(9 * 1024 * 1024)}","usage":`));
    none.push(bytes('{"prompt_tokens":'));
    expect(none.end()).toBeUndefined();
  });
});
