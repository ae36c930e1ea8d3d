import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { oneRoomFetch } from './helpers/one-room.js';
import { until } from './helpers/rate-limited-server.js';

// Attacks on partitions and LLM budgets: real node:http servers on 127.0.0.1, Node's fetch through
// the fetch wrapper, limiters on a ManualClock that moves only when told.

const json = { 'content-type': 'application/json' };
const TPM_429 = {
  error: {
    type: 'tokens',
    code: 'rate_limit_exceeded',
    message: 'Rate limit reached on tokens per min (TPM)',
  },
};

/** An OpenAI-like API: key `paused` gets a TPM 429 with `Retry-After: 60`, every other key a 200. */
async function openaiLike(paused: string) {
  return serve({
    respond: (req: IncomingMessage, res: ServerResponse) => {
      if (req.headers.authorization === `Bearer ${paused}`)
        res.writeHead(429, { ...json, 'retry-after': '60' }).end(JSON.stringify(TPM_429));
      else
        res.writeHead(200, json).end(JSON.stringify({ usage: { prompt_tokens: 3, completion_tokens: 2 } }));
      return true;
    },
  });
}

const chat = JSON.stringify({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });

describe("LLM partitions: a tokens budget's pause and the registry's bounds", () => {
  it('a partition paused on its tokens budget (TPM 429, Retry-After: 60) is not dropped as idle to make room: its next call still waits', async () => {
    // docs/partitions.md, Bounds: "a paused one gives way to a pause record (maxPausedOrigins),
    // and its next limiter starts with that pause". A TPM 429 pauses only the tokens budget.
    const server = await openaiLike('key-b');
    const { clock, registry, fetch } = oneRoomFetch(server.origin, { api: 'openai', maxWait: 1_000 });
    const send = (key: string) =>
      fetch(`${server.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, authorization: `Bearer ${key}` },
        body: chat,
      }).then(async (r) => {
        await r.text();
        return r.status;
      });

    expect(await send('key-a')).toBe(200); // claims the named limiter itself
    // B's 429: its Retry-After (60 s) is past maxWait (1 s): the caller gets the 429.
    expect(await send('key-b')).toBe(429);
    const bKey = registry.names().find((n) => n.startsWith('openai#')) as string;
    expect(registry.get(bKey)?.snapshot().budgets?.tokens?.pausedUntil).toBeGreaterThan(clock.now());

    // C's first call needs room: B's limiter holds nothing but its pause.
    expect(await send('key-c')).toBe(200);

    // B again, at once: its tokens are paused for 60 s, past maxWait: refused, never sent.
    const before = server.received.length;
    const again = await send('key-b').catch((e: unknown) => e);
    expect(server.received.length).toBe(before);
    expect(again).toBeInstanceOf(RateLimitRejectedError);
  });
});

describe('LLM tokens given back for a call undici refused before sending it', () => {
  it.each([
    ['expect: 100-continue (UND_ERR_NOT_SUPPORTED)', { expect: '100-continue' }],
    ['transfer-encoding: chunked (UND_ERR_INVALID_ARG)', { 'transfer-encoding': 'chunked' }],
  ])('a call with %s never reaches the API: its 5,000-token estimate is given back', async (_what, bad) => {
    // docs/llm.md: "A call that never reached the API gives back its tokens too ... Its request stays charged."
    const server = await serve({
      respond: (_req: IncomingMessage, res: ServerResponse) => {
        res
          .writeHead(200, {
            ...json,
            'x-ratelimit-limit-requests': '1000',
            'x-ratelimit-remaining-requests': '999',
            'x-ratelimit-reset-requests': '60ms',
            'x-ratelimit-limit-tokens': '100000',
            'x-ratelimit-remaining-tokens': '90000',
            'x-ratelimit-reset-tokens': '6s',
          })
          .end(JSON.stringify({ usage: { prompt_tokens: 3, completion_tokens: 2 } }));
        return true;
      },
    });
    const clock = new ManualClock();
    const interceptor = limit({ limiters: { openai: { origins: [server.origin], api: 'openai' } }, clock });
    const agent = agentWith(interceptor);
    const body = JSON.stringify({
      model: 'm',
      max_tokens: 5_000,
      messages: [{ role: 'user', content: 'hi' }],
    });
    const post = (headers: Record<string, string>) =>
      get(agent, `${server.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, authorization: 'Bearer key-a', ...headers },
        body,
      });

    expect((await post({})).status).toBe(200);
    const tokens = () => interceptor.registry.get('openai')?.snapshot().budgets?.tokens?.tokens;
    const before = tokens();
    const error = await post(bad).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect(server.received.length).toBe(1); // never sent
    expect(tokens()).toBe(before);
  });
});

