import { afterEach, describe, expect, it } from 'vitest';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { type LlmClientKind, llmClient, serveLocal } from './helpers/llm-clients.js';

// `api: 'anthropic'`: an answer's headers announce what the API has charged, this call's real
// input tokens included (Anthropic counts them at admission); its `usage` at the body's end then
// corrects the estimate. When the announcement lowered the level (other processes on the same key
// drained it), the refund of an estimate above the usage was added on top of the API's own
// `remaining`: the limiter believed 3,000 tokens more than the API said were left. A real
// node:http server on 127.0.0.1 announces 10,000 input tokens/min (the second answer: 6,000 left);
// the limiter's clock stands still.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Answers with a usage of 1 input token; the first announces 10,000 left, the later ones 6,000. */
async function serve() {
  let n = 0;
  return serveLocal(async (req, res) => {
    for await (const _ of req);
    res
      .writeHead(200, {
        'content-type': 'application/json',
        'anthropic-ratelimit-requests-limit': '1000',
        'anthropic-ratelimit-requests-remaining': '999',
        'anthropic-ratelimit-input-tokens-limit': '10000',
        'anthropic-ratelimit-input-tokens-remaining': n++ === 0 ? '10000' : '6000',
        'anthropic-ratelimit-output-tokens-limit': '10000',
        'anthropic-ratelimit-output-tokens-remaining': '10000',
      })
      .end(JSON.stringify({ type: 'message', content: [], usage: { input_tokens: 1, output_tokens: 1 } }));
  }, cleanups);
}

const body = (chars: number) =>
  JSON.stringify({
    model: 'claude-x',
    max_tokens: 1,
    messages: [{ role: 'user', content: 'x'.repeat(chars) }],
  });

const input = (limiter: AdaptiveRateLimiter) =>
  limiter.snapshot().budgets?.input_tokens?.tokens ?? Number.NaN;

describe("api: 'anthropic': a call's usage below its estimate, after its headers lowered the level", () => {
  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    "the refund does not lift the level above the API's remaining: %s",
    async (kind) => {
      const origin = await serve();
      const { limiter, post } = llmClient(kind, origin, 'anthropic', cleanups);
      const call = (chars: number) => post('/v1/messages', body(chars));
      await call(4);
      // 12,000 characters: estimated at 3,000 input tokens; it used 1, and 6,000 are left.
      await call(12_000);
      // 6,000 less the reserve (250: 1.5 s of 10,000/min).
      expect(input(limiter)).toBeLessThanOrEqual(5_750);
    },
  );
});
