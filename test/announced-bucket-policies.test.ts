import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { agentWith, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// `burst: 'announced'` against a real node:http server announcing several IETF policies; the
// limiter runs on a ManualClock that stands still, so only what the announced bucket holds goes.

describe("burst: 'announced' with several policies", () => {
  it('sizes the bucket from the binding policy, not the first listed (a daily quota before a per-second one)', async () => {
    // A daily quota of 10,000 and a burst policy of 10 a second, in that order. The server counts
    // the burst policy: beyond 10 requests in its second it answers 429.
    let n = 0;
    const server = await serve({
      respond: (_req, res) => {
        n++;
        const burstLeft = 10 - n;
        if (burstLeft < 0) {
          res.writeHead(429, { 'retry-after': '1' }).end('slow down');
          return true;
        }
        res
          .writeHead(200, {
            'ratelimit-policy': '"daily";q=10000;w=86400, "burst";q=10;w=1',
            ratelimit: `"daily";r=${10_000 - n};t=86400, "burst";r=${burstLeft};t=1`,
          })
          .end('ok');
        return true;
      },
    });
    const clock = new ManualClock();
    const rl = limit({ clock, default: { burst: 'announced' }, maxAttempts: 1 });
    const agent = agentWith(rl);
    const url = `${server.origin}/`;
    expect((await get(agent, url)).status).toBe(200);
    const limiter = rl.registry.get(server.origin);
    if (limiter === undefined) throw new Error('no limiter');
    // What does not go now waits, or is refused at once (the daily quota's refill is slow).
    let refused = 0;
    const all = Array.from({ length: 30 }, () =>
      get(agent, url).then(
        (r) => r.status,
        () => refused++,
      ),
    );
    await until(
      () => server.requests - 1 + limiter.snapshot().queued + refused === 30,
      'every request at the server, queued or refused',
    );
    // The burst policy has 9 left of this second: at most 9 go, and none meets a 429.
    expect(server.throttled).toBe(0);
    expect(server.requests - 1).toBeLessThanOrEqual(9);
    rl.close();
    await Promise.allSettled(all);
  });
});