describe("the registry's events of a partition's limiter", () => {
  it("remove(name) of a partition's limiter tells 'removed' with its partition id, as 'added' did", async () => {
    // docs/partitions.md: "The registry's `added` and `removed` events carry `partition`, the short id,
    // for a partition's limiter".
    const server = await serve();
    const fetch = rateLimitedFetch({ clock: new ManualClock() });
    cleanups.push(() => fetch.close());
    const added: { name: string; partition?: string }[] = [];
    const removed: { name: string; partition?: string }[] = [];
    fetch.registry.on('added', ({ name, partition }) => added.push({ name, partition }));
    fetch.registry.on('removed', ({ name, partition }) => removed.push({ name, partition }));
    for (const key of ['a', 'b']) {
      const r = await fetch(`${server.origin}/x`, { headers: { authorization: `Bearer ${key}` } });
      await r.text();
    }
    const made = added.find((e) => e.partition !== undefined);
    expect(made).toBeDefined();
    const { name, partition } = made as { name: string; partition: string };

    expect(fetch.registry.remove(name)).toBe(true);
    expect(removed).toEqual([{ name, partition }]);
  });
});

describe("a named limiter's partitions with no room left", () => {
  it("customer C, whose partition finds no room, is not stalled by customer A's Retry-After: 600 on the named limiter", async () => {
    // docs/partitions.md: "one customer's exhausted token does not stall the others"; for an origin,
    // "an origin's own limiter stays the partition's that had it, so another credential never
    // inherits its pause" (the overflow limiter takes the others). A named limiter's own limiter is
    // the first credential's (A's): sharing it with C when there is no room hands C A's pause.
    const held: ServerResponse[] = [];
    const server = await serve({
      respond: (req: IncomingMessage, res: ServerResponse) => {
        if (req.headers.authorization === 'Bearer a') res.writeHead(429, { 'retry-after': '600' }).end('no');
        else if (req.headers.authorization === 'Bearer b') held.push(res);
        else res.writeHead(200).end('ok');
        return true;
      },
    });
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({
      limiters: { saas: { origins: [server.origin], maxWait: 1_000 } },
      maxOriginLimiters: 1,
      clock,
    });
    cleanups.push(() => registry.close());
    const fetch = rateLimitedFetch({ registry, maxAttempts: 1 });
    cleanups.push(() => fetch.close());
    const send = (key: string) =>
      fetch(`${server.origin}/x`, { headers: { authorization: `Bearer ${key}` } }).then(async (r) => {
        await r.text();
        return r.status;
      });

    expect(await send('a')).toBe(429); // A claims the named limiter, and pauses it for 600 s
    expect(registry.get('saas')?.snapshot().pausedUntil).toBeGreaterThan(clock.now());
    const b = send('b').catch((e: unknown) => e); // B's own limiter, in flight: the pool's one room
    cleanups.push(async () => {
      for (const res of held) res.end();
      await b;
    });
    await until(() => held.length === 1, "B's call at the server");

    // C: a new credential, no room. Its token has budget: it must be answered.
    expect(await send('c').catch((e: unknown) => e)).toBe(200);
  });
});
