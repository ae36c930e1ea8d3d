import { afterEach, describe, expect, it } from 'vitest';
import type { LlmApi } from '../src/config/api.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { type LlmClientKind, llmClient, serveLocal } from './helpers/llm-clients.js';

// An answer's headers announce what the API has charged, this call's real cost included (OpenAI
// counts the prompt's tokens at admission, Anthropic its input tokens), and set the level from
// it; its `usage` at the body's end then corrects the estimate. A usage above the estimate was
// charged on top of the level the same answer's `remaining` had just set: the call's excess was
// counted twice, and the limiter believed 2,000 tokens fewer than the API said were left. A real
// node:http server on 127.0.0.1 announces 10,000 tokens/min, 6,000 of them left after a call
// whose prompt of 8,000 characters (estimated at 2,000 tokens) used 4,000; the limiter's clock
// stands still.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * Each API's answer: its headers announce 10,000 tokens a minute, of which `remaining` are left;
 * its `usage` says 4,000 prompt tokens.
 */
function answer(api: LlmApi, remaining: number) {
  if (api === 'openai') {
    return {
      headers: {
        'x-ratelimit-limit-requests': '1000',
        'x-ratelimit-remaining-requests': '999',
        'x-ratelimit-limit-tokens': '10000',
        'x-ratelimit-remaining-tokens': String(remaining),
      },
      body: { object: 'chat.completion', choices: [], usage: { prompt_tokens: 4_000, completion_tokens: 1 } },
    };
  }
  return {
    headers: {
      'anthropic-ratelimit-requests-limit': '1000',
      'anthropic-ratelimit-requests-remaining': '999',
      'anthropic-ratelimit-input-tokens-limit': '10000',
      'anthropic-ratelimit-input-tokens-remaining': String(remaining),
      'anthropic-ratelimit-output-tokens-limit': '10000',
      'anthropic-ratelimit-output-tokens-remaining': '10000',
    },
    body: { type: 'message', content: [], usage: { input_tokens: 4_000, output_tokens: 1 } },
  };
}

/** Answers as `api` does: the first announces 6,000 tokens left, the second 2,000. */
function serve(api: LlmApi) {
  let n = 0;
  return serveLocal(async (req, res) => {
    for await (const _ of req);
    const { headers, body } = answer(api, n++ === 0 ? 6_000 : 2_000);
    res.writeHead(200, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
  }, cleanups);
}

/** A prompt of 8,000 characters: estimated at 2,000 tokens. */
const body = JSON.stringify({
  model: 'm',
  max_tokens: 1,
  messages: [{ role: 'user', content: 'x'.repeat(8_000) }],
});

const paths: Record<LlmApi, string> = { openai: '/v1/chat/completions', anthropic: '/v1/messages' };
const budgets: Record<LlmApi, string> = { openai: 'tokens', anthropic: 'input_tokens' };

const level = (limiter: AdaptiveRateLimiter, budget: string) =>
  limiter.snapshot().budgets?.[budget]?.tokens ?? Number.NaN;

describe('a usage above the estimate, in an answer whose headers announced what remains', () => {
  for (const api of ['openai', 'anthropic'] as const) {
    it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
      `api: '${api}': the excess is not charged again below the API's remaining: %s`,
      async (kind) => {
        const origin = await serve(api);
        const { limiter, post } = llmClient(kind, origin, api, cleanups);
        await post(paths[api], body);
        // 6,000 less the reserve (250: 1.5 s of 10,000/min); the excess of 2,000 charged on top
        // of it left 3,750.
        expect(level(limiter, budgets[api])).toBeCloseTo(5_750, 0);
        // The next call's excess is in its answer's `remaining` too: 2,000 left, less the reserve
        // (charged again, -250).
        await post(paths[api], body);
        expect(level(limiter, budgets[api])).toBeCloseTo(1_750, 0);
      },
    );
  }
});
