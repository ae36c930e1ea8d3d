import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { goDuration, type LlmMock, type LlmMockOptions, rfc3339, startLlmMock } from './helpers/llm-mock.js';
import { until } from './helpers/rate-limited-server.js';

// The LLM mocks the bench and the tests of the `api` presets run against: real node:http servers
// on a manual clock, called with Node's fetch and with the vendors' own SDKs.

const mocks: LlmMock[] = [];
afterEach(async () => {
  await Promise.all(mocks.splice(0).map((m) => m.close()));
});

async function start(options: LlmMockOptions) {
  const clock = new ManualClock();
  const mock = await startLlmMock({ clock, epochMs: Date.UTC(2026, 0, 1), ...options });
  mocks.push(mock);
  return { clock, mock };
}

function post(mock: LlmMock, body: unknown) {
  const path = mock.api === 'openai' ? '/v1/chat/completions' : '/v1/messages';
  return fetch(`${mock.origin}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

const prompt = (chars: number) => [{ role: 'user', content: 'x'.repeat(chars) }];
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

describe('goDuration and rfc3339', () => {
  it.each([
    [0, '0s'],
    [120, '120ms'],
    [1500, '1.5s'],
    [7660, '7.66s'],
    [60_000, '1m0s'],
    [360_000, '6m0s'],
    [90_500, '1m30.5s'],
    [3_600_000, '1h0m0s'],
  ])('writes %d ms as Go does: %s', (ms, text) => {
    expect(goDuration(ms)).toBe(text);
  });

  it('writes a time in whole seconds, rounded up', () => {
    expect(rfc3339(Date.UTC(2026, 0, 1, 0, 0, 1, 200))).toBe('2026-01-01T00:00:02Z');
  });
});

describe('the OpenAI mock', () => {
  it('charges the larger of max_tokens and characters/4 at admission, with its headers', async () => {
    const { mock } = await start({ api: 'openai', limits: { requestsPerMinute: 60, tokensPerMinute: 1000 } });
    const a = await post(mock, { model: 'gpt-4o', messages: prompt(400), max_tokens: 300 });
    expect(a.status).toBe(200);
    expect(a.headers.get('x-ratelimit-remaining-tokens')).toBe('700');
    expect(a.headers.get('x-ratelimit-remaining-requests')).toBe('59');
    expect(a.headers.get('x-ratelimit-limit-tokens')).toBe('1000');
    // 300 tokens at 1000/min take 18 s to come back; a request 1 s.
    expect(a.headers.get('x-ratelimit-reset-tokens')).toBe('18s');
    expect(a.headers.get('x-ratelimit-reset-requests')).toBe('1s');
    const b = await post(mock, { model: 'gpt-4o', messages: prompt(2000), max_tokens: 10 });
    expect(b.headers.get('x-ratelimit-remaining-tokens')).toBe('200');
    const answer = (await b.json()) as { usage: Record<string, number> };
    expect(answer.usage).toEqual({ prompt_tokens: 500, completion_tokens: 10, total_tokens: 510 });
    expect(mock.hits.map((h) => h.charged)).toEqual([300, 500]);
  });

  it('refuses with a 429 of type tokens when the token bucket runs out, counts it, and refills', async () => {
    const { clock, mock } = await start({
      api: 'openai',
      limits: { requestsPerMinute: 60, tokensPerMinute: 600 },
    });
    expect((await post(mock, { model: 'm', messages: prompt(4), max_tokens: 500 })).status).toBe(200);
    const refused = await post(mock, { model: 'm', messages: prompt(4), max_tokens: 200 });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBeNull();
    expect(refused.headers.get('x-ratelimit-remaining-tokens')).toBe('100');
    // The failed request took one from the request budget too.
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('58');
    const body = (await refused.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error).toMatchObject({ type: 'tokens', code: 'rate_limit_exceeded' });
    expect(body.error.message).toContain('Please try again in 10s');
    expect(mock.throttled).toBe(1);
    clock.advance(10_000);
    expect((await post(mock, { model: 'm', messages: prompt(4), max_tokens: 200 })).status).toBe(200);
    expect(mock.served).toBe(2);
  });

  it('keeps buckets per model and refuses on requests with a 429 of type requests', async () => {
    const { mock } = await start({
      api: 'openai',
      limits: { requestsPerMinute: 1 },
      models: { big: { requestsPerMinute: 2 } },
    });
    expect((await post(mock, { model: 'small', messages: prompt(4), max_tokens: 1 })).status).toBe(200);
    const refused = await post(mock, { model: 'small', messages: prompt(4), max_tokens: 1 });
    expect(((await refused.json()) as { error: { type: string } }).error.type).toBe('requests');
    expect((await post(mock, { model: 'big', messages: prompt(4), max_tokens: 1 })).status).toBe(200);
    expect((await post(mock, { model: 'big', messages: prompt(4), max_tokens: 1 })).status).toBe(200);
  });

  it('answers insufficient_quota once the spend cap is reached, charging nothing', async () => {
    const { mock } = await start({ api: 'openai' });
    mock.spendCapReached = true;
    const res = await post(mock, { model: 'm', messages: prompt(4), max_tokens: 10 });
    expect(res.status).toBe(429);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe('insufficient_quota');
    expect(mock.spendCapRefusals).toBe(1);
    expect(mock.level('m').tokens).toBe(40_000);
  });

  it('streams chunks on the clock and puts usage in the last chunk when asked, through the openai SDK', async () => {
    const { clock, mock } = await start({
      api: 'openai',
      firstTokenMs: 100,
      perTokenMs: 10,
      tokensPerChunk: 4,
      completionTokens: () => 10,
    });
    const client = new OpenAI({ apiKey: 'test', baseURL: `${mock.origin}/v1`, maxRetries: 0, logger: quiet });
    const stream = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'x'.repeat(40) }],
      max_tokens: 50,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    const read = (async () => {
      for await (const chunk of stream) chunks.push(chunk);
    })();
    await until(() => clock.pendingTimers > 0, 'the first token to be scheduled');
    expect(chunks).toHaveLength(0);
    clock.advance(100);
    await until(() => chunks.length === 1, 'the first chunk');
    clock.advance(1_000);
    await read;
    expect(chunks.map((c) => c.choices[0]?.delta.content?.length ?? 0).slice(0, 3)).toEqual([20, 20, 10]);
    expect(chunks.at(-1)?.choices).toEqual([]);
    expect(chunks.at(-1)?.usage).toEqual({ prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 });
    expect(chunks.slice(0, -1).every((c) => c.usage === undefined)).toBe(true);
  });

  it('sends no usage in a stream that did not ask for it', async () => {
    const { mock } = await start({ api: 'openai' });
    const res = await post(mock, { model: 'm', messages: prompt(4), max_tokens: 5, stream: true });
    const text = await res.text();
    expect(text).not.toContain('usage');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('is read by the openai SDK: a rate-limit 429 is a RateLimitError with the headers', async () => {
    const { mock } = await start({ api: 'openai', limits: { tokensPerMinute: 100 } });
    const client = new OpenAI({ apiKey: 'test', baseURL: `${mock.origin}/v1`, maxRetries: 0, logger: quiet });
    const done = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 90,
    });
    expect(done.usage?.completion_tokens).toBe(64);
    const error = await client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 90 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(
      (error as InstanceType<typeof OpenAI.RateLimitError>).headers.get('x-ratelimit-remaining-tokens'),
    ).toBe('10');
  });
});

describe('the Anthropic mock', () => {
  const limits = { requestsPerMinute: 50, inputTokensPerMinute: 6000, outputTokensPerMinute: 1200 };

  it('charges input at admission and output as generated, with headers in thousands and RFC 3339 resets', async () => {
    const { clock, mock } = await start({
      api: 'anthropic',
      limits,
      perTokenMs: 10,
      tokensPerChunk: 100,
      completionTokens: () => 300,
    });
    const pending = post(mock, {
      model: 'claude',
      max_tokens: 1000,
      system: 'x'.repeat(400),
      messages: prompt(7600),
    });
    await until(() => mock.hits.length === 1, 'the request');
    expect(mock.level('claude').input_tokens).toBe(4000);
    expect(mock.level('claude').output_tokens).toBe(1100);
    // The first chunk at once, the two others 1 s apart (100 tokens of 10 ms each).
    clock.advance(1000);
    expect(mock.level('claude').output_tokens).toBeCloseTo(1020);
    clock.advance(1000);
    const res = await pending;
    // 2 s in: input 4000 + 200; output 1200 - 300 + 40.
    expect(mock.level('claude').output_tokens).toBeCloseTo(940);
    expect(mock.level('claude').input_tokens).toBeCloseTo(4200);
    expect(res.headers.get('anthropic-ratelimit-input-tokens-remaining')).toBe('4000');
    expect(res.headers.get('anthropic-ratelimit-input-tokens-limit')).toBe('6000');
    expect(res.headers.get('anthropic-ratelimit-output-tokens-remaining')).toBe('1000');
    expect(res.headers.get('anthropic-ratelimit-requests-remaining')).toBe('49');
    // Input: 2000 tokens at 6000/min are back in 20 s.
    expect(res.headers.get('anthropic-ratelimit-input-tokens-reset')).toBe('2026-01-01T00:00:20Z');
    expect(res.headers.get('anthropic-ratelimit-requests-reset')).toBe('2026-01-01T00:00:02Z');
    const answer = (await res.json()) as { usage: Record<string, number>; stop_reason: string };
    expect(answer.usage).toMatchObject({ input_tokens: 2000, output_tokens: 300 });
    expect(answer.stop_reason).toBe('end_turn');
  });

  it('refuses when the output bucket is spent, with retry-after, and never charges max_tokens', async () => {
    const { mock } = await start({ api: 'anthropic', limits, completionTokens: () => 1200 });
    expect((await post(mock, { model: 'c', max_tokens: 100_000, messages: prompt(4) })).status).toBe(200);
    const refused = await post(mock, { model: 'c', max_tokens: 10, messages: prompt(4) });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.headers.get('anthropic-ratelimit-tokens-remaining')).toBe('0');
    const body = (await refused.json()) as { type: string; error: { type: string; message: string } };
    expect(body.error.type).toBe('rate_limit_error');
    expect(body.error.message).toContain('output tokens');
    expect(mock.hits.at(-1)?.refusedBy).toBe('output_tokens');
    expect(mock.level('c').requests).toBe(49);
  });

  it('answers a spend-cap 429 without retry-after', async () => {
    const { mock } = await start({ api: 'anthropic' });
    mock.spendCapReached = true;
    const res = await post(mock, { model: 'c', max_tokens: 10, messages: prompt(4) });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBeNull();
    const body = (await res.json()) as { error: { type: string; details: { error_code: string } } };
    expect(body.error).toMatchObject({
      type: 'rate_limit_error',
      details: { error_code: 'enforced_spend_limit_reached' },
    });
  });

  it('streams the events the Anthropic SDK reads, usage in message_start and message_delta', async () => {
    const { mock } = await start({ api: 'anthropic', completionTokens: () => 40, tokensPerChunk: 16 });
    const client = new Anthropic({ apiKey: 'test', baseURL: mock.origin, maxRetries: 0, logger: quiet });
    const stream = client.messages.stream({
      model: 'c',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'x'.repeat(80) }],
    });
    const events: string[] = [];
    stream.on('streamEvent', (event) => events.push(event.type));
    const message = await stream.finalMessage();
    expect(events).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(message.usage).toMatchObject({ input_tokens: 20, output_tokens: 40 });
    expect(message.content[0]).toMatchObject({ type: 'text' });
  });

  it('is read by the Anthropic SDK: a 429 is a RateLimitError; a missing max_tokens a 400', async () => {
    const { mock } = await start({ api: 'anthropic', limits: { requestsPerMinute: 1 } });
    const client = new Anthropic({ apiKey: 'test', baseURL: mock.origin, maxRetries: 0, logger: quiet });
    const ok = await client.messages.create({
      model: 'c',
      max_tokens: 10,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(ok.usage.output_tokens).toBe(10);
    const error = await client.messages
      .create({ model: 'c', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.RateLimitError);
    const bad = await post(mock, { model: 'c', messages: prompt(4) });
    expect(bad.status).toBe(400);
  });
});
