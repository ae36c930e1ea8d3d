import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { ATTRIBUTES, enableMetrics, METRICS, type MetricsHandle } from '../src/otel/index.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { otelHarness, points, sum } from './helpers/otel-harness.js';

// The metrics where limiters close, are made again, share a name, throw from a listener, never
// send, or grow past the series kept: each case counted wrong or reported a stale value before.

let h = otelHarness();
let handle: MetricsHandle | undefined;
const cleanups: (() => unknown)[] = [];

afterEach(async () => {
  handle?.disable();
  handle = undefined;
  for (const c of cleanups.splice(0).reverse()) await c();
  await h.provider.shutdown();
  h = otelHarness();
});

const result = (r: string, extra: Record<string, unknown> = {}) => ({ [ATTRIBUTES.result]: r, ...extra });
const OVERFLOW = 'otel.metric.overflow';

describe('metrics: a closed limiter after a collection', () => {
  it("counts the 'closed' refusals of a limiter closed before the last collection", async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const limiter = new AdaptiveRateLimiter({ name: 'shut', clock: new ManualClock() });
    (await limiter.acquire()).success();
    limiter.close();
    await expect(limiter.acquire()).rejects.toMatchObject({ reason: 'closed' });
    await h.collect(); // the periodic reader's next export
    await expect(limiter.acquire()).rejects.toMatchObject({ reason: 'closed' });
    const all = await h.collect();
    const closed = { [ATTRIBUTES.limiter]: 'shut', ...result('rejected', { [ATTRIBUTES.reason]: 'closed' }) };
    expect(sum(all, METRICS.requests, closed)).toBe(2);
  });

  it('counts the 429 of a request in flight when its limiter closed before a collection', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const limiter = new AdaptiveRateLimiter({
      name: 'late',
      clock: new ManualClock(),
      initialUnitsPerMinute: 600,
    });
    const permit = await limiter.acquire(); // in flight (a long LLM stream)
    limiter.close(); // the adapter shuts down
    await h.collect();
    permit.throttled(1_000); // its answer comes in
    expect(limiter.snapshot().throttles).toBe(1);
    const all = await h.collect();
    const mine = { [ATTRIBUTES.limiter]: 'late' };
    expect(sum(all, METRICS.responses, { ...mine, ...result('throttled') })).toBe(1);
    expect(sum(all, METRICS.cuts, mine)).toBe(limiter.snapshot().cuts);
  });
});

describe('metrics: every request that asked is counted once', () => {
  it("a request refused its maxConcurrent slot after its units (maxConcurrentPer: 'origin'): acquired and rejected, no answer", async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    let answer: ((r: Response) => void) | undefined;
    const fake = (() => new Promise<Response>((resolve) => (answer = resolve))) as typeof fetch;
    const limited = rateLimitedFetch({
      fetch: fake,
      clock,
      default: { maxConcurrent: 1, maxConcurrentPer: 'origin', maxWait: 1_000 },
    });
    cleanups.push(() => limited.close());
    const origin = 'https://api.example.com';
    const first = limited(`${origin}/a`); // holds the one slot
    await Promise.resolve();
    const second = limited(`${origin}/b`); // its units, then waits for the slot
    const refused = expect(second).rejects.toMatchObject({ reason: 'max-wait' });
    for (let i = 0; i < 5; i++) await Promise.resolve();
    clock.advance(1_001);
    await refused;
    answer?.(new Response('ok'));
    await (await first).text();

    const all = await h.collect();
    const mine = { [ATTRIBUTES.limiter]: origin };
    const seen = {
      acquired: sum(all, METRICS.requests, { ...mine, ...result('acquired') }),
      rejected: sum(all, METRICS.requests, { ...mine, ...result('rejected') }),
      failedResponses: sum(all, METRICS.responses, { ...mine, ...result('failed') }),
    };
    // Two requests, both granted their units (acquired); the second then refused its slot
    // (rejected), unsent. The server answered once, 200: no failed answer (it counted one).
    expect(seen).toEqual({ acquired: 2, rejected: 1, failedResponses: 0 });
  });
});

describe('metrics: listeners and callbacks', () => {
  // An application's 'acquired' listener that throws, added before the metrics' listener (which
  // enableMetrics adds at the first grant it sees) or after it.
  it.each([
    ["counts grants although an application's own 'acquired' listener throws", 'before'],
    ['a throwing listener added after the metrics one does not hide the grants', 'after'],
  ] as const)('%s', async (_name, added) => {
    const name = `noisy-${added}`;
    const limiter = new AdaptiveRateLimiter({ name, clock: new ManualClock() });
    cleanups.push(() => limiter.close());
    const throwing = () =>
      limiter.on('acquired', () => {
        throw new Error('app bug');
      });
    if (added === 'before') throwing();
    handle = enableMetrics({ meterProvider: h.provider });
    (await limiter.acquire()).success(); // metrics' listener now on
    if (added === 'after') throwing();
    for (let i = 0; i < 2; i++) (await limiter.acquire()).success();
    const all = await h.collect();
    expect(sum(all, METRICS.requests, { [ATTRIBUTES.limiter]: name, [ATTRIBUTES.result]: 'acquired' })).toBe(
      3,
    );
  });
});

