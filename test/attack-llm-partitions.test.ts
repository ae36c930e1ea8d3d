import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { cleanups, serve } from './helpers/interceptor-fixtures.js';
import { oneRoomFetch } from './helpers/one-room.js';
import { failOnUnhandledRejections } from './helpers/unhandled.js';

// Attacks on an LLM API's two units (requests and tokens) and the per-customer partitions: real
// node:http servers on 127.0.0.1, Node's fetch through the fetch wrapper, limiters on a
// ManualClock that moves only when told.

failOnUnhandledRejections();

const json = { 'content-type': 'application/json' };
/** OpenAI's quota headers: 10,000 tokens a minute, 9,000 left. */
const quota = {
  'x-ratelimit-limit-requests': '1000',
  'x-ratelimit-remaining-requests': '999',
  'x-ratelimit-reset-requests': '60ms',
  'x-ratelimit-limit-tokens': '10000',
  'x-ratelimit-remaining-tokens': '9000',
  'x-ratelimit-reset-tokens': '6s',
};

/** An OpenAI-like API: a call whose body's `user` is `big` reports 40,000 prompt tokens, any other 5. */
async function openaiLike() {
  return serve({
    respond: (_req: IncomingMessage, res: ServerResponse, text: string) => {
      const big = text.includes('"user":"big"');
      res
        .writeHead(200, { ...json, ...quota })
        .end(JSON.stringify({ usage: { prompt_tokens: big ? 40_000 : 5, completion_tokens: 2 } }));
      return true;
    },
  });
}

describe("a partition's token debt and the registry's bounds", () => {
  it('a partition owing 30,000 tokens is not forgotten when another customer needs room: its next call still waits (refused past maxWait), not sent at once', async () => {
    // docs/llm.md: a call that used more than its budget "leaves the budget in debt: the calls
    // after it wait until the debt is refilled". Dropped as idle to make room, the limiter took
    // its debt with it, and the customer's next call went at once on a full new bucket.
    const server = await openaiLike();
    const { registry, fetch } = oneRoomFetch(server.origin, { api: 'openai', maxWait: 1_000 });
    const send = (key: string, user = 'small') =>
      fetch(`${server.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, authorization: `Bearer ${key}` },
        body: JSON.stringify({
          model: 'm',
          user,
          max_tokens: 10,
          messages: [{ role: 'user', content: 'hi' }],
        }),
      }).then(
        async (r) => {
          await r.text();
          return r.status;
        },
        (error: unknown) => error,
      );

    expect(await send('key-a')).toBe(200); // claims the named limiter itself
    expect(await send('key-b', 'big')).toBe(200); // B's own limiter: 40,000 tokens used
    const bKey = registry.names().find((n) => n.startsWith('openai#')) as string;
    expect(registry.get(bKey)?.snapshot().budgets?.tokens?.tokens).toBeLessThan(-20_000);
    // B's debt takes three minutes to refill: its next call is refused at maxWait, never sent.
    expect(await send('key-b')).toBeInstanceOf(RateLimitRejectedError);

    // C comes with no room (one limiter besides the named one): B's limiter gives way.
    expect(await send('key-c')).toBe(200);
    const sent = server.received.length;
    // B again, the clock not moved: still three minutes of debt.
    expect(await send('key-b')).toBeInstanceOf(RateLimitRejectedError);
    expect(server.received.length).toBe(sent);
  });
});

describe('a partition function that fails, through the fetch wrapper', () => {
  it.each([
    ['returns a number', () => 42 as unknown as string],
    ['returns a Promise', () => Promise.resolve('k') as unknown as string],
  ])(
    'one that %s rejects the call with InvalidCallbackValueError, sending nothing',
    async (_what, partition) => {
      const server = await openaiLike();
      const fetch = rateLimitedFetch({
        limiters: { openai: { origins: [server.origin] } },
        partition,
        clock: new ManualClock(),
      });
      cleanups.push(() => fetch.close());
      const error = await fetch(`${server.origin}/v1/x`, { method: 'POST', body: '{}' }).catch(
        (e: unknown) => e,
      );
      expect((error as { code?: string }).code).toBe('ERR_INVALID_CALLBACK_VALUE');
      expect(server.received.length).toBe(0);
    },
  );
});

describe("a partition's stream aborted midway", () => {
  it("lets go of its limiter: once idle, it gives way to another customer's (not the overflow limiter)", async () => {
    // docs/llm.md: a partition's limiter is held "until the answer ends (read to its end,
    // cancelled, its connection lost ...)". An SSE answer cancelled by its caller ends it.
    let stream: ServerResponse | undefined;
    const server = await serve({
      respond: (_req: IncomingMessage, res: ServerResponse, text: string) => {
        if (text.includes('"stream":true')) {
          res.writeHead(200, { 'content-type': 'text/event-stream', ...quota });
          res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
          stream = res;
        } else res.writeHead(200, { ...json, ...quota }).end('{"usage":{"prompt_tokens":5}}');
        return true;
      },
    });
    cleanups.push(() => stream?.destroy());
    const { registry, fetch } = oneRoomFetch(server.origin);
    const call = (key: string, streamed = false) =>
      fetch(`${server.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: 'm', stream: streamed, messages: [{ role: 'user', content: 'hi' }] }),
      });

    await (await call('key-a')).text(); // claims the named limiter
    const streamed = await call('key-b', true);
    const reader = (streamed.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await reader.cancel();
    await (await call('key-c')).text();
    expect(registry.names().some((n) => n.includes('overflow'))).toBe(false);
  });
});
