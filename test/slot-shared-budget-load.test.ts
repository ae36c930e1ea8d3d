import type { ServerResponse } from 'node:http';
import { expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { runtimeOf } from '../src/http/interceptor.js';
import { kRouteForOrigin } from '../src/internal.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { LimiterEventMap } from '../src/limiter/events.js';
import { agentWith, cleanups, get, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';
import { describeRedis, type RedisServer, withRedisServer } from './helpers/redis-server.js';
import { settled } from './helpers/settled.js';

// A limiter declared `shared` is a Redis budget whose code loads in the background (a dynamic
// import) when the limiters are made. The requests sent before it is there are the start-up
// burst, exactly when maxConcurrent binds: their wait for a slot is bounded by the budget's
// maxWait and counted in its queueLimit as any later request's, refused with the budget's own
// error and event. Real node:http servers hold their requests (the slot stays taken); the
// limiters run on a manual clock; a real redis-server.

type RejectedEvent = LimiterEventMap['rejected'][0];

/** A server that holds every request until `answer()` ends the oldest one held. */
async function holdingServer() {
  const held: ServerResponse[] = [];
  const server = await serve({
    respond: (_req, res) => {
      held.push(res);
      return true;
    },
  });
  cleanups.push(() => {
    for (const res of held.splice(0)) if (!res.destroyed) res.writeHead(200).end('late');
  });
  return { server, answer: (body: string) => held.shift()?.writeHead(200).end(body) };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

/** The gate of the budget the limiters made for `origin` (the gate is the budget's, not its local limiter's). */
function gateOf(rl: ReturnType<typeof limit>, origin: string) {
  const budget = rl.registry[kRouteForOrigin](origin)?.limiter;
  return budget === undefined ? undefined : runtimeOf(rl).gateOf(budget);
}

function rejections(limiter: AdaptiveRateLimiter): RejectedEvent[] {
  const seen: RejectedEvent[] = [];
  limiter.on('rejected', (e) => seen.push(e));
  return seen;
}

let run = 0;

describeRedis('the slot wait of requests sent while a shared budget’s code loads', () => {
  let redis: RedisServer;
  withRedisServer(({ server }) => {
    redis = server;
  });

  const sharedApi = (origin: string, options: Record<string, unknown>) => ({
    api: {
      origins: [origin],
      ...NEVER_BINDS,
      maxConcurrent: 1,
      ...options,
      shared: { redis: redis.url, name: `slot-load-${process.pid}-${++run}` },
    },
  });

  it('is refused at the budget’s maxWait (max-wait), not left waiting: interceptor', async () => {
    const { server, answer } = await holdingServer();
    const clock = new ManualClock();
    const rl = limit({ clock, limiters: sharedApi(server.origin, { maxWait: 1_000 }) });
    const agent = agentWith(rl);
    const slow = settled(get(agent, `${server.origin}/slow`));
    const a = settled(get(agent, `${server.origin}/a`));
    expect(rl.registry.get('api')).toBeUndefined(); // the budget's code is not there yet

    await server.waitForRequests(1); // loaded: /slow got its units and holds the slot
    const limiter = rl.registry.get('api') as AdaptiveRateLimiter;
    const gate = gateOf(rl, server.origin)!;
    const refused = rejections(limiter);
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    clock.advance(999);
    await turn();
    expect(a.done).toBe(false);

    clock.advance(1);
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(a.error).toBeInstanceOf(RateLimitRejectedError);
    expect(a.error).toMatchObject({ reason: 'max-wait', limiter: limiter.name });
    expect((a.error as Error).message).toMatch(/no maxConcurrent slot within maxWait 1000 ms/);
    expect(refused.map((e) => e.reason)).toEqual(['max-wait']);
    expect(gate.waiting).toBe(0);

    answer('slow');
    await vi.waitFor(() => expect(slow.done).toBe(true));
    expect(slow.value?.status).toBe(200);
    expect(server.requests).toBe(1); // /a was never sent
    expect(gate.inFlight).toBe(0);
  });

  it('counts them in the budget’s queueLimit (queue-full) and keeps their order: interceptor', async () => {
    const { server, answer } = await holdingServer();
    const clock = new ManualClock();
    const rl = limit({ clock, limiters: sharedApi(server.origin, { maxWait: 60_000, queueLimit: 1 }) });
    const agent = agentWith(rl);
    const slow = settled(get(agent, `${server.origin}/slow`));
    const a = settled(get(agent, `${server.origin}/a`));
    const b = settled(get(agent, `${server.origin}/b`));
    expect(rl.registry.get('api')).toBeUndefined();

    await vi.waitFor(() => expect(b.done).toBe(true));
    expect(b.error).toBeInstanceOf(RateLimitRejectedError);
    expect(b.error).toMatchObject({ reason: 'queue-full', code: 'ERR_RATE_LIMIT_QUEUE_FULL' });
    expect((b.error as Error).message).toMatch(
      /queue full: 1 of 1 waiting \(1 of them for a maxConcurrent slot\)/,
    );
    await server.waitForRequests(1);
    const gate = gateOf(rl, server.origin)!;
    expect(gate.waiting).toBe(1);
    expect(a.done).toBe(false);

    answer('slow'); // the slot comes back: /a, the one counted, is sent
    await server.waitForRequests(2);
    answer('a');
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(slow.value?.body).toBe('slow');
    expect(a.value?.body).toBe('a');
    expect(server.received.map((r) => r.path)).toEqual(['/slow', '/a']);
  });

  it('keeps the caller’s abort: a request aborted before the code is there is never sent', async () => {
    const { server, answer } = await holdingServer();
    const rl = limit({ clock: new ManualClock(), limiters: sharedApi(server.origin, { maxWait: 1_000 }) });
    const agent = agentWith(rl);
    const slow = settled(get(agent, `${server.origin}/slow`));
    const controller = new AbortController();
    const a = settled(get(agent, `${server.origin}/a`, { signal: controller.signal }));
    const b = settled(get(agent, `${server.origin}/b`));
    expect(rl.registry.get('api')).toBeUndefined();
    const reason = new Error('caller gave up');
    controller.abort(reason);

    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(a.error).toBe(reason);
    await server.waitForRequests(1);
    const gate = gateOf(rl, server.origin)!;
    await vi.waitFor(() => expect(gate.waiting).toBe(1)); // /b only
    answer('slow');
    await server.waitForRequests(2);
    answer('b');
    await vi.waitFor(() => expect(b.done).toBe(true));
    expect(slow.value?.body).toBe('slow');
    expect(b.value?.body).toBe('b');
    expect(server.received.map((r) => r.path)).toEqual(['/slow', '/b']);
    expect(gate.inFlight).toBe(0);
  });

  it('is refused at the budget’s maxWait: rateLimitedFetch over Node’s fetch', async () => {
    const { server, answer } = await holdingServer();
    const clock = new ManualClock();
    const limitedFetch = rateLimitedFetch({ clock, limiters: sharedApi(server.origin, { maxWait: 1_000 }) });
    cleanups.push(() => limitedFetch.close());
    const slow = settled(limitedFetch(`${server.origin}/slow`).then((r) => r.text()));
    const a = settled(limitedFetch(`${server.origin}/a`));
    expect(limitedFetch.registry.get('api')).toBeUndefined();

    await server.waitForRequests(1);
    const limiter = limitedFetch.registry.get('api') as AdaptiveRateLimiter;
    const refused = rejections(limiter);
    await turn();
    clock.advance(1_000);
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(a.error).toBeInstanceOf(RateLimitRejectedError);
    expect(a.error).toMatchObject({ reason: 'max-wait', limiter: limiter.name });
    expect(refused.map((e) => e.reason)).toEqual(['max-wait']);

    answer('slow');
    await vi.waitFor(() => expect(slow.done).toBe(true));
    expect(slow.value).toBe('slow');
    expect(server.requests).toBe(1);
  });
});
