import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { runtimeOf } from '../src/http/interceptor.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { LimiterEventMap } from '../src/limiter/events.js';

type RejectedEvent = LimiterEventMap['rejected'][0];

import { agentWith, get, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

// queueLimit bounds every request waiting for a limiter: one waiting for a maxConcurrent slot
// counts as much as one waiting for units. Real node:http servers hold `/slow` (a response not
// started), so the slot stays taken; limiters on a manual clock where time matters.

/** A server that holds each `/slow` request until `startSlow()`, and answers anything else 200 at once. */
async function slowServer() {
  const held: ServerResponse[] = [];
  const server = await serve({
    respond: (req, res) => {
      if (!req.url?.startsWith('/slow')) return false;
      held.push(res);
      return true;
    },
  });
  return {
    server,
    startSlow: () => {
      for (const res of held.splice(0)) if (!res.destroyed) res.writeHead(200).end('slow');
    },
  };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

function rejections(limiter: AdaptiveRateLimiter): RejectedEvent[] {
  const seen: RejectedEvent[] = [];
  limiter.on('rejected', (e) => seen.push(e));
  return seen;
}

describe('queueLimit counts the requests waiting for a maxConcurrent slot', () => {
  it('refuses the next request (queue-full) when queueLimit requests wait for a slot: interceptor', async () => {
    const { server, startSlow } = await slowServer();
    const rl = limit({
      clock: new ManualClock(),
      default: { ...NEVER_BINDS, maxConcurrent: 1, queueLimit: 2 },
    });
    const agent = agentWith(rl);
    const slow = get(agent, `${server.origin}/slow`);
    await server.waitForRequests(1);
    const limiter = rl.registry.get(server.origin) as AdaptiveRateLimiter;
    const refused = rejections(limiter);
    const gate = runtimeOf(rl).gateOf(limiter)!;
    const a = settled(get(agent, `${server.origin}/a`));
    const b = settled(get(agent, `${server.origin}/b`));
    await vi.waitFor(() => expect(gate.waiting).toBe(2));

    const c = settled(get(agent, `${server.origin}/c`));
    await vi.waitFor(() => expect(c.done).toBe(true));
    expect(c.error).toBeInstanceOf(RateLimitRejectedError);
    expect(c.error).toMatchObject({ reason: 'queue-full', code: 'ERR_RATE_LIMIT_QUEUE_FULL' });
    expect((c.error as Error).message).toMatch(
      /queue full: 2 of 2 waiting \(2 of them for a maxConcurrent slot\)/,
    );
    expect(refused.map((e) => e.reason)).toEqual(['queue-full']);
    expect(gate.waiting).toBe(2);

    // Nothing lost: those counted are served, in order; the refused one never reached the server.
    startSlow();
    expect((await slow).body).toBe('slow');
    await vi.waitFor(() => expect(b.done).toBe(true));
    expect([a.value?.status, b.value?.status]).toEqual([200, 200]);
    expect(server.received.map((r) => r.path)).toEqual(['/slow', '/a', '/b']);
    expect(snapshotRoom(rl, server.origin)).toBe(true);
  });

  it('counts waiters for a slot and waiters for units together, one rule for both', async () => {
    const { server, startSlow } = await slowServer();
    // 60 a minute: the next unit 1 s after the first.
    const rate = { initialUnitsPerMinute: 60, minUnitsPerMinute: 60, maxUnitsPerMinute: 60 };
    const rl = limit({ clock: new ManualClock(), default: { ...rate, maxConcurrent: 2, queueLimit: 2 } });
    const agent = agentWith(rl);
    const slow = get(agent, `${server.origin}/slow`); // slot 1, the unit
    await server.waitForRequests(1);
    const limiter = rl.registry.get(server.origin) as AdaptiveRateLimiter;
    const gate = runtimeOf(rl).gateOf(limiter)!;
    const a = settled(get(agent, `${server.origin}/a`)); // slot 2, waits for its unit in the line
    await vi.waitFor(() => expect(limiter.snapshot().queued).toBe(1));
    const b = settled(get(agent, `${server.origin}/b`)); // waits for a slot
    await vi.waitFor(() => expect(gate.waiting).toBe(1));

    const c = settled(get(agent, `${server.origin}/c`));
    await vi.waitFor(() => expect(c.done).toBe(true));
    expect(c.error).toMatchObject({ reason: 'queue-full' });
    expect((c.error as Error).message).toMatch(/2 of 2 waiting \(1 of them for a maxConcurrent slot\)/);
    // The limiter's own acquire follows the same count.
    await expect(limiter.acquire()).rejects.toMatchObject({ reason: 'queue-full' });
    expect(a.done || b.done).toBe(false);
    startSlow();
    await slow;
  });

  it('makes room again when a slot waiter leaves: aborted, expired, or given its slot', async () => {
    const { server, startSlow } = await slowServer();
    const clock = new ManualClock();
    const rl = limit({ clock, default: { ...NEVER_BINDS, maxConcurrent: 1, queueLimit: 1, maxWait: 1_000 } });
    const agent = agentWith(rl);
    const slow = get(agent, `${server.origin}/slow`);
    await server.waitForRequests(1);
    const gate = runtimeOf(rl).gateOf(rl.registry.get(server.origin)!)!;

    const abort = new AbortController();
    const a = settled(get(agent, `${server.origin}/a`, { signal: abort.signal }));
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    abort.abort(new Error('caller gave up'));
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect((a.error as Error).message).toBe('caller gave up');

    const b = settled(get(agent, `${server.origin}/b`)); // room again after the abort
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    clock.advance(1_000);
    await vi.waitFor(() => expect(b.done).toBe(true));
    expect(b.error).toMatchObject({ reason: 'max-wait' });

    const c = settled(get(agent, `${server.origin}/c`)); // room again after the expiry
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    startSlow();
    await slow;
    await vi.waitFor(() => expect(c.done).toBe(true));
    expect(c.value?.status).toBe(200);
    // c holds no count once it had its slot: d waits for the next slot, not refused.
    const slow2 = get(agent, `${server.origin}/slow2`);
    await server.waitForRequests(3);
    const d = settled(get(agent, `${server.origin}/d`));
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    expect(d.done).toBe(false);
    startSlow();
    await slow2;
    await vi.waitFor(() => expect(d.done).toBe(true));
    expect(d.value?.status).toBe(200);
    expect(server.received.map((r) => r.path)).toEqual(['/slow', '/c', '/slow2', '/d']);
  });

  it('refuses the same way through rateLimitedFetch over Node’s fetch', async () => {
    const { server, startSlow } = await slowServer();
    const limitedFetch = rateLimitedFetch({
      clock: new ManualClock(),
      default: { ...NEVER_BINDS, maxConcurrent: 1, queueLimit: 1 },
    });
    const slow = limitedFetch(`${server.origin}/slow`);
    await server.waitForRequests(1);
    const limiter = limitedFetch.registry.get(server.origin) as AdaptiveRateLimiter;
    const refused = rejections(limiter);
    const a = settled(limitedFetch(`${server.origin}/a`, { method: 'POST', body: 'a body' }));
    await turn(); // a waits for the slot
    const b = settled(limitedFetch(`${server.origin}/b`));
    await vi.waitFor(() => expect(b.done).toBe(true));
    expect(b.error).toBeInstanceOf(RateLimitRejectedError);
    expect(b.error).toMatchObject({ reason: 'queue-full' });
    expect(refused.map((e) => e.reason)).toEqual(['queue-full']);
    startSlow();
    expect(await (await slow).text()).toBe('slow');
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(a.value?.status).toBe(200);
    expect(server.received.map((r) => [r.path, r.body])).toEqual([
      ['/slow', ''],
      ['/a', 'a body'],
    ]);
    limitedFetch.close();
  });
});

/** Whether the origin's limiter has room for a waiter again (nothing counted left over). */
function snapshotRoom(rl: ReturnType<typeof limit>, origin: string): boolean {
  const gate = runtimeOf(rl).gateOf(rl.registry.get(origin)!)!;
  return gate.waiting === 0 && (rl.registry.get(origin) as AdaptiveRateLimiter).snapshot().queued === 0;
}

/**
 * Below the rate limiter: counts the attempts undici has started to write (`onRequestStart`) and
 * not yet ended (response started, failed, or aborted by the layer above), and the most at once.
 */
function inFlightCounter() {
  const state = { now: 0, most: 0 };
  const interceptor: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (options, handler) => {
    let live = false;
    const end = () => {
      if (!live) return;
      live = false;
      state.now--;
    };
    return dispatch(options, {
      onResponseData: (controller, chunk) => handler.onResponseData?.(controller, chunk),
      onResponseEnd: (controller, trailers) => handler.onResponseEnd?.(controller, trailers),
      onRequestStart(controller, context) {
        live = true;
        state.now++;
        state.most = Math.max(state.most, state.now);
        // The layer above aborts through the controller it was given: the attempt ends there.
        // Every other member is undici's controller's own, read on it (its private fields).
        const wrapped = new Proxy(controller, {
          get(target, key) {
            if (key === 'abort') {
              return (reason: Error) => {
                end();
                target.abort(reason);
              };
            }
            const value: unknown = Reflect.get(target, key, target);
            return typeof value === 'function' ? value.bind(target) : value;
          },
        });
        handler.onRequestStart?.(wrapped, context);
      },
      onResponseStart(controller, status, headers, message) {
        end();
        handler.onResponseStart?.(controller, status, headers, message);
      },
      onResponseError(controller, error) {
        end();
        handler.onResponseError?.(controller, error);
      },
    } as Dispatcher.DispatchHandler);
  };
  return { state, interceptor };
}

describe('a caller that aborts after its request got its slot', () => {
  it('never lets more than maxConcurrent attempts be in flight: interceptor', async () => {
    const { server, startSlow } = await slowServer();
    const rl = limit({ clock: new ManualClock(), default: { ...NEVER_BINDS, maxConcurrent: 2 } });
    const counter = inFlightCounter();
    const agent = agentWith(counter.interceptor, rl);
    const callers = Array.from({ length: 6 }, () => new AbortController());
    const requests = callers.map((c, i) =>
      settled(get(agent, `${server.origin}/slow${i}`, { signal: c.signal })),
    );
    await server.waitForRequests(2);
    const gate = runtimeOf(rl).gateOf(rl.registry.get(server.origin)!)!;
    await vi.waitFor(() => expect(gate.waiting).toBe(4));
    // Each in turn: the oldest request holding a slot is aborted; the next takes its slot.
    for (let i = 0; i < 4; i++) {
      callers[i]?.abort(new Error(`abort ${i}`));
      await server.waitForRequests(3 + i);
      await turn();
      expect(counter.state.now).toBeLessThanOrEqual(2);
    }
    expect(counter.state.most).toBe(2);
    expect(gate.inFlight).toBe(2);
    startSlow();
    await vi.waitFor(() => expect(requests.every((r) => r.done)).toBe(true));
    expect(requests.map((r) => r.value?.status ?? (r.error as Error).message)).toEqual([
      'abort 0',
      'abort 1',
      'abort 2',
      'abort 3',
      200,
      200,
    ]);
    expect(counter.state.now).toBe(0);
  });

  it('never lets more than maxConcurrent fetches be in flight: rateLimitedFetch over Node’s fetch', async () => {
    const { server, startSlow } = await slowServer();
    const state = { now: 0, most: 0 };
    // In flight: sent, not yet answered, and not aborted (an aborted fetch is cancelled at once).
    const counting: typeof fetch = async (input, init) => {
      let live = true;
      state.now++;
      state.most = Math.max(state.most, state.now);
      const end = () => {
        if (live) state.now--;
        live = false;
      };
      init?.signal?.addEventListener('abort', end, { once: true });
      try {
        return await fetch(input, init);
      } finally {
        end();
      }
    };
    const limitedFetch = rateLimitedFetch({
      fetch: counting,
      clock: new ManualClock(),
      default: { ...NEVER_BINDS, maxConcurrent: 2 },
    });
    const callers = Array.from({ length: 6 }, () => new AbortController());
    const requests = callers.map((c, i) =>
      settled(limitedFetch(`${server.origin}/slow${i}`, { signal: c.signal })),
    );
    await server.waitForRequests(2);
    for (let i = 0; i < 4; i++) {
      callers[i]?.abort(new Error(`abort ${i}`));
      await server.waitForRequests(3 + i);
      await turn();
      expect(state.now).toBeLessThanOrEqual(2);
    }
    expect(state.most).toBe(2);
    startSlow();
    await vi.waitFor(() => expect(requests.every((r) => r.done)).toBe(true));
    const answers = await Promise.all(
      requests.map(async (r) => (r.value === undefined ? (r.error as Error).message : r.value.status)),
    );
    expect(answers).toEqual(['abort 0', 'abort 1', 'abort 2', 'abort 3', 200, 200]);
    limitedFetch.close();
  });
});
