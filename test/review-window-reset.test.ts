import type { OutgoingHttpHeaders } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { agentWith, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// A review of "a window read from some answers' headers holds until its reset" (announced quotas
// kept through answers that leave them out). Real node:http servers on 127.0.0.1, the limiter's
// and the servers' clocks one manual clock; requests are counted as the clock is stepped.

/** Steps the clock 50 ms `steps` times, letting the sockets settle between steps. */
async function settle(clock: ManualClock, steps: number): Promise<void> {
  for (let i = 0; i < steps; i++) {
    let polls = 0;
    await until(() => ++polls >= 5, 'the sockets to settle');
    clock.advance(50);
  }
}

/**
 * An IETF refilling bucket of 60 a minute (5 at most, one more each second of the manual clock),
 * announced on every answer (`t`: the next unit, 1 s), but for `/proxy`: a proxy's 502 with no
 * quota headers.
 */
async function bucketBehindProxy(clock: ManualClock) {
  let tokens = 5;
  let at = 0;
  const statuses: number[] = [];
  const server = await serve({
    respond: (req, res) => {
      if (req.url === '/proxy') {
        statuses.push(502);
        res.writeHead(502).end('bad gateway');
        return true;
      }
      tokens = Math.min(5, tokens + Math.floor((clock.now() - at) / 1_000));
      at = clock.now() - ((clock.now() - at) % 1_000);
      const status = tokens >= 1 ? 200 : 429;
      if (status === 200) tokens--;
      statuses.push(status);
      const headers: OutgoingHttpHeaders = {
        'ratelimit-policy': '"default";q=60;w=60',
        ratelimit: `"default";r=${tokens};t=1`,
      };
      res.writeHead(status, headers).end('x');
      return true;
    },
  });
  return { server, statuses };
}

describe('a refilling bucket announced on some answers only', () => {
  it("keeps its quota through a proxy's answer without headers past the next unit's reset: 20 queued go at 1 a second, none refused", async () => {
    const clock = new ManualClock();
    const { server, statuses } = await bucketBehindProxy(clock);
    const rl = limit({ clock, default: { maxPause: 60_000, maxWait: 600_000 } });
    const agent = agentWith(rl);
    for (let i = 0; i < 2; i++) {
      expect((await get(agent, `${server.origin}/`)).status).toBe(200);
      clock.advance(1_000);
    }
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(60);
    // The proxy's 502 is answered past the reading's `t` (1 s), with 20 calls queued behind it.
    void get(agent, `${server.origin}/proxy`).catch(() => {});
    for (let i = 0; i < 20; i++) void get(agent, `${server.origin}/`).catch(() => {});
    await settle(clock, 40);
    expect(statuses[2]).toBe(502);
    // 2 s of the clock at 60 a minute: a few more, none refused.
    expect(statuses.length).toBeLessThanOrEqual(3 + 4);
    expect(statuses.filter((s) => s === 429)).toEqual([]);
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(60);
  });
});