describe('metrics: attributes', () => {
  it("names a shared budget's custom controller by its name, as a limiter's (docs: a custom controller's `name`)", async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const controller = {
      name: 'mine',
      onThrottled: (s: { rate: number }) => s.rate / 2,
      onSuccess: () => undefined,
    };
    const plain = new AdaptiveRateLimiter({ name: 'plain', controller, clock: new ManualClock() });
    cleanups.push(() => plain.close());
    (await plain.acquire()).success();
    const budget = createSharedBudget({
      name: 'shared-custom',
      store: new MemoryBudgetStore(),
      controller,
      initialUnitsPerMinute: 600,
    });
    cleanups.push(() => budget.close());
    (await budget.acquire()).success();
    const all = await h.collect();
    const controllerOf = (name: string) =>
      new Set(
        points(all, METRICS.requests, { [ATTRIBUTES.limiter]: name }).map(
          (p) => p.attributes[ATTRIBUTES.controller],
        ),
      );
    expect(controllerOf('plain')).toEqual(new Set(['mine']));
    expect(controllerOf('shared-custom')).toEqual(new Set(['mine']));
  });

  it('never puts a credential in an attribute value (partitions by authorization and x-api-key)', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    const fake = (async () => new Response('ok')) as typeof fetch;
    const limited = rateLimitedFetch({ fetch: fake, clock, default: { initialUnitsPerMinute: 600_000 } });
    cleanups.push(() => limited.close());
    const secrets = ['sk-AAAAsecret1', 'sk-BBBBsecret2', 'sk-CCCCsecret3'];
    for (const s of secrets) {
      await (
        await limited('https://api.example.com/x?key=qsecret', { headers: { authorization: `Bearer ${s}` } })
      ).text();
      await (await limited('https://api.example.com/x', { headers: { 'x-api-key': s } })).text();
    }
    const all = await h.collect();
    const values = [...all.values()].flatMap((m) =>
      m.dataPoints.flatMap((p) => Object.values(p.attributes).map(String)),
    );
    expect(values.length).toBeGreaterThan(0);
    expect(
      new Set(points(all, METRICS.requests).map((p) => p.attributes[ATTRIBUTES.partition])).size,
    ).toBeGreaterThan(2);
    for (const v of values) for (const s of [...secrets, 'qsecret']) expect(v).not.toContain(s);
  });
});

describe('metrics: providers and budgets', () => {
  it('two MeterProviders each count every event once', async () => {
    const other = otelHarness();
    cleanups.push(() => other.provider.shutdown());
    handle = enableMetrics({ meterProvider: h.provider });
    const second = enableMetrics({ meterProvider: other.provider });
    cleanups.push(() => second.disable());
    const limiter = new AdaptiveRateLimiter({ name: 'two', clock: new ManualClock() });
    cleanups.push(() => limiter.close());
    (await limiter.acquire()).throttled(100);
    for (const harness of [h, other]) {
      const all = await harness.collect();
      const mine = { [ATTRIBUTES.limiter]: 'two' };
      expect(sum(all, METRICS.requests, mine)).toBe(1);
      expect(sum(all, METRICS.responses, mine)).toBe(1);
      expect(sum(all, METRICS.pauses, mine)).toBe(1);
    }
  });

  it('budgets: a max-wait refusal by the tokens budget counts once; waits in seconds', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    const llm = new AdaptiveRateLimiter({
      name: 'llm',
      clock,
      maxWait: 10_000,
      budgets: { requests: { initialUnitsPerMinute: 6_000 }, tokens: { initialUnitsPerMinute: 6_000 } },
    });
    cleanups.push(() => llm.close());
    (await llm.acquire(1, { costs: { tokens: 800 } })).success(); // 8 s of tokens drawn ahead
    const waiting = llm.acquire(1, { costs: { tokens: 500 } }); // waits ~8 s for the tokens
    // Behind it: ~13 s for the tokens, past maxWait (the requests budget could go at once).
    await expect(llm.acquire(1, { costs: { tokens: 1 } })).rejects.toMatchObject({ reason: 'max-wait' });
    clock.advance(8_000);
    const permit = await waiting;
    permit.success();
    const all = await h.collect();
    const mine = { [ATTRIBUTES.limiter]: 'llm' };
    expect(sum(all, METRICS.requests, { ...mine, [ATTRIBUTES.result]: 'rejected' })).toBe(1);
    expect(sum(all, METRICS.requests, { ...mine, [ATTRIBUTES.result]: 'waited' })).toBe(1);
    expect(sum(all, METRICS.requests, mine)).toBe(3);
    const hist = points(all, METRICS.timeInQueue, mine)[0]?.value as { sum: number; count: number };
    expect(hist.count).toBe(1);
    expect(hist.sum).toBe((permit.waitedMs ?? 0) / 1000);
    expect(hist.sum).toBeGreaterThan(7); // seconds, not ms
    expect(hist.sum).toBeLessThan(9);
  });
});

