import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Agent, getGlobalDispatcher, setGlobalDispatcher, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { QuotaExhaustedError } from '../src/errors.js';
import { type RateLimitedFetch, rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { InterceptorOptions } from '../src/http/options.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { llmAgent } from './helpers/llm-agent.js';
import { type LlmMock, type LlmMockOptions, startLlmMock } from './helpers/llm-mock.js';
import { until } from './helpers/rate-limited-server.js';

// `api: 'openai'` and `api: 'anthropic'` with the vendors' own SDKs against the LLM mocks: the
// mock and the limiter share one manual clock, which the tests move while the calls run.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

async function start(options: LlmMockOptions) {
  const clock = new ManualClock();
  const mock = await startLlmMock({ clock, ...options });
  cleanups.push(() => mock.close());
  return { clock, mock };
}

function limitedFetch(mock: LlmMock, clock: ManualClock, options: Partial<InterceptorOptions> = {}) {
  const f = rateLimitedFetch({
    limiters: { llm: { origins: [mock.origin], api: mock.api } },
    rejection: 'response',
    clock,
    ...options,
  });
  cleanups.push(() => f.close());
  return f;
}

/**
 * Moves the clock in steps until every promise settles (the HTTP round trips run in real time).
 * With `ready`, a step is taken only when it holds (e.g. every call granted has reached the mock,
 * so that the mock's clock reads the time of the grant, not of a later step).
 */
async function drive<T>(
  clock: ManualClock,
  promises: Promise<T>[],
  stepMs = 100,
  ready: () => boolean = () => true,
): Promise<PromiseSettledResult<T>[]> {
  let done = false;
  const all = Promise.allSettled(promises).finally(() => {
    done = true;
  });
  await until(
    () => {
      if (!done && ready()) clock.advance(stepMs);
      return done;
    },
    'the calls to settle',
    60_000,
  );
  return all;
}

const limiterOf = (f: RateLimitedFetch) => f.registry.get('llm') as AdaptiveRateLimiter;
const user = (chars: number) => [{ role: 'user' as const, content: 'x'.repeat(chars) }];

describe("api: 'openai' with the openai SDK", () => {
  it('meters requests and tokens from the headers, spends the announced bucket, then paces: no 429', async () => {
    const { clock, mock } = await start({
      api: 'openai',
      limits: { requestsPerMinute: 600, tokensPerMinute: 600_000 },
    });
    const fetch = limitedFetch(mock, clock);
    const openai = new OpenAI({
      apiKey: 'k',
      baseURL: `${mock.origin}/v1`,
      fetch,
      maxRetries: 0,
      logger: quiet,
    });
    const call = () =>
      openai.chat.completions.create({ model: 'gpt-4o', messages: user(40), max_tokens: 50_000 });
    await drive(clock, [call()]);
    // Each call's time at the mock is the time of its grant: the clock moves on only once every
    // call granted has reached the mock (its round trip runs in real time, between the steps).
    let granted = mock.hits.length;
    limiterOf(fetch).on('acquired', () => granted++);
    // 550,000 tokens left of 600,000, less the reserve (1.5 s: 15,000): 10 calls at once, then
    // one each 5 s of refill.
    const calls = Array.from({ length: 14 }, call);
    // The burst needs no time: ten calls reach the API before the clock moves.
    await until(() => mock.hits.length === 11, 'the burst');
    const results = await drive(clock, calls, 100, () => mock.hits.length === granted);
    expect(results.every((r) => r.status === 'fulfilled')).toBe(true);
    expect(mock.throttled).toBe(0);
    expect(mock.served).toBe(15);
    const at = mock.hits.map((h) => h.at);
    expect(at.filter((t) => t === at[1])).toHaveLength(10);
    // Then one each 5 s: 50,000 tokens at 10,000 a second.
    expect(at.slice(12).map((t, i) => t - (at[11 + i] as number))).toEqual([5_000, 5_000, 5_000]);
    const snapshot = limiterOf(fetch).snapshot();
    expect(snapshot.budgets?.tokens?.announcedRate).toBe(600_000);
    expect(snapshot.budgets?.requests?.announcedRate).toBe(600);
  });

  it('meters each model with a limiter of its own, as the API limits each model', async () => {
    const { clock, mock } = await start({
      api: 'openai',
      models: { small: { tokensPerMinute: 6_000 }, large: { tokensPerMinute: 600_000 } },
    });
    const fetch = limitedFetch(mock, clock);
    const openai = new OpenAI({
      apiKey: 'k',
      baseURL: `${mock.origin}/v1`,
      fetch,
      maxRetries: 0,
      logger: quiet,
    });
    const call = (model: string) =>
      openai.chat.completions.create({ model, messages: user(40), max_tokens: 1_000 });
    await drive(clock, [call('small')]);
    await drive(clock, [call('large')]);
    const names = fetch.registry.names();
    expect(names).toHaveLength(2);
    const rates = names.map((n) => fetch.registry.get(n)?.snapshot().budgets?.tokens?.announcedRate);
    expect(rates).toEqual([6_000, 600_000]);
  });

  it('keeps a limiter per model with partitionBy: false (one organization, several keys)', async () => {
    const { clock, mock } = await start({
      api: 'openai',
      models: { small: { tokensPerMinute: 6_000 }, large: { tokensPerMinute: 600_000 } },
    });
    const fetch = limitedFetch(mock, clock, {
      limiters: { llm: { origins: [mock.origin], api: 'openai', partitionBy: false } },
    });
    const call = (apiKey: string, model: string) =>
      new OpenAI({
        apiKey,
        baseURL: `${mock.origin}/v1`,
        fetch,
        maxRetries: 0,
        logger: quiet,
      }).chat.completions.create({ model, messages: user(40), max_tokens: 1_000 });
    for (const [key, model] of [
      ['k1', 'small'],
      ['k2', 'small'],
      ['k1', 'large'],
      ['k2', 'large'],
    ] as const) {
      await drive(clock, [call(key, model)]);
    }
    // Two keys of one organization share each model's limiter; the models stay apart.
    const names = fetch.registry.names();
    expect(names).toHaveLength(2);
    const rates = names.map((n) => fetch.registry.get(n)?.snapshot().budgets?.tokens?.announcedRate);
    expect(rates).toEqual([6_000, 600_000]);
  });

  it('cuts only the token budget on a 429 of type tokens, and serves every call by retrying', async () => {
    const { clock, mock } = await start({
      api: 'openai',
      limits: { requestsPerMinute: 600, tokensPerMinute: 3_000 },
    });
    const fetch = limitedFetch(mock, clock);
    const openai = new OpenAI({
      apiKey: 'k',
      baseURL: `${mock.origin}/v1`,
      fetch,
      maxRetries: 0,
      logger: quiet,
    });
    // A cold start: 8 calls go before any answer tells the quota; 6 fit.
    const calls = Array.from({ length: 8 }, () =>
      openai.chat.completions.create({ model: 'gpt-4o', messages: user(40), max_tokens: 500 }),
    );
    const results = await drive(clock, calls, 500);
    expect(results.every((r) => r.status === 'fulfilled')).toBe(true);
    expect(mock.throttled).toBeGreaterThan(0);
    const s = limiterOf(fetch).snapshot();
    expect(s.budgets?.tokens?.throttles).toBe(mock.throttled);
    expect(s.budgets?.requests?.throttles).toBe(0);
  });

  it('ends a call refused for insufficient_quota at once: no retry, no cut, the SDK told not to retry', async () => {
    const { clock, mock } = await start({ api: 'openai' });
    mock.spendCapReached = true;
    const fetch = limitedFetch(mock, clock);
    const openai = new OpenAI({
      apiKey: 'k',
      baseURL: `${mock.origin}/v1`,
      fetch,
      maxRetries: 2,
      logger: quiet,
    });
    const error = await openai.chat.completions
      .create({ model: 'gpt-4o', messages: user(40), max_tokens: 10 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect((error as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('insufficient_quota');
    expect(mock.hits).toHaveLength(1);
    const s = limiterOf(fetch).snapshot();
    expect([s.cuts, s.budgets?.tokens?.cuts, s.pausedUntil]).toEqual([0, 0, undefined]);
  });

  it("throws QuotaExhaustedError with rejection: 'error'", async () => {
    const { clock, mock } = await start({ api: 'openai' });
    mock.spendCapReached = true;
    const fetch = limitedFetch(mock, clock, { rejection: 'error' });
    const error = await fetch(`${mock.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: user(4), max_tokens: 5 }),
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuotaExhaustedError);
    expect(error).toMatchObject({
      code: 'ERR_QUOTA_EXHAUSTED',
      reason: 'insufficient_quota',
      limiter: 'llm',
    });
    expect(mock.hits).toHaveLength(1);
  });

  it('streams through the limiter and reads the usage of the last chunk as it passes', async () => {
    const { clock, mock } = await start({ api: 'openai', completionTokens: () => 10 });
    const fetch = limitedFetch(mock, clock);
    const openai = new OpenAI({
      apiKey: 'k',
      baseURL: `${mock.origin}/v1`,
      fetch,
      maxRetries: 0,
      logger: quiet,
    });
    const used = vi.spyOn(limiterOf(fetch), 'charge');
    const stream = await openai.chat.completions.create({
      model: 'gpt-4o',
      messages: user(4_000),
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      usage = chunk.usage ?? usage;
    }
    expect(usage).toMatchObject({ prompt_tokens: 1_000, completion_tokens: 10 });
    expect(text.length).toBeGreaterThan(0);
    // The charge was the prompt's 1,000 tokens, as OpenAI's: nothing to correct.
    expect(used).not.toHaveBeenCalled();
  });
});

describe("api: 'openai' through the global dispatcher", () => {
  it("meters Node's own fetch: a body it cannot see charged the recent average, then corrected from usage", async () => {
    const { clock, mock } = await start({ api: 'openai', limits: { tokensPerMinute: 600_000 } });
    const interceptor = adaptiveRateLimit({
      limiters: { llm: { origins: [mock.origin], api: 'openai' } },
      default: false,
      rejection: 'response',
      clock,
    });
    const before = getGlobalDispatcher();
    setGlobalDispatcher(new Agent().compose(interceptor));
    cleanups.push(
      () => interceptor.close(),
      () => setGlobalDispatcher(before),
    );
    const openai = new OpenAI({ apiKey: 'k', baseURL: `${mock.origin}/v1`, maxRetries: 0, logger: quiet });
    const limiter = interceptor.registry.get('llm') as AdaptiveRateLimiter;
    const charge = vi.spyOn(limiter, 'charge');
    const call = () =>
      openai.chat.completions.create({ model: 'gpt-4o', messages: user(400), max_tokens: 10 });
    const results = await drive(clock, [call(), call(), call()]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
    expect(mock.served).toBe(3);
    // Charged 1,000 tokens each (no answer yet, no body seen), corrected to the 110 they used.
    expect(charge).toHaveBeenCalledWith({ tokens: 110 - 1_000 });
    expect(limiter.snapshot().budgets?.tokens?.announcedRate).toBe(600_000);
  });

  /** The global dispatcher through the interceptor of one `api: 'openai'` limiter, for this test. */
  function globalInterceptor(mock: LlmMock, clock: ManualClock, rejection: 'error' | 'response') {
    const interceptor = adaptiveRateLimit({
      limiters: { llm: { origins: [mock.origin], api: 'openai' } },
      default: false,
      rejection,
      clock,
    });
    const before = getGlobalDispatcher();
    const agent = new Agent().compose(interceptor);
    setGlobalDispatcher(agent);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
      () => setGlobalDispatcher(before),
    );
    return interceptor;
  }

  /** Every limiter's rate, pause and cuts (each budget's), to show that nothing changed. */
  const state = (interceptor: ReturnType<typeof adaptiveRateLimit>) =>
    interceptor.registry.names().map((name) => {
      const s = interceptor.registry.get(name)?.snapshot();
      return {
        name,
        rate: s?.rate,
        pausedUntil: s?.pausedUntil,
        cuts: s?.cuts,
        throttles: s?.throttles,
        budgets: Object.entries(s?.budgets ?? {}).map(([b, x]) => [b, x.rate, x.pausedUntil, x.cuts]),
      };
    });

  it('ends a call refused for insufficient_quota at once (body read from the held 429): the SDK told not to retry', async () => {
    const { clock, mock } = await start({ api: 'openai' });
    const interceptor = globalInterceptor(mock, clock, 'response');
    const openai = new OpenAI({ apiKey: 'k', baseURL: `${mock.origin}/v1`, maxRetries: 2, logger: quiet });
    const call = () =>
      openai.chat.completions.create({ model: 'gpt-4o', messages: user(40), max_tokens: 10 });
    await drive(clock, [call()]);
    const before = state(interceptor);
    expect(before.length).toBeGreaterThan(0);
    mock.spendCapReached = true;
    const error = await call().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect((error as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('insufficient_quota');
    expect((error as InstanceType<typeof OpenAI.RateLimitError>).headers.get('x-should-retry')).toBe('false');
    expect(mock.hits).toHaveLength(2);
    expect(mock.spendCapRefusals).toBe(1);
    expect(state(interceptor)).toEqual(before);
    expect(before.every((l) => l.cuts === 0 && l.throttles === 0 && l.pausedUntil === undefined)).toBe(true);
  });

  it("fails Node's own fetch with QuotaExhaustedError with rejection: 'error', sent once", async () => {
    const { clock, mock } = await start({ api: 'openai' });
    mock.spendCapReached = true;
    const interceptor = globalInterceptor(mock, clock, 'error');
    const error = await fetch(`${mock.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
      body: JSON.stringify({ model: 'm', messages: user(4), max_tokens: 5 }),
    }).catch((e: unknown) => e);
    expect((error as Error).cause).toBeInstanceOf(QuotaExhaustedError);
    expect((error as Error).cause).toMatchObject({
      code: 'ERR_QUOTA_EXHAUSTED',
      reason: 'insufficient_quota',
      limiter: 'llm',
    });
    expect(mock.hits).toHaveLength(1);
    for (const l of state(interceptor)) {
      expect([l.cuts, l.throttles, l.pausedUntil]).toEqual([0, 0, undefined]);
    }
  });

  it('still retries a rate-limit 429 (tokens) through the interceptor, cutting only its budget', async () => {
    const { clock, mock } = await start({
      api: 'openai',
      limits: { requestsPerMinute: 600, tokensPerMinute: 3_000 },
    });
    const interceptor = globalInterceptor(mock, clock, 'response');
    const openai = new OpenAI({ apiKey: 'k', baseURL: `${mock.origin}/v1`, maxRetries: 0, logger: quiet });
    const calls = Array.from({ length: 8 }, () =>
      openai.chat.completions.create({ model: 'gpt-4o', messages: user(40), max_tokens: 500 }),
    );
    const results = await drive(clock, calls, 500);
    expect(results.every((r) => r.status === 'fulfilled')).toBe(true);
    expect(mock.throttled).toBeGreaterThan(0);
    const [s] = interceptor.registry.names().map((n) => interceptor.registry.get(n)?.snapshot());
    expect(s?.budgets?.tokens?.throttles).toBe(mock.throttled);
    expect(s?.budgets?.requests?.throttles).toBe(0);
  });
});

describe("api: 'anthropic' with @anthropic-ai/sdk", () => {
  it('meters requests, input and output tokens; corrects the output estimate from the usage at the end of a stream', async () => {
    const { clock, mock } = await start({ api: 'anthropic', completionTokens: () => 64 });
    const fetch = limitedFetch(mock, clock);
    const anthropic = new Anthropic({
      apiKey: 'k',
      baseURL: mock.origin,
      fetch,
      maxRetries: 0,
      logger: quiet,
    });
    const charge = vi.spyOn(limiterOf(fetch), 'charge');
    const stream = anthropic.messages.stream({ model: 'claude-x', max_tokens: 1_000, messages: user(400) });
    const message = await stream.finalMessage();
    expect(message.usage.output_tokens).toBe(64);
    // Estimated 100 input tokens (400 characters) and 256 output tokens: the output corrected.
    await until(() => charge.mock.calls.length > 0, 'the correction');
    expect(charge).toHaveBeenCalledWith({ output_tokens: 64 - 256 });
    const s = limiterOf(fetch).snapshot();
    expect(Object.keys(s.budgets ?? {})).toEqual(['requests', 'input_tokens', 'output_tokens']);
    expect(s.budgets?.input_tokens?.announcedRate).toBe(40_000);
    expect(s.budgets?.output_tokens?.announcedRate).toBe(8_000);
    await drive(clock, [
      anthropic.messages.create({ model: 'claude-x', max_tokens: 1_000, messages: user(400) }),
    ]);
    // The next call's output estimate is what the last one used.
    expect(charge).toHaveBeenCalledTimes(1);
  });

  it('through the global dispatcher: a spend cap ends the call at once, no retry', async () => {
    const { clock, mock } = await start({ api: 'anthropic' });
    mock.spendCapReached = true;
    const { interceptor, agent } = llmAgent(
      { origin: mock.origin, api: 'anthropic', rejection: 'response', clock },
      cleanups,
    );
    const viaAgent = ((input: string, init?: RequestInit) =>
      undiciFetch(input, { ...(init as object), dispatcher: agent })) as unknown as typeof fetch;
    const anthropic = new Anthropic({
      apiKey: 'k',
      baseURL: mock.origin,
      fetch: viaAgent,
      maxRetries: 2,
      logger: quiet,
    });
    const error = await anthropic.messages
      .create({ model: 'claude-x', max_tokens: 10, messages: user(40) })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.RateLimitError);
    expect(mock.hits).toHaveLength(1);
    expect(interceptor.registry.get('llm')?.snapshot().cuts).toBe(0);
  });
  it("through the interceptor with rejection: 'error': a spend cap fails the call with QuotaExhaustedError", async () => {
    const { clock, mock } = await start({ api: 'anthropic' });
    mock.spendCapReached = true;
    const interceptor = adaptiveRateLimit({
      limiters: { llm: { origins: [mock.origin], api: 'anthropic' } },
      clock,
    });
    const agent = new Agent().compose(interceptor);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
    );
    const error = await undiciFetch(`${mock.origin}/v1/messages`, {
      dispatcher: agent,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: 5, messages: user(4) }),
    }).catch((e: unknown) => e);
    expect((error as Error).cause).toBeInstanceOf(QuotaExhaustedError);
    expect((error as Error).cause).toMatchObject({ reason: 'enforced_spend_limit_reached', limiter: 'llm' });
    expect(mock.hits).toHaveLength(1);
  });
});
