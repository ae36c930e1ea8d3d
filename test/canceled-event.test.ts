import { Agent, type Dispatcher, request } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { LimiterEventMap } from '../src/limiter/events.js';
import { ATTRIBUTES, enableMetrics, METRICS, type MetricsHandle } from '../src/otel/index.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { LazySharedBudget, retireSharedBudget } from '../src/registry/shared.js';
import { cleanups, limit, serve } from './helpers/interceptor-fixtures.js';
import { otelHarness, sum } from './helpers/otel-harness.js';
import { until } from './helpers/rate-limited-server.js';

// A queued wait the caller aborts is the third way an acquire ends (after acquired and rejected):
// the `canceled` event. The metrics count it, and a replaced shared budget whose last waiter is
// aborted leaves Redis instead of staying a member for as long as the process lives.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A limiter at 60 a minute whose one unit is spent: the next acquire waits a second. */
function busy(name: string, options: { budgets?: boolean } = {}) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({
    name,
    clock,
    slowStart: false,
    ...(options.budgets
      ? {
          budgets: {
            requests: { initialUnitsPerMinute: 60 },
            tokens: { initialUnitsPerMinute: 6_000 },
          },
        }
      : { initialUnitsPerMinute: 60 }),
  });
  cleanups.push(() => limiter.close());
  expect(limiter.tryAcquire()).toBeDefined();
  return { clock, limiter };
}

describe("the 'canceled' event", () => {
  it('tells an aborted wait once, with its units and how long it waited', async () => {
    const { clock, limiter } = busy('c1');
    const told: LimiterEventMap['canceled'][0][] = [];
    limiter.on('canceled', (e) => told.push(e));
    const controller = new AbortController();
    const waiting = limiter.acquire(1, { signal: controller.signal }).catch((e: unknown) => e);
    clock.advance(400);
    controller.abort();
    expect(await waiting).toMatchObject({ name: 'AbortError' });
    controller.abort(); // again: nothing more
    expect(told).toEqual([{ limiter: 'c1', units: 1, waited: 400 }]);
  });

  it('a limiter of several budgets tells it once, not once per budget', async () => {
    const { limiter } = busy('c2', { budgets: true });
    const told: unknown[] = [];
    limiter.on('canceled', (e) => told.push(e));
    const controller = new AbortController();
    const waiting = limiter
      .acquire(1, { signal: controller.signal, costs: { tokens: 10 } })
      .catch((e: unknown) => e);
    controller.abort();
    await waiting;
    expect(told).toEqual([{ limiter: 'c2', budget: 'requests', units: 1, waited: 0 }]);
  });

  it('a served or refused wait tells none', async () => {
    const { clock, limiter } = busy('c3');
    const canceled = vi.fn();
    limiter.on('canceled', canceled);
    const served = limiter.acquire(1);
    clock.advance(1_000);
    await served;
    await limiter.close();
    expect(canceled).not.toHaveBeenCalled();
  });

  it('the HTTP interceptor: a request aborted while it waits for its turn tells it', async () => {
    const server = await serve();
    const clock = new ManualClock();
    const rl = limit({ clock, limiters: { api: { origins: [server.origin], initialUnitsPerMinute: 60 } } });
    const agent = new Agent().compose(rl) as Dispatcher;
    cleanups.push(() => agent.close());
    expect((await request(`${server.origin}/1`, { dispatcher: agent })).statusCode).toBe(200);
    const limiter = rl.registry.get('api')!;
    const canceled = vi.fn();
    limiter.on('canceled', canceled);
    const controller = new AbortController();
    const second = request(`${server.origin}/2`, { dispatcher: agent, signal: controller.signal }).catch(
      (e: unknown) => e,
    );
    await until(() => limiter.snapshot().queued === 1, 'the request to wait');
    controller.abort();
    await second;
    expect({
      calls: canceled.mock.calls.length,
      queued: limiter.snapshot().queued,
      sent: server.requests,
    }).toEqual({ calls: 1, queued: 0, sent: 1 });
  });
});

