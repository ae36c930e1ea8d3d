import type { ServerResponse } from 'node:http';
import { ManualClock } from '../../src/clock.js';
import { rateLimitedFetch } from '../../src/http/fetch.js';
import { agentWith, get, limit, serve } from './interceptor-fixtures.js';

// The Retry-After tests' server: one answer whose headers are made from the server's clock (ours
// `skewMs` off, whole seconds, as an HTTP Date), and the pause a limiter on a manual clock at 0
// takes from it: read from its state, never timed.

/** Answers every request with `status` and the headers made from the server's now (ms). */
export function answerAt(
  status: number,
  headers: (serverNow: number) => Record<string, string | string[]>,
  skewMs = 0,
) {
  return (_req: unknown, res: ServerResponse) => {
    const serverNow = Math.floor((Date.now() + skewMs) / 1000) * 1000;
    res.writeHead(status, headers(serverNow)).end('x');
    return true;
  };
}

/**
 * One request, one attempt, to a real node:http server answering with `respond`, through the
 * interceptor (an undici Agent) or the fetch wrapper (Node's fetch): the answer's status and the
 * instant (ms on the limiter's manual clock, which stays at 0) its limiter is paused until.
 */
export async function pauseFrom(
  respond: ReturnType<typeof answerAt>,
  via: 'interceptor' | 'fetch wrapper' = 'interceptor',
): Promise<{ status: number; pausedUntil: number | undefined }> {
  const server = await serve({ respond });
  const options = { clock: new ManualClock(), maxAttempts: 1, default: { maxPause: 600_000 } };
  if (via === 'interceptor') {
    const rl = limit(options);
    const { status } = await get(agentWith(rl), `${server.origin}/`);
    return { status, pausedUntil: rl.registry.get(server.origin)?.snapshot().pausedUntil };
  }
  const limitedFetch = rateLimitedFetch(options);
  try {
    const response = await limitedFetch(`${server.origin}/`);
    await response.text();
    return {
      status: response.status,
      pausedUntil: limitedFetch.registry.get(server.origin)?.snapshot().pausedUntil,
    };
  } finally {
    limitedFetch.close();
  }
}
