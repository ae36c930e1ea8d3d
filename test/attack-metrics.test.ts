import diagnosticsChannel from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { DIAGNOSTICS_CHANNELS } from '../src/diagnostics.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { kPartitionForOrigin } from '../src/internal.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { LimiterEventMap } from '../src/limiter/events.js';
import { ATTRIBUTES, enableMetrics, METRICS, type MetricsHandle } from '../src/otel/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { otelHarness, points, sum } from './helpers/otel-harness.js';
import { RateLimitedServer } from './helpers/rate-limited-server.js';
import { describeRedis, type RedisServer, withRedisServer } from './helpers/redis-server.js';

// Attacks on the observability surface: metrics, events, registry events, diagnostics.

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

const L = ATTRIBUTES.limiter;
const R = ATTRIBUTES.result;

describe('registry events: every added limiter is told removed when it leaves', () => {
  it("remove(name) tells 'removed' for the named limiter's overflow limiter (<name>#(overflow)) it told 'added'", async () => {
    const ORIGIN = 'https://api.test';
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({
      clock,
      limiters: { api: { origins: [ORIGIN] } },
      maxOriginLimiters: 1,
      maxPausedOrigins: 0,
    });
    const added: string[] = [];
    const removed: string[] = [];
    registry.on('added', (e) => added.push(e.name));
    registry.on('removed', (e) => removed.push(e.name));
    registry[kPartitionForOrigin](ORIGIN, { id: 'first' }); // claims the named limiter
    const p1 = registry[kPartitionForOrigin](ORIGIN, { id: 'p1' });
    (await p1?.limiter?.acquire())?.throttled(60_000); // busy: paused, stays
    registry[kPartitionForOrigin](ORIGIN, { id: 'p2' }); // no room: api#(overflow)
    expect(added).toEqual(['api#p1', 'api#(overflow)']);

    registry.remove('api');
    // Every limiter told added and now gone (closed) is told removed.
    expect(removed.sort()).toEqual(['api', 'api#(overflow)', 'api#p1'].sort());
  });

  it("replace(name) tells 'removed' for the overflow limiter it takes out of the registry", async () => {
    const ORIGIN = 'https://api.test';
    const registry = new RateLimiterRegistry({
      clock: new ManualClock(),
      limiters: { api: { origins: [ORIGIN] } },
      maxOriginLimiters: 1,
      maxPausedOrigins: 0,
    });
    cleanups.push(() => registry.close());
    const removed: string[] = [];
    registry.on('removed', (e) => removed.push(e.name));
    registry[kPartitionForOrigin](ORIGIN, { id: 'first' });
    (await registry[kPartitionForOrigin](ORIGIN, { id: 'p1' })?.limiter?.acquire())?.throttled(60_000);
    registry[kPartitionForOrigin](ORIGIN, { id: 'p2' });
    expect(registry.names()).toContain('api#(overflow)');
    registry.replace('api', { origins: [ORIGIN] });
    expect(registry.names()).not.toContain('api#(overflow)');
    // It left the registry (names() no longer lists it), as api#p1 did: both told removed.
    expect(removed.sort()).toEqual(['api#(overflow)', 'api#p1']);
  });
});

describe('metrics: series kept past 800 (pruning)', () => {
  it('a limiter made again under a pruned name keeps its counts when the old one of that name counts again', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    const old = new AdaptiveRateLimiter({ name: 'twin', clock });
    (await old.acquire()).success(); // series "twin": acquired 1
    // 800 other series: the idle ones (twin's) are left out of the report.
    for (let i = 0; i < 800; i++) {
      const other = new AdaptiveRateLimiter({ name: `filler-${i}`, clock });
      (await other.acquire()).success();
    }
    // A new limiter of the same name (a registry's, made again): its series starts again.
    const fresh = new AdaptiveRateLimiter({ name: 'twin', clock });
    for (let i = 0; i < 5; i++) (await fresh.acquire()).success();
    // The old one (still held by a retry) counts once more.
    (await old.acquire()).success();
    // And the new one goes on.
    for (let i = 0; i < 5; i++) (await fresh.acquire()).success();
    const all = await h.collect();
    const found = points(all, METRICS.requests, { [L]: 'twin', [R]: 'acquired' });
    // 12 grants under the name "twin" (one series, or two whose sum is 12; never fewer than the
    // 11 since it was made again).
    const total = found.reduce((t, p) => t + (p.value as number), 0);
    expect(total).toBeGreaterThanOrEqual(11);
  });
});

