import type { OutgoingHttpHeaders } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { agentWith, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// `burst: 'announced'` against a real node:http server sending IETF RateLimit fields; the limiter
// runs on a ManualClock, so what is counted never depends on real time.

describe("burst: 'announced': the reserve is bounded by the bucket", () => {
  it('with a 1-second policy (q=10;w=1), the default reserve leaves the bucket its refill, not in debt', async () => {
    // A refilling bucket of 10 a second that this slow client never drains: r=9 on every answer.
    // The default reserve, 1.5 s of 600/min, is 15 units: more than the whole bucket.
    const server = await serve({
      respond: (_req, res) => {
        res
          .writeHead(200, {
            'ratelimit-policy': '"default";q=10;w=1',
            ratelimit: '"default";r=9;t=1',
          } satisfies OutgoingHttpHeaders)
          .end('ok');
        return true;
      },
    });
    const clock = new ManualClock();
    const rl = limit({ clock, default: { burst: 'announced' } });
    const agent = agentWith(rl);
    const url = `${server.origin}/`;
    expect((await get(agent, url)).status).toBe(200);
    const limiter = rl.registry.get(server.origin);
    if (limiter === undefined) throw new Error('no limiter');
    // An announcement never puts the bucket in debt.
    expect(limiter.snapshot().tokens).toBeGreaterThanOrEqual(0);
    let granted = 0;
    let answered = 0;
    limiter.on('acquired', () => granted++);
    const all = Array.from({ length: 40 }, () =>
      get(agent, url).then((r) => {
        answered++;
        return r.status;
      }),
    );
    await until(() => limiter.snapshot().queued + granted === 40, 'every request granted or queued');
    // 4 s of the limiter's time, 100 ms at a time, each step's grants answered before the next.
    for (let step = 0; step < 40; step++) {
      clock.advance(100);
      await until(() => answered === granted, 'the granted requests answered');
    }
    const sentIn4s = granted;
    clock.advance(60_000);
    await Promise.all(all);
    // The bucket refills at about 9 a second (r/t): about 36 in 4 s, not 1 each 0.8 s.
    expect(sentIn4s).toBeGreaterThanOrEqual(20);
  });
});