describe('the end of a wait: one event, the right one', () => {
  it("an adapter's close (the limiter left open) refuses the wait: 'rejected' (closed), as the caller is told, not 'canceled'", async () => {
    const server = await serve();
    const { limiter } = busy('inst');
    const rl = limit({ limiters: { api: { origins: [server.origin], limiter } }, default: false });
    const agent = new Agent().compose(rl) as Dispatcher;
    cleanups.push(() => agent.close());
    const events: string[] = [];
    for (const e of ['acquired', 'rejected', 'canceled'] as const) limiter.on(e, () => events.push(e));
    const waiting = request(`${server.origin}/x`, { dispatcher: agent }).catch((e: unknown) => e);
    await until(() => limiter.snapshot().queued === 1, 'the request to wait');
    await rl.close();
    const error = (await waiting) as { name?: string; reason?: string };
    expect({ error: [error.name, error.reason], events }).toEqual({
      error: ['RateLimitRejectedError', 'closed'],
      events: ['rejected'],
    });
  });

  it("several budgets: the head's signal aborted from its own 'acquired' listener leaves the next waiter's costs drawn", async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      name: 'sb',
      clock,
      slowStart: false,
      burst: 'second',
      budgets: { requests: { initialUnitsPerMinute: 60 }, tokens: { initialUnitsPerMinute: 600 } },
    });
    cleanups.push(() => limiter.close());
    expect(limiter.tryAcquire(1, { tokens: 10 })).toBeDefined(); // each budget's second spent
    const a = new AbortController();
    const first = limiter.acquire(1, { signal: a.signal, costs: { tokens: 10 } });
    const second = limiter.acquire(1, { costs: { tokens: 10 } });
    limiter.once('acquired', () => a.abort()); // an app's timeout firing in the listener
    clock.advance(1_000);
    await first;
    const before = limiter.snapshot().budgets?.tokens?.tokens ?? Number.NaN;
    clock.advance(1_000);
    await second;
    // The second drew its 10 tokens: the bucket (10 a second) ends where it began.
    expect((limiter.snapshot().budgets?.tokens?.tokens ?? Number.NaN) - before).toBeCloseTo(0);
  });

  it.each([false, true])(
    'a signal whose addEventListener throws: the acquire rejects and leaves nothing in the line (several budgets: %s)',
    async (budgets) => {
      const { clock, limiter } = busy(`thrower-${budgets}`, { budgets });
      const signal = {
        aborted: false,
        addEventListener() {
          throw new Error('listener refused');
        },
        removeEventListener() {},
      } as unknown as AbortSignal;
      const costs = budgets ? { tokens: 1 } : undefined;
      expect(await limiter.acquire(1, { signal, costs }).catch((e: Error) => e.message)).toBe(
        'listener refused',
      );
      let served = false;
      void limiter.acquire(1, { costs }).then(() => (served = true));
      clock.advance(1_000);
      await flush();
      const s = limiter.snapshot();
      expect({ served, queued: s.queued, queuedUnits: s.queuedUnits }).toEqual({
        served: true,
        queued: 0,
        queuedUnits: 0,
      });
    },
  );
});

describe('metrics: an aborted wait', () => {
  const h = otelHarness();
  let handle: MetricsHandle | undefined;
  afterEach(() => {
    handle?.disable();
    handle = undefined;
  });

  it('counts requests{result="canceled"}, reported from the first', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const { limiter } = busy('c4');
    const result = (all: Awaited<ReturnType<typeof h.collect>>, r: string) =>
      sum(all, METRICS.requests, { [ATTRIBUTES.limiter]: 'c4', [ATTRIBUTES.result]: r });
    expect(result(await h.collect(), 'canceled')).toBe(0);
    for (let i = 0; i < 2; i++) {
      const controller = new AbortController();
      const waiting = limiter.acquire(1, { signal: controller.signal }).catch(() => undefined);
      controller.abort();
      await waiting;
    }
    const all = await h.collect();
    expect({ canceled: result(all, 'canceled'), acquired: result(all, 'acquired') }).toEqual({
      canceled: 2,
      acquired: 1,
    });
  });
});

/** A failClosed shared budget on a memory store behind the registry's lazy wrapper, ready; its one unit a second spent. */
async function lazyBudget() {
  const clock = new ManualClock();
  const budget = createSharedBudget({
    name: 'old',
    store: new MemoryBudgetStore({ clock }),
    clock,
    initialUnitsPerMinute: 60,
    burst: 'second',
    heartbeatInterval: 250,
    failClosed: true,
  });
  cleanups.push(() => budget.close());
  const lazy = new LazySharedBudget('old', async () => budget);
  await budget.ready();
  await flush();
  expect(lazy.tryAcquire(1)).toBeDefined();
  return { clock, lazy };
}

const outcome = (p: Promise<unknown>) =>
  p.then(
    () => 'served',
    (e: { reason?: string }) => `refused: ${e.reason}`,
  );

describe('a shared budget that replace took out', () => {
  it('failClosed: an acquire made before it was taken out (on its way to the line) is served, not refused closed', async () => {
    const { clock, lazy } = await lazyBudget();
    const pending = outcome(lazy.acquire(1));
    retireSharedBudget(lazy);
    await flush();
    clock.advance(2_000);
    expect(await pending).toBe('served');
  });

  it('failClosed: the last waiter in the line aborted while another acquire is on its way: that one is served', async () => {
    const { clock, lazy } = await lazyBudget();
    const controller = new AbortController();
    const first = lazy.acquire(1, { signal: controller.signal }).catch((e: unknown) => e);
    await flush();
    expect(lazy.limiter?.snapshot().queued).toBe(1);
    retireSharedBudget(lazy);
    await flush();
    const second = outcome(lazy.acquire(1));
    controller.abort(); // the same tick: the second is not in the line yet
    await first;
    await flush();
    clock.advance(2_000);
    expect(await second).toBe('served');
  });

  it('closes when its last waiter is aborted', async () => {
    const { limiter } = busy('c5');
    const close = vi.fn(async () => undefined);
    const controller = new AbortController();
    const waiting = limiter.acquire(1, { signal: controller.signal }).catch(() => undefined);
    retireSharedBudget({ limiter, close, busy: false } as unknown as LazySharedBudget);
    await flush();
    expect(close).not.toHaveBeenCalled(); // a request still waits in it
    controller.abort();
    await waiting;
    expect(close).toHaveBeenCalledTimes(1);
  });
});