describe('metrics: the rate gauges of a name are its newest limiter', () => {
  it('after replace(), the replaced limiter still used by a retry does not report its old rate over the new one', async () => {
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({
      clock,
      limiters: { api: { origins: ['https://api.test'], initialUnitsPerMinute: 600 } },
      default: false,
    });
    cleanups.push(() => registry.close());
    const old = registry.get('api')!;
    handle = enableMetrics({ meterProvider: h.provider });
    const fresh = registry.replace('api', { origins: ['https://api.test'], initialUnitsPerMinute: 6_000 });
    (await fresh.acquire()).success(); // the new limiter serves new requests
    (await old.acquire()).success(); // a retry of a request that held the old one
    const all = await h.collect();
    const rate = points(all, METRICS.rate, { [L]: 'api' });
    expect(rate.map((p) => p.value)).toEqual([fresh.rate]);
  });
});

describe('metrics: a limiter of several budgets', () => {
  it('reports no extra requests series (without server.address) for its other budgets', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({
      clock,
      limiters: { llm: { origins: ['https://llm.test'], api: 'openai' } },
      default: false,
    });
    cleanups.push(() => registry.close());
    const limiter = registry.get('llm')!;
    for (let i = 0; i < 3; i++) (await limiter.acquire(1, { costs: { tokens: 10 } })).success();
    const all = await h.collect();
    const series = points(all, METRICS.requests, { [L]: 'llm' }).map((p) => ({
      ...p.attributes,
      value: p.value,
    }));
    // Every requests series of "llm" names its origin (a named limiter of one exact origin).
    for (const s of series) expect(s).toMatchObject({ 'server.address': 'llm.test' });
    expect(sum(all, METRICS.requests, { [L]: 'llm', [R]: 'acquired' })).toBe(3);
  });
});

describeRedis('diagnostics_channel: a shared budget declared in config', () => {
  let server: RedisServer;
  withRedisServer((started) => ({ server } = started));

  it("publishes the throttles of a config `shared` limiter's local limiter (as of one given as an instance)", async () => {
    const api = await RateLimitedServer.start({ capacity: 0, retryAfter: undefined });
    cleanups.push(() => api.close());
    const limited = rateLimitedFetch({
      limiters: {
        api: {
          origins: [api.origin],
          initialUnitsPerMinute: 60_000,
          shared: { redis: server.url, name: `attack-diag-${process.pid}`, heartbeatInterval: 50 },
        },
      },
      default: false,
      maxAttempts: 1,
    });
    cleanups.push(() => limited.close());
    const messages: unknown[] = [];
    const listener = (message: unknown) => messages.push(message);
    diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNELS.throttle, listener);
    try {
      for (let i = 0; i < 3; i++) {
        const response = await limited(`${api.origin}/x${i}`);
        await response.arrayBuffer();
        expect(response.status).toBe(429);
      }
    } finally {
      diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNELS.throttle, listener);
    }
    const local = limited.registry.get('api');
    expect(local?.snapshot().throttles).toBe(3);
    // Each 429 the local limiter was told is published (the channel carries every throttle).
    expect(messages).toHaveLength(3);
  });
});

