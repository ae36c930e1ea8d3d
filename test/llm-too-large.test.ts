import OpenAI from 'openai';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { drive } from './helpers/drive.js';
import { type LlmMock, startLlmMock } from './helpers/llm-mock.js';

// `api: 'openai'`: OpenAI's 429 "Request too large for <model> on tokens per min (TPM): Limit
// 10000, Requested 50000" (error.type `tokens`, code `rate_limit_exceeded`) refuses a call that
// alone asks more than the whole limit: no retry can pass it. It is a refused call, as a 4xx that
// is not a throttle: no cut, no pause, its token draw given back, not retried (by the library,
// nor by the SDK: `x-should-retry: false`), and the caller gets the API's 429. The LLM mock
// (real node:http on 127.0.0.1) enforces 10,000 tokens/min; it and the limiter share one manual
// clock, moved only while a call waits.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/** What the too-large call ended with. */
interface Refusal {
  readonly status: number;
  readonly shouldRetry: string | null | undefined;
  readonly message: string;
}

type Kind =
  | "the openai SDK (maxRetries 2) through the fetch wrapper, rejection: 'response'"
  | "the fetch wrapper, rejection: 'error'"
  | "the interceptor, rejection: 'error'";

function client(kind: Kind, mock: LlmMock, clock: ManualClock) {
  const body = (maxTokens: number) =>
    JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens });
  const headers = { 'content-type': 'application/json', authorization: 'Bearer k' };
  if (kind.startsWith('the interceptor')) {
    const interceptor = adaptiveRateLimit({
      limiters: { llm: { origins: [mock.origin], api: 'openai' } },
      default: false,
      rejection: 'error',
      clock,
    });
    const agent = new Agent().compose(interceptor);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
    );
    const limiter = () => interceptor.registry.get('llm') as AdaptiveRateLimiter;
    const call = async (maxTokens: number): Promise<Refusal> => {
      const answer = await agent.request({
        origin: mock.origin,
        path: '/v1/chat/completions',
        method: 'POST',
        headers,
        body: body(maxTokens),
      });
      const text = await answer.body.text();
      const said = answer.headers['x-should-retry'];
      return { status: answer.statusCode, shouldRetry: Array.isArray(said) ? said[0] : said, message: text };
    };
    return { limiter, call };
  }
  const sdk = kind.startsWith('the openai SDK');
  const fetch = rateLimitedFetch({
    limiters: { llm: { origins: [mock.origin], api: 'openai' } },
    rejection: sdk ? 'response' : 'error',
    clock,
  });
  cleanups.push(() => fetch.close());
  const limiter = () => fetch.registry.get('llm') as AdaptiveRateLimiter;
  if (!sdk) {
    const call = async (maxTokens: number): Promise<Refusal> => {
      const answer = await fetch(`${mock.origin}/v1/chat/completions`, {
        method: 'POST',
        headers,
        body: body(maxTokens),
      });
      return {
        status: answer.status,
        shouldRetry: answer.headers.get('x-should-retry'),
        message: await answer.text(),
      };
    };
    return { limiter, call };
  }
  const openai = new OpenAI({
    apiKey: 'k',
    baseURL: `${mock.origin}/v1`,
    fetch,
    maxRetries: 2,
    logger: quiet,
  });
  const call = async (maxTokens: number): Promise<Refusal> => {
    try {
      await openai.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: maxTokens,
      });
      return { status: 200, shouldRetry: undefined, message: '' };
    } catch (error) {
      if (!(error instanceof OpenAI.APIError)) throw error;
      return {
        status: error.status ?? 0,
        shouldRetry: error.headers?.get('x-should-retry'),
        message: error.message,
      };
    }
  };
  return { limiter, call };
}

describe("api: 'openai': a 429 'Request too large' (a call above the whole tokens per minute) is a refused call", () => {
  it.each<Kind>([
    "the openai SDK (maxRetries 2) through the fetch wrapper, rejection: 'response'",
    "the fetch wrapper, rejection: 'error'",
    "the interceptor, rejection: 'error'",
  ])('no cut, no pause, its tokens given back, sent once, the API 429 to the caller: %s', async (kind) => {
    const clock = new ManualClock();
    const mock = await startLlmMock({ api: 'openai', limits: { tokensPerMinute: 10_000 }, clock });
    cleanups.push(() => mock.close());
    const { limiter, call } = client(kind, mock, clock);

    expect((await drive(clock, call(50))).status).toBe(200);
    const tokens = () => limiter().snapshot().budgets?.tokens;
    const rate = tokens()?.rate;
    expect(tokens()?.announcedRate).toBe(10_000);

    const refused = await drive(clock, call(50_000), 1_000);
    // Not a throttle: no cut, no pause; its 50,000 tokens given back (no debt of 40,000 left).
    expect([tokens()?.cuts, tokens()?.pausedUntil, tokens()?.rate]).toEqual([0, undefined, rate]);
    expect(tokens()?.tokens).toBeGreaterThan(0);
    // Sent once: neither the limiter nor the SDK sent it again (no retry can pass it).
    expect(mock.hits.filter((h) => h.status === 429)).toHaveLength(1);
    expect(refused.status).toBe(429);
    expect(refused.message).toContain('Request too large');
    expect(refused.shouldRetry).toBe('false');

    // The calls after it go at the rate they had (the old code cut it and kept it cut).
    for (let i = 0; i < 2; i++) expect((await drive(clock, call(50))).status).toBe(200);
    expect([tokens()?.cuts, tokens()?.rate]).toEqual([0, rate]);
    expect(mock.throttled).toBe(1);
  });
});
