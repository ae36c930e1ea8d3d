import { afterEach, describe, expect, it } from 'vitest';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { drive } from './helpers/drive.js';
import { llmMockAndClients } from './helpers/llm-clients.js';

// A token budget with no rate yet (unlimited until its first 429) whose first 429 comes after a
// few small calls: another process drained the quota. The vendors' 429 announce the limit
// (`x-ratelimit-limit-tokens`, `anthropic-ratelimit-input-tokens-limit`): the cut starts from it,
// not from the few tokens this process sent (the old code cut a 10,000 tokens/min budget to 1,080
// (openai) and 108 (anthropic) tokens/min, and the next call of 2,000 tokens was refused at
// `maxWait`). The LLM mock (real node:http on 127.0.0.1) and both limiters share a manual clock.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe.each(['openai', 'anthropic'] as const)("api: '%s': a fresh token budget's first 429", (api) => {
  it('cuts from the limit the 429 announces, and the call passes on its retry', async () => {
    const { clock, mock, client } = await llmMockAndClients(
      { api, limits: { tokensPerMinute: 10_000, inputTokensPerMinute: 10_000 } },
      cleanups,
    );
    const url = `${mock.origin}${api === 'openai' ? '/v1/chat/completions' : '/v1/messages'}`;
    const call = (f: typeof fetch, chars: number) =>
      f(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer k', 'x-api-key': 'k' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'x'.repeat(chars) }],
          max_tokens: 10,
        }),
      });
    const ours = client();
    const other = client();
    const budget = api === 'openai' ? 'tokens' : 'input_tokens';
    const tokens = () => (ours.registry.get('llm') as AdaptiveRateLimiter).snapshot().budgets?.[budget];

    // One small call (10 tokens): the budget stays unlimited.
    expect((await call(ours, 2)).status).toBe(200);
    expect(tokens()?.rate).toBe(Number.POSITIVE_INFINITY);
    clock.advance(500);
    // The other process takes 9,000 of the 10,000 tokens.
    expect((await call(other, 36_000)).status).toBe(200);

    // 2,000 tokens: a 429 for the tokens, with the limit in its headers.
    const answer = await drive(clock, call(ours, 8_000));
    expect(mock.hits.map((h) => [h.status, h.refusedBy])).toEqual([
      [200, undefined],
      [200, undefined],
      [429, budget],
      [200, undefined],
    ]);
    expect(answer.status).toBe(200);
    expect([tokens()?.cuts, tokens()?.announcedRate]).toEqual([1, 10_000]);
    // From the announced 10,000 a minute, less the controller's cut (the old code: 1,080 or 108).
    expect(tokens()?.rate).toBeGreaterThanOrEqual(8_000);
    expect(tokens()?.rate).toBeLessThanOrEqual(10_000);
  });
});
