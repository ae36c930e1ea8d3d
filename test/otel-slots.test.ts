import { Agent, type Dispatcher, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { ATTRIBUTES, enableMetrics, METRICS, type MetricsHandle } from '../src/otel/index.js';
import { cleanups, holdingServer, limit } from './helpers/interceptor-fixtures.js';
import { otelHarness, points } from './helpers/otel-harness.js';
import { until } from './helpers/rate-limited-server.js';

// Requests waiting for a `maxConcurrent` slot of the HTTP adapters are not in the limiter's line
// (queued_requests): `slot.queued_requests` counts them, under the limiter whose slots they wait for.

const h = otelHarness();
let handle: MetricsHandle | undefined;
afterEach(() => {
  handle?.disable();
  handle = undefined;
});

describe('metrics: waits for a maxConcurrent slot', () => {
  it('counts the requests waiting for a slot, apart from those waiting for units', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const { server, held } = await holdingServer();
    const rl = limit({ limiters: { api: { origins: [server.origin], maxConcurrent: 1 } }, default: false });
    const agent = new Agent().compose(rl) as Dispatcher;
    cleanups.push(() => agent.close());
    const calls = [1, 2, 3].map(() =>
      request(`${server.origin}/slow`, { dispatcher: agent }).then((r) => r.body.text()),
    );
    await until(() => held.length === 1, 'one request at the server, two waiting for its slot');
    const mine = { [ATTRIBUTES.limiter]: 'api' };
    const read = async () => {
      const all = await h.collect();
      const value = (name: string) => points(all, name, mine).map((p) => p.value);
      return { slots: value(METRICS.slotQueuedRequests), units: value(METRICS.queuedRequests) };
    };
    expect(await read()).toEqual({ slots: [2], units: [0] });

    for (let i = 0; i < 3; i++) {
      await until(() => held.length === i + 1, 'the next request at the server');
      held[i]?.end('done');
    }
    await Promise.all(calls);
    expect(await read()).toEqual({ slots: [0], units: [0] });
  });

  it('a limiter with no maxConcurrent reports no slot series', async () => {
    handle = enableMetrics({ meterProvider: h.provider });
    const { server } = await holdingServer();
    const rl = limit({ limiters: { plain: { origins: [server.origin] } }, default: false });
    const agent = new Agent().compose(rl) as Dispatcher;
    cleanups.push(() => agent.close());
    await (await request(`${server.origin}/a`, { dispatcher: agent })).body.text();
    const all = await h.collect();
    expect(points(all, METRICS.slotQueuedRequests, { [ATTRIBUTES.limiter]: 'plain' })).toEqual([]);
    expect(points(all, METRICS.queuedRequests, { [ATTRIBUTES.limiter]: 'plain' })).toHaveLength(1);
  });
});
