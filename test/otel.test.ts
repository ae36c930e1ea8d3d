import type { Histogram, MeterProvider, MetricData } from '@opentelemetry/sdk-metrics';
import { Agent, request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../src/clock.js';
import { InvalidArgumentError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { ATTRIBUTES, enableMetrics, METRICS, type MetricsHandle } from '../src/otel/index.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { wrap } from '../src/wrap/wrap.js';
import { type Attrs, otelHarness, points, sum } from './helpers/otel-harness.js';
import { RateLimitedServer, type RateLimitedServerOptions } from './helpers/rate-limited-server.js';

// enableMetrics through sdk-metrics' in-memory exporter, against real node:http servers that
// throttle: the figures must agree with the limiters' snapshots and with what the servers counted.

let h: ReturnType<typeof otelHarness>;
let provider: MeterProvider;
let handle: MetricsHandle | undefined;
const cleanups: (() => unknown)[] = [];

beforeEach(() => {
  h = otelHarness();
  provider = h.provider;
});

afterEach(async () => {
  handle?.disable();
  handle = undefined;
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await provider.shutdown();
});

/** The metrics of the last collection, by name. */
const collect = () => h.collect();

/** The one gauge value of `name` with `match`. */
function gauge(all: Map<string, MetricData>, name: string, match: Attrs): number | undefined {
  const found = points(all, name, match);
  expect(found.length).toBeLessThanOrEqual(1);
  return found[0]?.value as number | undefined;
}

function histogram(all: Map<string, MetricData>, name: string, match: Attrs): Histogram {
  const found = points(all, name, match);
  expect(found).toHaveLength(1);
  return found[0]?.value as Histogram;
}

async function server(options: RateLimitedServerOptions = {}): Promise<RateLimitedServer> {
  const s = await RateLimitedServer.start(options);
  cleanups.push(() => s.close());
  return s;
}

describe('enableMetrics', () => {
  it("records the fetch wrapper's limiter as its snapshot and the server count it", async () => {
    const api = await server({ capacity: 8, retryAfter: '1' });
    handle = enableMetrics({ meterProvider: provider });
    // A short maxPause: the Retry-After pauses for 20 ms, not a second.
    // The real clock, stopped once the traffic is over: the accepted rate moves with time, and the
    // snapshot and the collection read it at two instants (a loaded machine put 2 % between them).
    const stopped: { at?: number } = {};
    const clock = { ...systemClock, now: () => stopped.at ?? systemClock.now() };
    const limited = rateLimitedFetch({ clock, default: { initialUnitsPerMinute: 600_000, maxPause: 20 } });
    cleanups.push(() => limited.close());

    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const answers = await Promise.all(
        Array.from({ length: 5 }, (_, j) => limited(`${api.origin}/r${i}-${j}`).then((r) => r.status)),
      );
      statuses.push(...answers);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(8);

    stopped.at = systemClock.now();
    const limiter = limited.registry.limiterFor(api.origin);
    const snapshot = limiter?.snapshot();
    if (limiter === undefined || snapshot === undefined) throw new Error('no limiter');
    const all = await collect();
    const mine = {
      [ATTRIBUTES.limiter]: api.origin,
      [ATTRIBUTES.controller]: 'probe',
      'server.address': '127.0.0.1',
      'server.port': api.port,
    };
    const sent = sum(all, METRICS.requests, { ...mine, [ATTRIBUTES.result]: 'acquired' });
    const waited = sum(all, METRICS.requests, { ...mine, [ATTRIBUTES.result]: 'waited' });
    // Every attempt acquired once: what the server saw.
    expect(sent + waited).toBe(api.requests);
    expect(waited).toBeGreaterThan(0); // the pauses held some back
    expect(sum(all, METRICS.responses, { ...mine, [ATTRIBUTES.result]: 'throttled' })).toBe(api.throttled);
    expect(snapshot.throttles).toBe(api.throttled);
    expect(sum(all, METRICS.cuts, mine)).toBe(snapshot.cuts);
    expect(snapshot.cuts).toBeGreaterThan(0);
    // The time in queue of each request that waited.
    expect(histogram(all, METRICS.timeInQueue, mine).count).toBe(waited);
    expect(gauge(all, METRICS.rate, mine)).toBe(snapshot.rate);
    expect(gauge(all, METRICS.acceptedRate, mine)).toBe(snapshot.acceptedRate);
    expect(sum(all, METRICS.queuedRequests, mine)).toBe(0);
    const pauses = sum(all, METRICS.pauses, mine);
    expect(pauses).toBeGreaterThan(0);
    const pauseLengths = histogram(all, METRICS.pauseDuration, mine);
    expect(pauseLengths.count).toBe(pauses);
    expect(pauseLengths.max).toBeLessThanOrEqual(0.02);
    // Units and descriptions as documented.
    expect(all.get(METRICS.timeInQueue)?.descriptor.unit).toBe('s');
    expect(all.get(METRICS.rate)?.descriptor.unit).toBe('{unit}/min');
    expect(all.get(METRICS.requests)?.descriptor.unit).toBe('{request}');
  });

  it('records the interceptor, wrap and a shared budget, each under its own name', async () => {
    const api = await server({ capacity: 3, retryAfter: '0' });
    handle = enableMetrics({ meterProvider: provider });
    const rl = adaptiveRateLimit({
      limiters: { api: { origins: [api.origin], initialUnitsPerMinute: 600_000, controller: 'aimd' } },
    });
    const agent = new Agent().compose(rl);
    cleanups.push(
      () => agent.close(),
      () => rl.close(),
    );
    for (let i = 0; i < 5; i++) {
      const { statusCode, body } = await request(`${api.origin}/i${i}`, { dispatcher: agent });
      await body.text();
      expect([200, 429]).toContain(statusCode);
    }

    const billing = new AdaptiveRateLimiter({
      name: 'billing',
      controller: 'cubic',
      initialUnitsPerMinute: 6_000,
    });
    cleanups.push(() => billing.close());
    const call = wrap(billing, async (n: number) => n * 2);
    expect(await Promise.all([call(1), call(2)])).toEqual([2, 4]);

    const budget = createSharedBudget({
      store: new MemoryBudgetStore(),
      name: 'github',
      initialUnitsPerMinute: 600,
    });
    cleanups.push(() => budget.close());
    (await budget.acquire()).success();

    const all = await collect();
    const api1 = { [ATTRIBUTES.limiter]: 'api', 'server.address': '127.0.0.1', 'server.port': api.port };
    expect(sum(all, METRICS.requests, api1)).toBe(api.requests);
    expect(sum(all, METRICS.responses, { ...api1, [ATTRIBUTES.controller]: 'aimd' })).toBe(api.throttled);
    expect(api.throttled).toBeGreaterThan(0);

    const mine = { [ATTRIBUTES.limiter]: 'billing', [ATTRIBUTES.controller]: 'cubic' };
    expect(sum(all, METRICS.requests, mine)).toBe(2);
    expect(points(all, METRICS.requests, mine).every((p) => !('server.address' in p.attributes))).toBe(true);
    expect(gauge(all, METRICS.rate, mine)).toBe(billing.snapshot().rate);

    const shared = { [ATTRIBUTES.limiter]: 'github', [ATTRIBUTES.controller]: 'probe' };
    expect(sum(all, METRICS.requests, shared)).toBe(1);
    expect(gauge(all, METRICS.rate, shared)).toBe(budget.limiter.snapshot().rate);
  });

  it('counts rejections by reason, waits, a limiter made before it, and stops on disable()', async () => {
    const clock = new ManualClock();
    // Made before enableMetrics: recorded from its next request on.
    const limiter = new AdaptiveRateLimiter({
      name: 'slow',
      clock,
      initialUnitsPerMinute: 60,
      queueLimit: 1,
      maxWait: 1_500,
    });
    cleanups.push(() => limiter.close());
    (await limiter.acquire()).success(); // before: not counted
    handle = enableMetrics({ meterProvider: provider });

    const queued = limiter.acquire(); // waits a second
    await expect(limiter.acquire()).rejects.toMatchObject({ reason: 'queue-full' });
    let all = await collect();
    const mine = { [ATTRIBUTES.limiter]: 'slow' };
    expect(sum(all, METRICS.queuedRequests, mine)).toBe(1);
    clock.advance(1_000);
    const permit = await queued;
    permit.success();
    all = await collect();
    expect(sum(all, METRICS.requests, { ...mine, [ATTRIBUTES.result]: 'waited' })).toBe(1);
    expect(sum(all, METRICS.requests, { ...mine, [ATTRIBUTES.result]: 'acquired' })).toBe(0);
    expect(
      sum(all, METRICS.requests, {
        ...mine,
        [ATTRIBUTES.result]: 'rejected',
        [ATTRIBUTES.reason]: 'queue-full',
      }),
    ).toBe(1);
    const wait = histogram(all, METRICS.timeInQueue, mine);
    expect(wait.count).toBe(1);
    expect(permit.waitedMs).toBeGreaterThan(0);
    expect(wait.sum).toBe((permit.waitedMs ?? 0) / 1000);

    handle.disable();
    handle.disable(); // idempotent
    expect(limiter.listenerCount('acquired')).toBe(0);
    clock.advance(10_000);
    (await limiter.acquire()).success();
    all = await collect();
    // The SDK may repeat the last observations; none moved.
    expect(sum(all, METRICS.requests, { ...mine, [ATTRIBUTES.result]: 'acquired' })).toBe(0);
    expect(histogram(all, METRICS.timeInQueue, mine).count).toBe(1);
  });

  it("names a partition's limiter by its short id, and each budget of a limiter of several", async () => {
    const api = await server({ capacity: 2, retryAfter: '0' });
    handle = enableMetrics({ meterProvider: provider });
    const limited = rateLimitedFetch({ default: { initialUnitsPerMinute: 600_000 } });
    cleanups.push(() => limited.close());
    // Two credentials: the first uses the origin's limiter, the second a partition's of its own.
    for (const token of ['a', 'b', 'b', 'b']) {
      await (await limited(`${api.origin}/p`, { headers: { authorization: `Bearer ${token}` } })).text();
    }

    const clock = new ManualClock();
    const llm = new AdaptiveRateLimiter({
      name: 'llm',
      clock,
      budgets: { requests: { initialUnitsPerMinute: 60 }, tokens: { initialUnitsPerMinute: 6_000 } },
    });
    cleanups.push(() => llm.close());
    const permit = await llm.acquire(1, { costs: { tokens: 100 } });
    permit.throttled(undefined, undefined, ['tokens']);

    const all = await collect();
    const origin = { 'server.address': '127.0.0.1', 'server.port': api.port };
    const partitioned = points(all, METRICS.requests, origin).filter(
      (p) => p.attributes[ATTRIBUTES.partition] !== undefined,
    );
    expect(partitioned.length).toBeGreaterThan(0);
    const id = String(partitioned[0]?.attributes[ATTRIBUTES.partition]);
    expect(id).not.toMatch(/Bearer|^b$/);
    expect(partitioned[0]?.attributes[ATTRIBUTES.limiter]).toBe(`${api.origin}#${id}`);
    // Every request reached the server through one of the two limiters.
    expect(sum(all, METRICS.requests, origin)).toBe(api.requests);

    const mine = { [ATTRIBUTES.limiter]: 'llm' };
    const snapshot = llm.snapshot();
    for (const budget of ['requests', 'tokens']) {
      expect(gauge(all, METRICS.rate, { ...mine, [ATTRIBUTES.budget]: budget })).toBe(
        snapshot.budgets?.[budget]?.rate,
      );
    }
    // The throttle named the tokens budget: its cut is counted under it.
    expect(snapshot.budgets?.tokens?.cuts).toBe(1);
    expect(sum(all, METRICS.cuts, { ...mine, [ATTRIBUTES.budget]: 'tokens' })).toBe(
      snapshot.budgets?.tokens?.cuts,
    );
    expect(sum(all, METRICS.cuts, { ...mine, [ATTRIBUTES.budget]: 'requests' })).toBe(0);
    // Regression: the budget that did not run out was told "failed", and counted a failed answer.
    const responses = (result: string, budget: string) =>
      sum(all, METRICS.responses, { ...mine, [ATTRIBUTES.budget]: budget, [ATTRIBUTES.result]: result });
    expect(responses('throttled', 'tokens')).toBe(1);
    expect(responses('throttled', 'requests')).toBe(0);
    expect(responses('failed', 'requests')).toBe(0);
    expect(responses('failed', 'tokens')).toBe(0);
  });

  it('names a bad meterProvider', () => {
    expect(() => enableMetrics({ meterProvider: {} as never })).toThrow(InvalidArgumentError);
    expect(() => enableMetrics({ meterProvider: {} as never })).toThrow(/meterProvider/);
  });
});

describe('enableMetrics: bounds and a second call', () => {
  it('leaves out the series of idle limiters past 800 (3,000 origins): no overflow of the SDK, the live ones in', async () => {
    handle = enableMetrics({ meterProvider: provider });
    const registry = new RateLimiterRegistry({ maxOriginLimiters: 10, clock: new ManualClock() });
    cleanups.push(() => registry.close());
    for (let i = 0; i < 3_000; i++) registry.limiterFor(`https://h${i}.example.com`)?.tryAcquire(1);
    const exported = new Set(
      points(await collect(), METRICS.requests).map((p) => p.attributes[ATTRIBUTES.limiter]),
    );
    expect(exported.size).toBeLessThanOrEqual(800);
    expect(exported.has(undefined)).toBe(false); // nothing in the SDK's overflow point
    expect(exported.has('https://h2999.example.com')).toBe(true); // the live ones are counted
  });

  it("names the limiter's controller after update({ controller }) (it kept the first one)", async () => {
    handle = enableMetrics({ meterProvider: provider });
    const limiter = new AdaptiveRateLimiter({ name: 'switched', clock: new ManualClock() });
    await limiter.acquire();
    await collect();
    limiter.update({ controller: 'aimd' });
    await collect(); // the collection after the update reads it
    await limiter.acquire();
    const after = points(await collect(), METRICS.requests, { [ATTRIBUTES.limiter]: 'switched' });
    const controllers = new Set(after.map((p) => p.attributes[ATTRIBUTES.controller]));
    expect(controllers.has('aimd')).toBe(true);
  });

  it('counts each event once when called twice with one provider, until both handles are disabled', async () => {
    const first = enableMetrics({ meterProvider: provider });
    const second = enableMetrics({ meterProvider: provider });
    const limiter = new AdaptiveRateLimiter({ name: 'twice', clock: new ManualClock() });
    await limiter.acquire();
    limiter.pauseFor(50);
    const pauses = points(await collect(), METRICS.pauses, { [ATTRIBUTES.limiter]: 'twice' });
    expect(pauses.map((p) => p.value)).toEqual([1]);
    first.disable();
    limiter.pauseFor(100);
    second.disable();
    limiter.pauseFor(200);
    const after = points(await collect(), METRICS.pauses, { [ATTRIBUTES.limiter]: 'twice' });
    expect(after.map((p) => p.value)).toEqual([2]); // the second handle still counted; none after both
  });
});
