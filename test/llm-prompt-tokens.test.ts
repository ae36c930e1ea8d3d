import { afterEach, describe, expect, it } from 'vitest';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { type LlmClientKind, llmClient, serveLocal } from './helpers/llm-clients.js';
import { until } from './helpers/rate-limited-server.js';

// `api: 'openai'` and `'anthropic'`: what a call is charged before it is sent must read the whole prompt. A real
// node:http server on 127.0.0.1 announces 10,000 (input) tokens/min and holds each answer until the test
// releases it; the limiter's clock stands still, so the tokens drawn by a
// call are its estimate (its answer has no `usage` to correct it).

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const OPENAI = {
  'content-type': 'application/json',
  'x-ratelimit-limit-requests': '1000',
  'x-ratelimit-remaining-requests': '999',
  'x-ratelimit-reset-requests': '60ms',
  'x-ratelimit-limit-tokens': '10000',
  'x-ratelimit-remaining-tokens': '10000',
  'x-ratelimit-reset-tokens': '0s',
};

const ANTHROPIC = {
  'content-type': 'application/json',
  'anthropic-ratelimit-requests-limit': '1000',
  'anthropic-ratelimit-requests-remaining': '999',
  'anthropic-ratelimit-input-tokens-limit': '10000',
  'anthropic-ratelimit-input-tokens-remaining': '10000',
  'anthropic-ratelimit-output-tokens-limit': '10000',
  'anthropic-ratelimit-output-tokens-remaining': '10000',
};

type Api = 'openai' | 'anthropic';

async function serve(api: Api) {
  const quota = api === 'openai' ? OPENAI : ANTHROPIC;
  const held: (() => void)[] = [];
  let arrived = 0;
  const origin = await serveLocal(async (req, res) => {
    for await (const _ of req);
    arrived++;
    held.push(() => res.writeHead(200, quota).end('{}'));
  }, cleanups);
  const release = () => {
    for (const end of held.splice(0)) end();
  };
  return { origin, release, arrived: () => arrived };
}

const tokens = (limiter: AdaptiveRateLimiter, api: Api) =>
  limiter.snapshot().budgets?.[api === 'openai' ? 'tokens' : 'input_tokens']?.tokens ?? Number.NaN;

/** The tokens a call draws before it is sent (its answer held, the clock still). */
async function drawn(kind: LlmClientKind, path: string, body: unknown, api: Api = 'openai'): Promise<number> {
  const { origin, release, arrived } = await serve(api);
  const { limiter, post } = llmClient(kind, origin, api, cleanups);
  const call = (path: string, body: unknown) => post(path, JSON.stringify(body));
  // A first call reads the bucket the API announces.
  const first = call(path, { ...(body as object), input: 'hi', prompt: 'hi' });
  await until(() => arrived() === 1, 'the first call to arrive');
  release();
  await first;
  const before = tokens(limiter, api);
  const pending = call(path, body);
  await until(() => arrived() === 2, 'the call to arrive');
  release();
  await pending;
  return before - tokens(limiter, api);
}

describe("api: 'openai': a prompt given as tokens is charged its tokens", () => {
  // Embeddings (and legacy completions) take `input` / `prompt` as token ids: one array, or one
  // per text. Such a prompt was charged 1 token, so a batch of them went out at once into 429s.
  const ids = (n: number) => Array.from({ length: n }, (_, i) => i);

  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    'embeddings, input as arrays of token ids: %s',
    async (kind) => {
      const input = [ids(3_000), ids(2_000)];
      expect(await drawn(kind, '/v1/embeddings', { model: 'text-embedding-3-small', input })).toBe(5_000);
    },
  );

  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    'completions, prompt as one array of token ids: %s',
    async (kind) => {
      const prompt = ids(4_000);
      expect(
        await drawn(kind, '/v1/completions', { model: 'gpt-3.5-turbo-instruct', prompt, max_tokens: 10 }),
      ).toBe(4_000);
    },
  );
});

describe("api: 'openai': the Responses API's instructions are part of the prompt", () => {
  // The Responses API's system prompt is `instructions`, next to `input`: a long one was not
  // counted, so such calls were charged their `input` alone.
  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    'a call with 8,000 characters of instructions: %s',
    async (kind) => {
      const body = {
        model: 'gpt-4.1',
        instructions: 'x'.repeat(8_000),
        input: 'abcd',
        max_output_tokens: 10,
      };
      expect(await drawn(kind, '/v1/responses', body)).toBe(2_001);
    },
  );
});

