import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ManualClock } from '../../src/clock.js';
import { rateLimitedFetch } from '../../src/http/fetch.js';
import type { RateLimiterRegistry } from '../../src/registry/index.js';
import { llmAgent } from './llm-agent.js';
import { type LlmClientKind, serveLocal } from './llm-clients.js';

/**
 * An OpenAI-like API on 127.0.0.1 whose first answer is a 429 with the JSON `refusal` and
 * `headers` (no Retry-After unless given), and every later one a 200 with usage: its origin and
 * the attempts it got. Closed by the test's `cleanups`.
 */
export async function refusingOnce(
  refusal: unknown,
  cleanups: (() => unknown)[],
  headers: Record<string, string> = {},
) {
  const server = { attempts: 0 };
  const origin = await serveLocal((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    server.attempts++;
    const json = { 'content-type': 'application/json' };
    if (server.attempts === 1) res.writeHead(429, { ...json, ...headers }).end(JSON.stringify(refusal));
    else res.writeHead(200, json).end('{"usage":{"prompt_tokens":3,"completion_tokens":2}}');
  }, cleanups);
  return { origin, server };
}

/** A chat completion's body. */
export const CHAT_BODY = JSON.stringify({
  model: 'gpt-4o-mini',
  max_tokens: 10,
  messages: [{ role: 'user', content: 'hi' }],
});

/**
 * The adapter `kind` metering `origin` as `api: 'openai'` (`rejection: 'error'`) on `clock`: its
 * registry, `post()` (a chat completion; its status) and `told` (each answer's `x-should-retry`).
 * Closed by the test's `cleanups`.
 */
export function openaiClient(
  kind: LlmClientKind,
  origin: string,
  clock: ManualClock,
  cleanups: (() => unknown)[],
) {
  const told: (string | null)[] = [];
  if (kind === 'fetch wrapper') {
    const fetch = rateLimitedFetch({
      limiters: { llm: { origins: [origin], api: 'openai' } },
      rejection: 'error',
      clock,
    });
    cleanups.push(() => fetch.close());
    const post = async () => {
      const res = await fetch(`${origin}/v1/chat/completions`, { method: 'POST', body: CHAT_BODY });
      await res.text();
      told.push(res.headers.get('x-should-retry'));
      return res.status;
    };
    return { registry: fetch.registry, post, told };
  }
  const { interceptor, agent } = llmAgent({ origin, api: 'openai', rejection: 'error', clock }, cleanups);
  const post = async () => {
    const res = await agent.request({
      origin,
      path: '/v1/chat/completions',
      method: 'POST',
      body: CHAT_BODY,
    });
    await res.body.text();
    const retry = res.headers['x-should-retry'];
    told.push(typeof retry === 'string' ? retry : null);
    return res.statusCode;
  };
  return { registry: interceptor.registry, post, told };
}

/** Each budget's cuts and the end of its pause (on the manual clock), of the limiter `llm`. */
export function budgetsOf(registry: RateLimiterRegistry) {
  const all = registry.get('llm')?.snapshot().budgets ?? {};
  return Object.fromEntries(Object.entries(all).map(([name, b]) => [name, [b.cuts, b.pausedUntil]]));
}
