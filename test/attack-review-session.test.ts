import type { IncomingMessage, ServerResponse } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { cleanups, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// Review of the fixes in aba7b55..HEAD. Real node:http servers on 127.0.0.1, ManualClock.

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const json = { 'content-type': 'application/json' };
const quota = {
  'x-ratelimit-limit-tokens': '10000',
  'x-ratelimit-remaining-tokens': '9990',
  'x-ratelimit-reset-tokens': '60ms',
};
const USED = 5_000;
const chat = JSON.stringify({
  model: 'm',
  max_tokens: 10,
  stream: true,
  stream_options: { include_usage: true },
  messages: [{ role: 'user', content: 'hi' }],
});

async function streamingApi() {
  const streams: ServerResponse[] = [];
  const server = await serve({
    respond: (req: IncomingMessage, res: ServerResponse) => {
      if (req.headers.authorization === 'Bearer streamer') {
        res.writeHead(200, { ...quota, 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"he"}}]}\n\n');
        streams.push(res);
      } else {
        res
          .writeHead(200, { ...quota, ...json })
          .end(JSON.stringify({ usage: { prompt_tokens: 3, completion_tokens: 2 } }));
      }
      return true;
    },
  });
  return { server, streams };
}

describe("the fetch wrapper's hold on a partition's limiter while its LLM stream passes", () => {
  it('is kept while the caller reads the body stream it took from the answer (the Response object itself dropped)', async () => {
    const { server, streams } = await streamingApi();
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({
      limiters: { openai: { origins: [server.origin], api: 'openai' } },
      maxOriginLimiters: 1,
      clock,
    });
    cleanups.push(() => registry.close());
    const fetch = rateLimitedFetch({ registry });
    cleanups.push(() => fetch.close());
    const send = (key: string) =>
      fetch(`${server.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, authorization: `Bearer ${key}` },
        body: chat,
      });
    expect((await send('first')).status).toBe(200);
    // The caller keeps the body stream only (as `for await (const chunk of (await fetch(...)).body)`
    // or an SDK's SSE reader does): the Response object is garbage.
    let dropped: WeakRef<Response> | undefined;
    const reader = await (async () => {
      const answer = await send('streamer');
      expect(answer.status).toBe(200);
      dropped = new WeakRef(answer);
      return (answer.body as ReadableStream<Uint8Array>).getReader();
    })();
    await until(() => streams.length === 1, 'the stream held at the server');
    const first = await reader.read();
    expect(first.done).toBe(false);
    const key = registry.names().find((n) => n.startsWith('openai#')) as string;
    const limiter = registry.get(key);
    expect(limiter).toBeDefined();
    // The Response is collected (V8's own gc), and its finalizer has had its turns.
    for (let i = 0; i < 50 && dropped?.deref() !== undefined; i++) {
      await new Promise<void>((resolve) => setTimeout(resolve, 0));
      gc();
    }
    expect(dropped?.deref()).toBeUndefined();
    for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setTimeout(resolve, 0));
    // A third partition needs room (maxOriginLimiters: 1): the streamer's limiter is busy.
    const third = await send('third');
    await third.text();
    // The stream still runs, and its usage is yet to come: its limiter must still be the one held.
    expect(registry.get(key)).toBe(limiter);
    const res = streams[0] as ServerResponse;
    res.write(`data: {"choices":[],"usage":{"prompt_tokens":${USED},"completion_tokens":0}}\n\n`);
    res.end('data: [DONE]\n\n');
    for (let i = 0; i < 20; i++) if ((await reader.read()).done) break;
  });
});

describe('a first cut after a quiet spell, of a budget still unlimited', () => {
  it.each([1, 2])(
    'after %i call(s) and an hour quiet: the next 500-token call is not held for tens of minutes',
    async (calls) => {
      const clock = new ManualClock();
      const limiter = new AdaptiveRateLimiter({ clock, budgets: { requests: {}, tokens: {} } });
      const costs = { tokens: 500 };
      for (let i = 0; i < calls; i++) {
        const permit = await limiter.acquire(1, { costs });
        clock.advance(200);
        permit.success();
      }
      clock.advance(3_600_000);
      const throttled = await limiter.acquire(1, { costs });
      clock.advance(200);
      throttled.throttled(1_000, undefined, ['tokens']);
      // The process sent 500-1,000 tokens in 200-400 ms: the cut reads it averaged over the whole
      // hour since its first grant (8-12 tokens a minute), as the empty window's 0 did before.
      expect(limiter.snapshot().budgets?.tokens?.rate).toBeGreaterThan(500);
      let result: unknown;
      limiter.acquire(1, { costs }).then(
        (permit) => {
          result = 'granted';
          permit.success();
        },
        (error: unknown) => {
          result = error;
        },
      );
      for (let s = 0; s < 60 && result === undefined; s++) {
        clock.advance(1_000);
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      expect(result).toBe('granted');
    },
  );
});