describe('metrics: gauges of limiters that are gone', () => {
  it('reports no rate for a limiter closed before the collection', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const limiter = new AdaptiveRateLimiter({
      name: 'gone',
      clock: new ManualClock(),
      initialUnitsPerMinute: 600,
    });
    (await limiter.acquire()).success();
    limiter.close();
    const all = await h.collect();
    expect(points(all, METRICS.rate, { [ATTRIBUTES.limiter]: 'gone' })).toEqual([]);
  });

  it("reports the re-made origin limiter's rate, not the one of the limiter the registry dropped", async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({ maxOriginLimiters: 1, clock });
    cleanups.push(() => registry.close());
    const a = 'https://a.example.com';
    const old = registry.limiterFor(a); // kept here as the heap keeps it until a major GC
    (await old?.acquire())?.throttled(); // a 429: the unlimited limiter learns a rate
    clock.advance(600_000); // its crowd-wait pause is long over
    const oldRate = old?.snapshot().rate;
    expect(Number.isFinite(oldRate)).toBe(true);
    (await registry.limiterFor('https://b.example.com')?.acquire())?.success(); // a is dropped
    const fresh = registry.limiterFor(a);
    expect(fresh).not.toBe(old);
    (await fresh?.acquire())?.success();
    expect(old?.snapshot().closed).toBe(false);
    const all = await h.collect();
    const reported = points(all, METRICS.rate, { [ATTRIBUTES.limiter]: a }).map((p) => p.value);
    // The origin's limiter now is `fresh` (unlimited again: no rate.current, as documented).
    expect({ old: oldRate, fresh: fresh?.snapshot().rate, reported }).toEqual({
      old: oldRate,
      fresh: Number.POSITIVE_INFINITY,
      reported: [],
    });
  });
});

describe('metrics: series past 800 and a limiter made again', () => {
  it('a limiter the registry made again for an origin continues its series', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const registry = new RateLimiterRegistry({ maxOriginLimiters: 10, clock: new ManualClock() });
    cleanups.push(() => registry.close());
    const a = 'https://a.example.com';
    for (let i = 0; i < 5; i++) registry.limiterFor(a)?.tryAcquire(1);
    const first = registry.limiterFor(a);
    for (let i = 0; i < 20; i++) registry.limiterFor(`https://h${i}.example.com`)?.tryAcquire(1);
    registry.limiterFor(a)?.tryAcquire(1);
    expect(registry.limiterFor(a)).not.toBe(first); // dropped and made again
    const mine = { [ATTRIBUTES.limiter]: a, [ATTRIBUTES.result]: 'acquired' };
    expect(sum(await h.collect(), METRICS.requests, mine)).toBe(6);
  });

  it('leaves out the queued_requests and rate series of idle limiters too (2,500 live partitions)', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    const live: AdaptiveRateLimiter[] = [];
    for (let i = 0; i < 2_500; i++) {
      const limiter = new AdaptiveRateLimiter({ name: `p${i}`, clock, initialUnitsPerMinute: 600 });
      limiter.tryAcquire(1);
      live.push(limiter);
    }
    cleanups.push(() => {
      for (const l of live) l.close();
    });
    const all = await h.collect();
    const overflowed = [METRICS.queuedRequests, METRICS.rate, METRICS.rateLimit].map(
      (name) => [name, points(all, name, { [OVERFLOW]: true }).length] as const,
    );
    expect(overflowed.filter(([, n]) => n > 0)).toEqual([]);
  });
});

describe('metrics: two live limiters under one name', () => {
  it('reports the queued requests of both (the requests counter already adds them up)', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    // Two unnamed limiters (both 'default'), each with one request queued behind a pause.
    const one = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60 });
    const two = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60 });
    cleanups.push(
      () => one.close(),
      () => two.close(),
    );
    for (const l of [one, two]) {
      (await l.acquire()).success();
      void l.acquire().catch(() => undefined);
    }
    expect(one.snapshot().queued + two.snapshot().queued).toBe(2);
    const all = await h.collect();
    const mine = { [ATTRIBUTES.limiter]: 'default' };
    expect(sum(all, METRICS.requests, mine)).toBe(2); // both counted into one series
    expect(sum(all, METRICS.queuedRequests, mine)).toBe(2); // and both queues
  });
});
