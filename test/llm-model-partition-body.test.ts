import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// docs/llm.md: "A limiter per model ... the calls are partitioned by their credential headers and
// the body's `model`", and "[a string or bytes body] is read as JSON whatever its `content-type`
// says": the split by model reads such a body as the estimate does.
// Model `a` is refused (429, Retry-After: 20, tokens ran out); model `b` must not stall behind it.

async function perModelApi() {
  const server = await serve({
    respond: (_req: IncomingMessage, res: ServerResponse, text: string) => {
      const model = (JSON.parse(text) as { model: string }).model;
      const json = { 'content-type': 'application/json' };
      if (model === 'a')
        res
          .writeHead(429, { ...json, 'retry-after': '20' })
          .end(JSON.stringify({ error: { type: 'tokens', code: 'rate_limit_exceeded', message: 'TPM' } }));
      else
        res.writeHead(200, json).end(JSON.stringify({ usage: { prompt_tokens: 3, completion_tokens: 5 } }));
      return true;
    },
  });
  return server;
}

const body = (model: string) =>
  JSON.stringify({ model, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });

describe("api 'openai', a JSON body sent without a JSON content-type", () => {
  it.each([
    'control: fetch wrapper (string body, JSON content-type)',
    'fetch wrapper (string body)',
    'fetch wrapper (bytes body)',
    'interceptor (bytes body)',
  ] as const)("model b's calls go while model a waits out its Retry-After: %s", async (kind) => {
    const server = await perModelApi();
    const url = `${server.origin}/v1/chat/completions`;
    const options = {
      limiters: { llm: { origins: [server.origin], api: 'openai' as const } },
      clock: new ManualClock(),
    };
    // No content-type (fetch sends a string as text/plain), but for the control.
    const headers: Record<string, string> = kind.startsWith('control')
      ? { authorization: 'Bearer k', 'content-type': 'application/json' }
      : { authorization: 'Bearer k' };
    let registry: () => RateLimiterRegistry;
    let send: (model: string, signal: AbortSignal) => Promise<number>;
    if (!kind.startsWith('interceptor')) {
      const f = rateLimitedFetch(options);
      cleanups.push(() => f.close());
      registry = () => f.registry;
      send = (model, signal) =>
        f(url, {
          method: 'POST',
          headers,
          body: kind.includes('string') ? body(model) : new TextEncoder().encode(body(model)),
          signal,
        }).then((r) => r.status);
    } else {
      const interceptor = limit(options);
      registry = () => interceptor.registry;
      const agent = agentWith(interceptor);
      send = (model, signal) =>
        get(agent, url, { method: 'POST', headers, body: Buffer.from(body(model)), signal }).then(
          (r) => r.status,
        );
    }
    const abort = new AbortController();
    cleanups.push(() => abort.abort());
    const a = send('a', abort.signal).catch(() => 'aborted');
    // a's 429 judged: its limiter's tokens budget is cut and paused for 20 s.
    await until(
      () =>
        registry()
          .names()
          .some((n) => (registry().get(n)?.snapshot().budgets?.tokens?.throttles ?? 0) > 0),
      "model a's 429 judged",
    );
    // b is another model: its own limiter, its own budgets, no pause of a's.
    let b: number | undefined;
    void send('b', abort.signal).then(
      (s) => (b = s),
      () => {},
    );
    // Stalled behind a's Retry-After on a clock that never moves, b never settles.
    await until(() => b !== undefined, "model b's answer (stalled behind model a's pause?)", 2_000);
    expect(b).toBe(200);
    expect(server.received.map((r) => r.status)).toEqual([429, 200]);
    abort.abort();
    await a;
  });
});
