import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ManualClock } from '../../src/clock.js';
import type { AdaptiveRateLimiter } from '../../src/limiter/adaptive.js';
import { serve } from './interceptor-fixtures.js';
import { flush } from './unhandled.js';

const json = { 'content-type': 'application/json' };
/** OpenAI's headers on every answer: a tokens budget of 10,000 a minute, nearly full. */
const QUOTA_HEADERS = {
  'x-ratelimit-limit-tokens': '10000',
  'x-ratelimit-remaining-tokens': '9990',
  'x-ratelimit-reset-tokens': '60ms',
};
/** The tokens a held stream's `usage` reports at its end (see {@link streamingApi}). */
export const STREAM_USED = 5_000;
/** A streamed chat completion's body, asking for its usage. */
export const STREAM_CHAT = JSON.stringify({
  model: 'm',
  max_tokens: 10,
  stream: true,
  stream_options: { include_usage: true },
  messages: [{ role: 'user', content: 'hi' }],
});

/**
 * An OpenAI-like API on 127.0.0.1: key `streamer` gets a stream held open after its first event
 * (kept in `streams`) until `end(res)` writes its usage ({@link STREAM_USED} tokens) and `[DONE]`;
 * every other key a JSON answer at once. {@link QUOTA_HEADERS} on every answer.
 */
export async function streamingApi() {
  const streams: ServerResponse[] = [];
  const server = await serve({
    respond: (req: IncomingMessage, res: ServerResponse) => {
      if (req.headers.authorization === 'Bearer streamer') {
        res.writeHead(200, { ...QUOTA_HEADERS, 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"he"}}]}\n\n');
        streams.push(res);
      } else {
        res
          .writeHead(200, { ...QUOTA_HEADERS, ...json })
          .end(JSON.stringify({ usage: { prompt_tokens: 3, completion_tokens: 2 } }));
      }
      return true;
    },
  });
  const end = (res: ServerResponse) => {
    res.write(`data: {"choices":[],"usage":{"prompt_tokens":${STREAM_USED},"completion_tokens":0}}\n\n`);
    res.end('data: [DONE]\n\n');
  };
  return { server, streams, end };
}

/**
 * Whether a call of `units` with `costs` is granted by `limiter` within `seconds`, the clock moved
 * a second at a time: `'granted'` (its permit answered a success), or the error it was refused with.
 */
export async function grantedWithin(
  limiter: AdaptiveRateLimiter,
  clock: ManualClock,
  costs: Record<string, number>,
  seconds = 60,
): Promise<unknown> {
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
  for (let s = 0; s < seconds && result === undefined; s++) {
    clock.advance(1_000);
    await flush();
  }
  return result;
}
