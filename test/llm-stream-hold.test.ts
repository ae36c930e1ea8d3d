import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, limit } from './helpers/interceptor-fixtures.js';
import { STREAM_CHAT as chat, streamingApi, STREAM_USED as USED } from './helpers/llm-stream.js';
import { until } from './helpers/rate-limited-server.js';

// A partition's limiter is held while its LLM answer's body passes: a stream runs for minutes,
// and its `usage` (read at its end) must charge the limiter the partition's next call draws from,
// not one dropped (to make room for another partition, or as idle) while the stream ran. Real
// node:http servers on 127.0.0.1; the limiters on a ManualClock.

const json = { 'content-type': 'application/json' };

type Send = (key: string) => Promise<Response>;

function registryFor(origin: string, clock: ManualClock) {
  const registry = new RateLimiterRegistry({
    limiters: { openai: { origins: [origin], api: 'openai' } },
    maxOriginLimiters: 1,
    clock,
  });
  cleanups.push(() => registry.close());
  return registry;
}

const viaFetch = (registry: RateLimiterRegistry, origin: string): Send => {
  const fetch = rateLimitedFetch({ registry });
  cleanups.push(() => fetch.close());
  return (key) =>
    fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...json, authorization: `Bearer ${key}` },
      body: chat,
    });
};

const viaInterceptor = (registry: RateLimiterRegistry, origin: string): Send => {
  const dispatcher = agentWith(limit({ registry }));
  return (key) =>
    fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...json, authorization: `Bearer ${key}` },
      body: chat,
      dispatcher,
    } as RequestInit);
};

/**
 * A registry of one partitioned OpenAI limiter with room for one partition besides the named
 * limiter's own: a first call claims that one, then the streamer's stream starts (held open at
 * the server) on a partition limiter of its own, `key`.
 */
async function streaming(adapter: (registry: RateLimiterRegistry, origin: string) => Send) {
  const { server, streams, end } = await streamingApi();
  const registry = registryFor(server.origin, new ManualClock());
  const send = adapter(registry, server.origin);
  expect((await send('first')).status).toBe(200); // claims the named limiter itself
  const stream = await send('streamer');
  expect(stream.status).toBe(200);
  await until(() => streams.length === 1, 'the stream held at the server');
  const key = registry.names().find((n) => n.startsWith('openai#')) as string;
  /** A third partition's call, read whole: it needs room (maxOriginLimiters: 1). */
  const third = async () => {
    const answer = await send('third');
    expect(answer.status).toBe(200);
    await answer.text();
  };
  return { registry, stream, key, third, server: streams[0] as ServerResponse, end };
}

describe.each([
  ['the fetch wrapper', viaFetch],
  ['the interceptor', viaInterceptor],
])("a partition's limiter while its LLM stream runs (%s)", (_name, adapter) => {
  it('is not dropped to make room for another partition: the usage at the end charges the limiter its next call draws from', async () => {
    const { registry, stream, key, third, server, end } = await streaming(adapter);
    const limiter = registry.get(key);
    expect(limiter).toBeDefined();

    await third();
    expect(registry.get(key)).toBe(limiter);

    const tokens = () => registry.get(key)?.snapshot().budgets?.tokens?.tokens as number;
    const before = tokens();
    expect(Number.isFinite(before)).toBe(true);
    const body = stream.text();
    end(server);
    expect(await body).toContain('[DONE]');
    // The usage (5,000 tokens against an estimate of about 10) was charged to the limiter the
    // registry still holds for the partition.
    expect(registry.get(key)).toBe(limiter);
    expect(tokens()).toBeLessThan(before - USED / 2);
  });

  it('is let go once the stream is cancelled: the partition can be dropped again', async () => {
    const { registry, stream, key, third } = await streaming(adapter);
    await stream.body?.cancel();
    // Nothing holds the streamer's limiter now: the third partition takes its room.
    await third();
    expect(registry.get(key)).toBeUndefined();
  });

  it('is let go once the stream fails (its connection reset)', async () => {
    const { registry, stream, key, third, server } = await streaming(adapter);
    const body = stream.text().catch((e: unknown) => e);
    server.socket?.destroy();
    expect(await body).toBeInstanceOf(Error);
    await third();
    expect(registry.get(key)).toBeUndefined();
  });
});
