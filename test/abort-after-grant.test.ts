import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { wrap } from '../src/wrap/wrap.js';
import { agentWith, cleanups, limit } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

// A queued request's units are granted inside the limiter's timer; the request goes out a
// microtask later. A caller that aborts in between (in the same turn as the grant) must get its
// abort reason with nothing sent: no connection opened for it, and no answer counted (no
// `failed` event, which the metrics count as a failed request). The grant and the abort run in
// one synchronous step here: `clock.advance` fires the limiter's timer, then the abort.

/** A node:http server that counts its connections and answers 200. */
async function countingServer() {
  let connections = 0;
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    res.end('ok');
  });
  server.on('connection', () => connections++);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get connections() {
      return connections;
    },
    get requests() {
      return requests;
    },
  };
}

/** A limiter at 60 a minute whose one unit is spent: the next acquire waits a second. */
const SPENT = { initialUnitsPerMinute: 60, slowStart: false } as const;

/** What the limiter told about the request: its events, in order. */
function told(limiter: AdaptiveRateLimiter): string[] {
  const events: string[] = [];
  for (const event of ['acquired', 'failed', 'canceled', 'rejected'] as const) {
    limiter.on(event, () => events.push(event));
  }
  return events;
}

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('a request aborted after its units were granted, before it was sent', () => {
  it('interceptor: rejects with the reason, opens no connection and tells no failed answer', async () => {
    const server = await countingServer();
    const clock = new ManualClock();
    const rl = limit({ clock, default: SPENT });
    const agent = agentWith(rl);
    const limiter = rl.registry.limiterFor(server.origin) as AdaptiveRateLimiter;
    expect(limiter.tryAcquire()).toBeDefined();
    const events = told(limiter);
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const call = settled(request(`${server.origin}/a`, { dispatcher: agent, signal: controller.signal }));
    await flush();
    expect(limiter.snapshot().queued).toBe(1);
    clock.advance(1_000); // granted now, sent a microtask later
    controller.abort(reason);
    await expect.poll(() => call.done).toBe(true);
    await flush();
    expect(call.error).toBe(reason);
    expect(server.connections).toBe(0);
    expect(events).toEqual(['acquired']);
    // The line goes on: the next request is served.
    clock.advance(1_000);
    const next = await request(`${server.origin}/b`, { dispatcher: agent });
    expect(await next.body.text()).toBe('ok');
  });

  it('fetch wrapper: rejects with the reason and tells no failed answer', async () => {
    const server = await countingServer();
    const clock = new ManualClock();
    const limitedFetch = rateLimitedFetch({ clock, default: SPENT });
    cleanups.push(() => limitedFetch.close());
    const limiter = limitedFetch.registry.limiterFor(server.origin) as AdaptiveRateLimiter;
    expect(limiter.tryAcquire()).toBeDefined();
    const events = told(limiter);
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const call = settled(limitedFetch(`${server.origin}/a`, { signal: controller.signal }));
    await flush();
    expect(limiter.snapshot().queued).toBe(1);
    clock.advance(1_000);
    controller.abort(reason);
    await expect.poll(() => call.done).toBe(true);
    await flush();
    expect(call.error).toBe(reason);
    expect(server.requests).toBe(0);
    expect(events).toEqual(['acquired']);
  });

  it('wrap: the function is not called, the call rejects with the reason', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, ...SPENT });
    cleanups.push(() => limiter.close());
    expect(limiter.tryAcquire()).toBeDefined();
    const events = told(limiter);
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    let calls = 0;
    const call = wrap(
      limiter,
      async () => {
        calls++;
        return 'done';
      },
      { signal: controller.signal },
    );
    const pending = settled(call());
    await flush();
    expect(limiter.snapshot().queued).toBe(1);
    clock.advance(1_000);
    controller.abort(reason);
    await expect.poll(() => pending.done).toBe(true);
    expect(pending.error).toBe(reason);
    expect(calls).toBe(0);
    expect(events).toEqual(['acquired']);
  });
});
