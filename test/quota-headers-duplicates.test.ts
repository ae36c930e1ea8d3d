import type { OutgoingHttpHeaders } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { headerLookup } from '../src/headers.js';
import { readIetf } from '../src/http/quota-headers/ietf.js';
import { agentWith, get, limit, serve } from './helpers/interceptor-fixtures.js';

// A policy named twice in one answer (a gateway's line and the app's): the stricter item counts,
// as it does on a 429 (an exhausted item is a wait whichever line holds it).

/** A server answering every request with `headers`. */
function answering(status: number, headers: OutgoingHttpHeaders) {
  return serve({
    respond: (_req, res) => {
      res.writeHead(status, headers).end('x');
      return true;
    },
  });
}

describe('IETF RateLimit: a policy named twice in one answer', () => {
  it('pauses on a 200 whose RateLimit lines name the same policy twice, the first exhausted', async () => {
    const server = await answering(200, { ratelimit: ['"default";r=0;t=30', '"default";r=50;t=30'] });
    const clock = new ManualClock();
    const rl = limit({ clock });
    const agent = agentWith(rl);
    expect((await get(agent, `${server.origin}/`)).status).toBe(200);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(30_000);
  });

  it('keeps the lower remaining whichever line comes first, and on the same remaining the later restore', () => {
    const read = (ratelimit: string[]) => readIetf(headerLookup({ ratelimit }));
    expect(read(['"default";r=50;t=30', '"default";r=0;t=30'])).toEqual([
      { policy: 'default', remaining: 0, resetMs: 30_000 },
    ]);
    expect(read(['"default";r=0;t=30', '"default";r=50;t=30'])).toEqual([
      { policy: 'default', remaining: 0, resetMs: 30_000 },
    ]);
    expect(read(['"default";r=0;t=60', '"default";r=0;t=30'])).toEqual([
      { policy: 'default', remaining: 0, resetMs: 60_000 },
    ]);
  });

  it('keeps the policy with the smaller quota per window, whichever line comes first', () => {
    const read = (policies: string[]) =>
      readIetf(headerLookup({ 'ratelimit-policy': policies, ratelimit: '"default";r=5;t=1' }));
    const strict = { policy: 'default', limit: 10, windowMs: 1_000, remaining: 5, resetMs: 1_000 };
    // 100 a minute (1.7 a second) allows fewer than 10 a second.
    expect(read(['"default";q=100;w=60', '"default";q=10;w=1'])).toEqual([
      { ...strict, limit: 100, windowMs: 60_000 },
    ]);
    expect(read(['"default";q=10;w=1', '"default";q=100;w=60'])).toEqual([
      { ...strict, limit: 100, windowMs: 60_000 },
    ]);
    expect(read(['"default";q=20;w=1', '"default";q=10;w=1'])).toEqual([strict]);
    expect(read(['"default";q=10;w=1', '"default";q=20;w=1'])).toEqual([strict]);
  });
});
