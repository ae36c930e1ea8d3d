import { afterEach, describe, expect, it } from 'vitest';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { drive } from './helpers/drive.js';
import { llmMockAndClients } from './helpers/llm-clients.js';

// Azure OpenAI announces `x-ratelimit-remaining-{requests,tokens}` and never its limits. A token
// budget whose first 429 came after one small call (another process drained the minute) was cut
// from the few tokens this process had sent: to 180 tokens a minute, and the next call of 1,000
// tokens was refused at `maxWait` for minutes. A refilling bucket's `remaining` is a lower bound
// of its limit: the highest read in the last minute is the budget's announced rate, and the cut
// starts from it. The mock (real node:http on 127.0.0.1) and both clients share a manual clock.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("api: 'openai' against Azure OpenAI's headers (remaining without limit)", () => {
  it('cuts a fresh token budget from the highest remaining read, and the next call is not refused', async () => {
    const { clock, mock, client } = await llmMockAndClients(
      { api: 'openai', azure: true, limits: { tokensPerMinute: 10_000 } },
      cleanups,
    );
    const call = (f: typeof fetch, chars: number) =>
      f(`${mock.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'api-key': 'k' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'x'.repeat(chars) }],
          max_tokens: 1,
        }),
      });
    const ours = client();
    const other = client();
    const tokens = () => (ours.registry.get('llm') as AdaptiveRateLimiter).snapshot().budgets?.tokens;

    expect((await call(ours, 4)).status).toBe(200);
    clock.advance(500);
    // The other process takes 9,000 of the 10,000 tokens.
    expect((await call(other, 36_000)).status).toBe(200);
    // 4,000 tokens: a 429 for the tokens (Azure's retry-after-ms), then served on its retry.
    const answer = await drive(clock, call(ours, 16_000));
    expect(mock.hits.map((h) => [h.status, h.refusedBy])).toEqual([
      [200, undefined],
      [200, undefined],
      [429, 'tokens'],
      [200, undefined],
    ]);
    expect(answer.status).toBe(200);
    expect(tokens()?.cuts).toBe(1);
    // The highest remaining read was 9,999 (after the first call): the cut starts there.
    expect(tokens()?.rate).toBeGreaterThanOrEqual(6_000);
    expect(tokens()?.rate).toBeLessThanOrEqual(10_000);
    // The next 4,000-token call waits for its tokens and is sent; it was refused at once.
    const next = await drive(clock, call(ours, 16_000));
    expect(next.status).toBe(200);
    expect(mock.hits.at(-1)?.status).toBe(200);
  });
});
