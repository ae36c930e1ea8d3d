import type { IncomingMessage, ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { serveLocal } from './helpers/llm-clients.js';

// An LLM API's answer compressed below the fetch that asked for it (the interceptor sees its bytes
// as sent) is decoded at its end to read its `usage` (up to 8 MiB compressed, 64 MiB decoded),
// synchronously, in the tap's onResponseEnd: 60 KB of gzip that decode to 60 MiB of JSON stand
// the event loop still while they decode (about 0.35 s here) before the caller is told the end.
// Decoding it off the event loop would move the correction after the caller's end (a call made at
// the end would draw before it), and race the answer's own decoding in Node's fetch above: left
// as it is, a known limit (a server's answer, not the caller's body).

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const USAGE = { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 };
/** 60 MiB of JSON (its usage at the end, after spaces), gzipped to about 60 KB. */
const ANSWER = gzipSync(
  Buffer.concat([
    Buffer.from('{"id":"c"'),
    Buffer.alloc(60 * 1024 * 1024, 32),
    Buffer.from(`,"usage":${JSON.stringify(USAGE)}}`),
  ]),
);

describe("a compressed answer's usage, read by the interceptor", () => {
  it.fails('is decoded while other work runs (an immediate scheduled at its last chunk runs before the correction)', async () => {
    const origin = await serveLocal((req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }).end(ANSWER);
      });
    }, cleanups);
    const interceptor = adaptiveRateLimit({
      limiters: { llm: { origins: [origin], api: 'openai' } },
      default: false,
      clock: new ManualClock(),
    });
    const agent = new Agent().compose(interceptor);
    cleanups.push(
      () => agent.close(),
      () => interceptor.close(),
    );
    const limiter = interceptor.registry.get('llm') as AdaptiveRateLimiter;
    let scheduled = 0;
    let ran = 0;
    const pendingAtCharge: number[] = [];
    const charge = limiter.charge.bind(limiter);
    limiter.charge = (costs) => {
      pendingAtCharge.push(scheduled - ran);
      return charge(costs);
    };
    await new Promise<void>((resolve, reject) => {
      agent.dispatch(
        {
          origin,
          path: '/v1/chat/completions',
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
          body: JSON.stringify({
            model: 'gpt-4o',
            messages: [{ role: 'user', content: 'hi' }],
            max_tokens: 10,
          }),
        },
        {
          onRequestStart: () => {},
          onResponseStart: () => {},
          onResponseData: () => {
            scheduled++;
            setImmediate(() => ran++);
          },
          onResponseEnd: () => resolve(),
          onResponseError: (_c, error) => reject(error),
        },
      );
    });
    await new Promise((resolve) => setImmediate(resolve));
    // Corrected from its usage once, with every immediate scheduled at its chunks run before.
    expect(pendingAtCharge).toEqual([0]);
  });
});