describe('every acquire ends in exactly one of acquired, rejected, canceled', () => {
  /** A small seeded PRNG. */
  function rng(seed: number) {
    let x = seed >>> 0 || 1;
    return () => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return (x >>> 0) / 2 ** 32;
    };
  }

  it.each([
    ['one budget', false],
    ['two budgets', true],
  ] as const)(
    '%s: events and the requests counter agree with what the callers got',
    async (_n, twoBudgets) => {
      for (let seed = 1; seed <= 20; seed++) {
        const random = rng(seed);
        handle?.disable();
        await h.provider.shutdown();
        h = otelHarness();
        handle = enableMetrics({ meterProvider: h.provider });
        const clock = new ManualClock();
        const name = `fuzz-${twoBudgets}-${seed}`;
        const limiter = new AdaptiveRateLimiter({
          name,
          clock,
          queueLimit: 4,
          maxWait: 3_000,
          ...(twoBudgets
            ? {
                budgets: {
                  requests: { initialUnitsPerMinute: 120 },
                  tokens: { initialUnitsPerMinute: 1_200 },
                },
              }
            : { initialUnitsPerMinute: 120 }),
        });
        const events = { acquired: 0, rejected: 0, canceled: 0 };
        const order: string[] = [];
        limiter.on('acquired', () => events.acquired++);
        limiter.on('rejected', () => events.rejected++);
        limiter.on('canceled', () => events.canceled++);
        limiter.on('paused', (e) => order.push(`paused ${e.budget}`));
        limiter.on('resumed', (e) => order.push(`resumed ${e.budget}`));
        const got = { granted: 0, refused: 0, aborted: 0 };
        const pending: Promise<unknown>[] = [];
        const controllers: AbortController[] = [];
        let asked = 0;
        for (let step = 0; step < 60; step++) {
          const r = random();
          if (r < 0.5) {
            const ac = new AbortController();
            controllers.push(ac);
            const units = 1 + Math.floor(random() * 2);
            asked++;
            const options = twoBudgets
              ? { signal: ac.signal, costs: { tokens: Math.floor(random() * 30) } }
              : { signal: ac.signal };
            pending.push(
              limiter.acquire(units, options).then(
                (permit) => {
                  got.granted++;
                  const f = random();
                  if (f < 0.1) permit.throttled(random() < 0.5 ? 500 : undefined);
                  else if (f < 0.15) permit.failed();
                  else permit.success();
                },
                (error) => {
                  if (error instanceof RateLimitRejectedError) got.refused++;
                  else got.aborted++;
                },
              ),
            );
          } else if (r < 0.65) {
            controllers[Math.floor(random() * controllers.length)]?.abort(new Error('user abort'));
          } else if (r < 0.7) {
            limiter.pauseFor(Math.floor(random() * 1_500));
          } else {
            clock.advance(Math.floor(random() * 700));
          }
          await Promise.resolve();
          await Promise.resolve();
        }
        limiter.close();
        await Promise.all(pending);
        expect(got.granted + got.refused + got.aborted).toBe(asked);
        expect({ seed, ...events }).toEqual({
          seed,
          acquired: got.granted,
          rejected: got.refused,
          canceled: got.aborted,
        });
        const all = await h.collect();
        const mine = { [L]: name };
        expect({
          seed,
          acquired:
            sum(all, METRICS.requests, { ...mine, [R]: 'acquired' }) +
            sum(all, METRICS.requests, { ...mine, [R]: 'waited' }),
          rejected: sum(all, METRICS.requests, { ...mine, [R]: 'rejected' }),
          canceled: sum(all, METRICS.requests, { ...mine, [R]: 'canceled' }),
        }).toEqual({ seed, acquired: got.granted, rejected: got.refused, canceled: got.aborted });
        // Per budget, paused and resumed alternate, starting with paused (a longer pause may extend one).
        const paused = new Map<string, boolean>();
        for (const [i, e] of order.entries()) {
          const [kind, budget = ''] = e.split(' ');
          if (kind === 'resumed') {
            expect({ seed, i, e, order, paused: paused.get(budget) ?? false }).toEqual({
              seed,
              i,
              e,
              order,
              paused: true,
            });
            paused.set(budget, false);
          } else paused.set(budget, true);
        }
      }
    },
  );
});

describe('a listener that throws', () => {
  it("a throwing 'paused' / 'resumed' / 'rejected' listener leaves the limiter working (warning ARL_LISTENER_THREW)", async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      name: 'thrower',
      clock,
      initialUnitsPerMinute: 60,
      maxWait: 5_000,
    });
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => warnings.push(w.code ?? '');
    process.on('warning', onWarning);
    cleanups.push(() => process.off('warning', onWarning));
    for (const event of ['paused', 'resumed', 'rejected', 'throttled', 'decreased'] as const) {
      limiter.on(event, () => {
        throw new Error(`bad ${event} listener`);
      });
    }
    const seen: (keyof LimiterEventMap)[] = [];
    limiter.on('resumed', () => seen.push('resumed'));
    limiter.on('paused', () => seen.push('paused'));
    (await limiter.acquire()).throttled(1_000);
    const waiting = limiter.acquire();
    clock.advance(1_000);
    clock.advance(2_000);
    await expect(waiting).resolves.toBeDefined();
    limiter.close();
    await expect(limiter.acquire()).rejects.toBeInstanceOf(RateLimitRejectedError);
    expect(seen).toEqual(['paused', 'resumed']);
    await new Promise((r) => setImmediate(r));
    expect(warnings.filter((c) => c === 'ARL_LISTENER_THREW').length).toBeGreaterThanOrEqual(4);
  });
});

describe('metrics: disable()', () => {
  it("leaves no listener on any limiter it watched, a limiter of several budgets' included", async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const clock = new ManualClock();
    const plain = new AdaptiveRateLimiter({ name: 'plain', clock });
    const multi = new AdaptiveRateLimiter({
      name: 'multi',
      clock,
      budgets: { requests: { initialUnitsPerMinute: 600 }, tokens: { initialUnitsPerMinute: 6_000 } },
    });
    (await plain.acquire()).success();
    (await multi.acquire(1, { costs: { tokens: 5 } })).success();
    const events = ['acquired', 'rejected', 'canceled', 'throttled', 'failed', 'paused'] as const;
    expect(events.some((e) => multi.listenerCount(e) > 0)).toBe(true);
    handle.disable();
    handle = undefined;
    for (const limiter of [plain, multi]) {
      for (const e of events)
        expect({ name: limiter.name, e, n: limiter.listenerCount(e) }).toEqual({
          name: limiter.name,
          e,
          n: 0,
        });
    }
    // Nothing more is reported: a new provider's collection after a grant sees no series.
    (await plain.acquire()).success();
    const all = await h.collect();
    expect(points(all, METRICS.requests)).toHaveLength(0);
  });
});