describe('the tools a call declares are part of its prompt', () => {
  // Both APIs count the tool definitions as input tokens (OpenAI at admission from the request's
  // characters). They were not counted: an agent's call with 30 tools and a short message was
  // charged a few tokens, so concurrent calls went out together into 429s.
  const tools = [
    {
      name: 'search',
      description: 'x'.repeat(8_000),
      input_schema: { type: 'object', properties: { query: { type: 'string' } } },
    },
  ];
  const messages = [{ role: 'user', content: 'abcd' }];

  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    'Anthropic: tools in the input estimate: %s',
    async (kind) => {
      const body = { model: 'claude-x', max_tokens: 10, tools, messages };
      const input = await drawn(kind, '/v1/messages', body, 'anthropic');
      expect(input).toBeGreaterThanOrEqual(2_001);
      expect(input).toBeLessThan(2_100);
    },
  );

  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    'OpenAI: tools in the estimate: %s',
    async (kind) => {
      const openaiTools = tools.map(({ name, description, input_schema }) => ({
        type: 'function',
        function: { name, description, parameters: input_schema },
      }));
      const body = { model: 'gpt-4o', max_tokens: 10, tools: openaiTools, messages };
      const drawnTokens = await drawn(kind, '/v1/chat/completions', body);
      expect(drawnTokens).toBeGreaterThanOrEqual(2_001);
      expect(drawnTokens).toBeLessThan(2_100);
    },
  );
});

describe("the tool calls and their results in a call's history are part of its prompt", () => {
  // An agent sends back the model's tool calls and their results: the Responses API's
  // `function_call` (`arguments`) and `function_call_output` (`output`) items, Chat Completions'
  // assistant `tool_calls`, Anthropic's `tool_use` blocks (`input`). They were not counted: a call
  // with a file's content as a tool's output was charged a few tokens.
  const long = 'x'.repeat(8_000);

  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    "the Responses API's function call output: %s",
    async (kind) => {
      const input = [
        { role: 'user', content: 'abcd' },
        { type: 'function_call_output', call_id: 'c1', output: long },
      ];
      const drawnTokens = await drawn(kind, '/v1/responses', {
        model: 'gpt-4.1',
        input,
        max_output_tokens: 10,
      });
      expect(drawnTokens).toBeGreaterThanOrEqual(2_001);
      expect(drawnTokens).toBeLessThan(2_100);
    },
  );

  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
    "Chat Completions' tool call arguments: %s",
    async (kind) => {
      const messages = [
        { role: 'user', content: 'abcd' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'write', arguments: long } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'ok' },
      ];
      const drawnTokens = await drawn(kind, '/v1/chat/completions', {
        model: 'gpt-4o',
        messages,
        max_tokens: 10,
      });
      expect(drawnTokens).toBeGreaterThanOrEqual(2_001);
      expect(drawnTokens).toBeLessThan(2_100);
    },
  );

  it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])("Anthropic's tool_use input: %s", async (kind) => {
    const messages = [
      { role: 'user', content: 'abcd' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'write', input: { text: long } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'ok' }] },
    ];
    const input = await drawn(
      kind,
      '/v1/messages',
      { model: 'claude-x', max_tokens: 10, messages },
      'anthropic',
    );
    expect(input).toBeGreaterThanOrEqual(2_001);
    expect(input).toBeLessThan(2_100);
  });
});

describe("Anthropic's plain-text documents are part of the prompt", () => {
  // A `document` block whose source is text (`type: 'text'`, its `data`) or content blocks (`type:
  // 'content'`) carries the document's text in its source: it was not counted, so a call citing a
  // long document was charged its question alone.
  const long = 'x'.repeat(8_000);
  const sources = {
    text: { type: 'text', media_type: 'text/plain', data: long },
    content: { type: 'content', content: [{ type: 'text', text: long }] },
  };

  for (const [name, source] of Object.entries(sources)) {
    it.each<LlmClientKind>(['fetch wrapper', 'interceptor'])(
      `a document of source type ${name}: %s`,
      async (kind) => {
        const content = [
          { type: 'document', source, citations: { enabled: true } },
          { type: 'text', text: 'abcd' },
        ];
        const body = { model: 'claude-x', max_tokens: 10, messages: [{ role: 'user', content }] };
        const input = await drawn(kind, '/v1/messages', body, 'anthropic');
        expect(input).toBeGreaterThanOrEqual(2_001);
        expect(input).toBeLessThan(2_100);
      },
    );
  }
});
