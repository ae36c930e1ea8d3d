import { afterEach, describe, expect, it } from 'vitest';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { drive } from './helpers/drive.js';
import { llmMockAndClients } from './helpers/llm-clients.js';

// Two processes on one key start together with a backlog of calls. Each reads the API's full
// bucket (a minute of tokens) and spends it in a second or two, so the tokens it saw accepted
// read as 270,000-390,000 a minute where the API announces 20,000. The first 429's cut started
// from that reading: to 70 % of it, far above the announced rate, so the ceiling alone paced each
// process, both at the whole quota, and their retries went into 429s until nine cuts later. A cut
// now starts at most from the rate the API announces. The LLM mock (real node:http on 127.0.0.1)
// and both clients share a manual clock.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("api: 'openai': two processes on one key starting together", () => {
  it('cut their token budgets below the announced rate at the first 429', async () => {
    const {
      clock,
      mock,
      client: fetchClient,
    } = await llmMockAndClients(
      { api: 'openai', limits: { tokensPerMinute: 20_000, requestsPerMinute: 200 } },
      cleanups,
    );
    const client = () => {
      const f = fetchClient();
      const cuts: number[] = [];
      (f.registry.get('llm') as AdaptiveRateLimiter).on('decreased', (e) => {
        if (e.budget === 'tokens' && e.cause === 'throttle') cuts.push(e.to);
      });
      return { f, cuts };
    };
    const clients = [client(), client()];
    const call = (f: typeof fetch) =>
      f(`${mock.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'x'.repeat(2_000) }],
          max_tokens: 500,
        }),
      }).then(
        (r) => r.status,
        (e: { code?: string }) => e.code,
      );
    const calls: Promise<unknown>[] = [];
    for (let i = 0; i < 40; i++) for (const { f } of clients) calls.push(call(f));
    await drive(clock, Promise.all(calls), 200);

    expect(mock.throttled).toBeGreaterThan(0); // the two collided
    for (const { cuts } of clients) {
      // Before: 270,000-390,000 tokens a minute (70 % of the bucket read as a rate).
      expect(cuts[0]).toBeDefined();
      expect(cuts[0]).toBeLessThanOrEqual(20_000);
    }
  });
});
