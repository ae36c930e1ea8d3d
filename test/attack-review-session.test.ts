import type { ServerResponse } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { STREAM_CHAT as chat, grantedWithin, streamingApi } from './helpers/llm-stream.js';
import { oneRoomFetch } from './helpers/one-room.js';
import { until } from './helpers/rate-limited-server.js';

// A review of a session's fixes (LLM stream holds, first cuts after a quiet spell). Real node:http servers on 127.0.0.1, ManualClock.

const json = { 'content-type': 'application/json' };

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

describe("the fetch wrapper's hold on a partition's limiter while its LLM stream passes", () => {
  it('is kept while the caller reads the body stream it took from the answer (the Response object itself dropped)', async () => {
    const { server, streams, end } = await streamingApi();
    const { registry, fetch } = oneRoomFetch(server.origin);
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
    end(streams[0] as ServerResponse);
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
      expect(await grantedWithin(limiter, clock, costs)).toBe('granted');
    },
  );
});
