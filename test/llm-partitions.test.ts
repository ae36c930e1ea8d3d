import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { QuotaExhaustedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// With `api`, a limiter is partitioned by credential (and model): customer A's 429 (a rate limit
// with Retry-After: 20, or a spend cap) must not stall customer B's calls to the same model, through
// the fetch wrapper and the interceptor alike. Real node:http server, real undici agents; the
// limiters run on a manual clock that never moves, so A's retry stays waiting.

const API = {
  openai: {
    path: '/v1/chat/completions',
    credential: (key: string) => ({ authorization: `Bearer ${key}` }),
    rate: {
      error: {
        type: 'tokens',
        code: 'rate_limit_exceeded',
        message: 'Rate limit reached on tokens per min (TPM)',
      },
    },
    cap: { error: { type: 'insufficient_quota', code: 'insufficient_quota', message: 'quota exceeded' } },
    ok: { usage: { prompt_tokens: 3, completion_tokens: 5 } },
  },
  anthropic: {
    path: '/v1/messages',
    credential: (key: string) => ({ 'x-api-key': key }),
    rate: { type: 'error', error: { type: 'rate_limit_error', message: 'input tokens per minute' } },
    cap: {
      type: 'error',
      error: {
        type: 'rate_limit_error',
        message: 'spend',
        details: { error_code: 'enforced_spend_limit_reached' },
      },
    },
    ok: { usage: { input_tokens: 3, output_tokens: 5 } },
  },
} as const;

type Api = keyof typeof API;
type Refusal = 'rate' | 'cap';

/** An LLM API whose key A is refused (a rate limit with Retry-After: 20, or a spend cap); B's is not. */
async function perKeyApi(api: Api, refusal: Refusal) {
  const spec = API[api];
  const server = await serve({
    respond: (req: IncomingMessage, res: ServerResponse) => {
      const key = `${req.headers.authorization ?? ''}${req.headers['x-api-key'] ?? ''}`;
      const json = { 'content-type': 'application/json' };
      if (!key.includes('key-a')) res.writeHead(200, json).end(JSON.stringify(spec.ok));
      else if (refusal === 'rate')
        res.writeHead(429, { ...json, 'retry-after': '20' }).end(JSON.stringify(spec.rate));
      else res.writeHead(429, json).end(JSON.stringify(spec.cap));
      return true;
    },
  });
  return { server, url: `${server.origin}${spec.path}` };
}

/** Whether a limiter of the registry has seen a throttle, in any of its budgets. */
function throttled(registry: RateLimiterRegistry): boolean {
  return registry.names().some((name) => {
    const budgets = registry.get(name)?.snapshot().budgets ?? {};
    return Object.values(budgets).some((b) => b.throttles > 0);
  });
}

const body = JSON.stringify({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });

type Adapter = 'fetch wrapper' | 'interceptor';

/** The adapter under test, its registry, and a POST of `body` with a key's credential. */
function client(adapter: Adapter, api: Api, origin: string, url: string) {
  const options = { limiters: { llm: { origins: [origin], api } }, clock: new ManualClock() };
  const headers = (key: string) => ({ 'content-type': 'application/json', ...API[api].credential(key) });
  if (adapter === 'fetch wrapper') {
    const fetch = rateLimitedFetch(options);
    cleanups.push(() => fetch.close());
    const send = (key: string, signal?: AbortSignal) =>
      fetch(url, { method: 'POST', headers: headers(key), body, signal }).then((r) => r.status);
    return { registry: fetch.registry, send };
  }
  const interceptor = limit(options);
  const agent = agentWith(interceptor);
  const send = (key: string, signal?: AbortSignal) =>
    get(agent, url, { method: 'POST', headers: headers(key), body, signal }).then((r) => r.status);
  return { registry: interceptor.registry, send };
}

describe.each(['openai', 'anthropic'] as const)("api: '%s', partitioned by key", (api) => {
  it.each([
    ['fetch wrapper', 'rate'],
    ['fetch wrapper', 'cap'],
    ['interceptor', 'rate'],
    ['interceptor', 'cap'],
  ] as const)("the %s answers B while A's key is refused (%s)", async (adapter, refusal) => {
    const { server, url } = await perKeyApi(api, refusal);
    const { registry, send } = client(adapter, api, server.origin, url);
    const abort = new AbortController();
    let settledA: unknown;
    const a = send('key-a', abort.signal).then(
      (status) => (settledA = status),
      (e: unknown) => (settledA = e),
    );
    cleanups.push(async () => {
      abort.abort();
      await a;
    });
    // A's 429 read by its limiter: a rate limit paused it, a cap ended the call.
    await until(() => (refusal === 'rate' ? throttled(registry) : settledA !== undefined), "A's 429");

    expect(await Promise.all([1, 2, 3].map(() => send('key-b')))).toEqual([200, 200, 200]);
    // A was sent once: a rate limit waits for its Retry-After on the clock, a cap ended at once.
    expect(server.received.map((r) => r.status)).toEqual([429, 200, 200, 200]);
    if (refusal === 'rate') expect(settledA).toBeUndefined();
    else expect(settledA).toBeInstanceOf(QuotaExhaustedError);
  });
});
