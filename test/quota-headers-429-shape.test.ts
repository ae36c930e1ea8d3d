import type { OutgoingHttpHeaders } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { throttledByQuota } from '../src/limiter/permit.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// Real node:http servers sending IETF RateLimit fields; the limiter on a ManualClock. A 429 whose
// only wait is an exhausted RateLimit pauses as the policy's learned shape says, as a 200 does.

/** A server answering the n-th request (from 1) with `answer(n)`. */
function scripted(answer: (n: number) => { status: number; headers: OutgoingHttpHeaders }) {
  let n = 0;
  return serve({
    respond: (_req, res) => {
      n++;
      const { status, headers } = answer(n);
      res.writeHead(status, headers).end('x');
      return true;
    },
  });
}

describe('a 429 whose only wait is an exhausted RateLimit', () => {
  it('from a learned refilling bucket, pauses for one unit at most, not the whole t', async () => {
    // A bucket of 60 refilling 1 a second; t is the time until it is full again.
    const server = await scripted((n) => {
      const policy = { 'ratelimit-policy': '"default";q=60;w=60' };
      if (n === 1) return { status: 200, headers: { ...policy, ratelimit: '"default";r=5;t=55' } };
      if (n === 2) return { status: 200, headers: { ...policy, ratelimit: '"default";r=6;t=54' } };
      return { status: 429, headers: { ...policy, ratelimit: '"default";r=0;t=60' } };
    });
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 1 });
    const agent = agentWith(rl);
    const url = `${server.origin}/`;
    expect((await get(agent, url)).status).toBe(200);
    clock.advance(1_000);
    // remaining rose with the reset no later: a refilling bucket.
    expect((await get(agent, url)).status).toBe(200);
    clock.advance(1_000);
    const sent = get(agent, url);
    await until(() => {
      if (server.requests < 3) clock.advance(100);
      return server.requests >= 3;
    }, 'the third request sent');
    expect((await sent).status).toBe(429);
    const paused = rl.registry.get(server.origin)?.snapshot().pausedUntil;
    expect(paused).toBeDefined();
    // One unit is 60 s / 60 = 1 s.
    expect((paused as number) - clock.now()).toBeLessThanOrEqual(1_000);
  });

  it('of a shared budget, from a learned refilling bucket, pauses for one unit at most, heartbeats after too', async () => {
    const clock = new ManualClock();
    const budget = createSharedBudget({
      store: new MemoryBudgetStore(),
      name: 'quota-429',
      clock,
      initialUnitsPerMinute: 60_000,
      burst: 'second',
      heartbeatInterval: 100,
    });
    cleanups.push(() => budget.close());
    const acquire = () => {
      const permit = budget.tryAcquire();
      if (permit === undefined) throw new Error('no permit');
      return permit;
    };
    const policy = { policy: 'default', limit: 60, windowMs: 60_000 };
    acquire().success(undefined, [{ ...policy, remaining: 5, resetMs: 55_000 }]);
    clock.advance(1_000);
    acquire().success(undefined, [{ ...policy, remaining: 6, resetMs: 54_000 }]);
    clock.advance(1_000);
    const at = clock.now();
    throttledByQuota(acquire(), 60_000, [{ ...policy, remaining: 0, resetMs: 60_000 }]);
    expect(budget.limiter.snapshot().pausedUntil).toBeDefined();
    // The pause shared with the members (this one too, at its heartbeats) is the same unit.
    for (let i = 0; i < 5; i++) {
      clock.advance(100);
      await new Promise<void>((resolve) => setImmediate(resolve));
      expect((budget.limiter.snapshot().pausedUntil ?? at) - at).toBeLessThanOrEqual(1_000);
    }
  });
});
