import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { llmAgent } from './helpers/llm-agent.js';
import { serveLocal } from './helpers/llm-clients.js';

// `api: 'openai'`: a file uploaded (`/v1/files`, `/v1/uploads`) or a batch created
// (`/v1/batches`) runs no model: it draws a request and no tokens. Such a call's body is
// multipart (FormData) or names no prompt, and its answer carries no `usage`: charged the running
// average of the chats' cost, each kept it. A real node:http server on 127.0.0.1 announces 100,000
// tokens/min; the limiter's clock stands still, so the tokens drawn are what the calls were charged.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const QUOTA = {
  'content-type': 'application/json',
  'x-ratelimit-limit-requests': '1000',
  'x-ratelimit-remaining-requests': '999',
  'x-ratelimit-reset-requests': '60ms',
  'x-ratelimit-limit-tokens': '100000',
  'x-ratelimit-remaining-tokens': '100000',
  'x-ratelimit-reset-tokens': '0s',
};

/** A chat answers with a usage of 6,000 tokens; anything else with a file's or a batch's JSON. */
async function serve() {
  return serveLocal(async (req, res) => {
    for await (const _ of req);
    const chat = req.url === '/v1/chat/completions';
    const body = chat ? { usage: { prompt_tokens: 5_000, completion_tokens: 1_000 } } : { id: 'file-1' };
    res.writeHead(200, QUOTA).end(JSON.stringify(body));
  }, cleanups);
}

type Kind = "Node's fetch through the interceptor" | 'the fetch wrapper';

function client(kind: Kind, origin: string) {
  const clock = new ManualClock();
  if (kind === 'the fetch wrapper') {
    const f = rateLimitedFetch({ limiters: { llm: { origins: [origin], api: 'openai' } }, clock });
    cleanups.push(() => f.close());
    return { send: f, limiter: () => f.registry.get('llm') as AdaptiveRateLimiter };
  }
  const { interceptor, agent } = llmAgent({ origin, api: 'openai', rejection: 'error', clock }, cleanups);
  return {
    send: (url: string, init: RequestInit) => fetch(url, { ...init, dispatcher: agent } as RequestInit),
    limiter: () => interceptor.registry.get('llm') as AdaptiveRateLimiter,
  };
}

const tokens = (limiter: AdaptiveRateLimiter) => limiter.snapshot().budgets?.tokens?.tokens ?? Number.NaN;

describe("api: 'openai': files and batches draw no tokens", () => {
  it.each<Kind>(["Node's fetch through the interceptor", 'the fetch wrapper'])(
    'uploads and a batch after a chat: %s',
    async (kind) => {
      const origin = await serve();
      const { send, limiter } = client(kind, origin);
      // A chat whose body the limiter may not see: its usage teaches the running average.
      const chat = await send(`${origin}/v1/chat/completions`, {
        method: 'POST',
        body: new Blob([JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })]),
      });
      await chat.text();
      const before = tokens(limiter());
      for (const path of ['/v1/files', '/v1/uploads/upload-1/parts']) {
        const form = new FormData();
        form.append('purpose', 'batch');
        form.append('file', new Blob(['{"custom_id":"1"}\n']), 'batch.jsonl');
        await (await send(`${origin}${path}`, { method: 'POST', body: form })).text();
      }
      const batch = JSON.stringify({
        input_file_id: 'file-1',
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      const created = await send(`${origin}/v1/batches`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: batch,
      });
      await created.text();
      expect(tokens(limiter())).toBe(before);
    },
  );
});
