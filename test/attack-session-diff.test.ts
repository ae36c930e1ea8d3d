import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { ConfigError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { agentWith, cleanups, get, holdingServer, limit } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

// Attacks on the change 6e3b30a..HEAD: real node:http servers on 127.0.0.1, limiters on a
// ManualClock that moves only when told, no sleeps.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Ends every held response after the test (pushed after the agents: run before they close). */
function releaseAfter(...servers: { held: ServerResponse[] }[]) {
  cleanups.push(() => {
    for (const s of servers) for (const res of s.held.splice(0)) res.end('late');
  });
}

describe("#namedGates: a gate carried over by a limiter's name", () => {
  it('remove, then add under the same name for another origin: the new API is not held back by the old one in flight', async () => {
    const a = await holdingServer({ capacity: 1_000 });
    const b = await holdingServer({ capacity: 1_000 });
    const rl = limit({
      clock: new ManualClock(),
      limiters: { api: { origins: [a.server.origin], maxConcurrent: 1, maxWait: 60_000 } },
    });
    const agent = agentWith(rl);
    releaseAfter(a, b);
    const first = get(agent, `${a.server.origin}/slow`);
    await a.server.waitForRequests(1);
    // Not a replace: the old limiter is gone (closed), a different API takes the name.
    expect(rl.registry.remove('api')).toBe(true);
    rl.registry.add('api', { origins: [b.server.origin], maxConcurrent: 1, maxWait: 60_000 });
    const other = settled(get(agent, `${b.server.origin}/fast`));
    for (let i = 0; i < 30 && !other.done; i++) await flush();
    // B's request waits for the slot A's request holds (a cap of another API).
    expect(b.server.requests).toBe(1);
    a.held.shift()?.end('done');
    await first;
  });

  it("replace of a named limiter sharing a `limiter` instance with another: after the replace it shares that other one's cap for good", async () => {
    const a = await holdingServer({ capacity: 1_000 });
    const b = await holdingServer({ capacity: 1_000 });
    const clock = new ManualClock();
    const shared = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600_000 });
    const own = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600_000 });
    cleanups.push(
      () => shared.close(),
      () => own.close(),
    );
    const rl = limit({
      clock,
      limiters: {
        a: { origins: [a.server.origin], limiter: shared, maxConcurrent: 1 },
        b: { origins: [b.server.origin], limiter: shared, maxConcurrent: 1 },
      },
    });
    const agent = agentWith(rl);
    releaseAfter(a, b);
    // `a` is routed once (its gate is the shared instance's), then given its own instance.
    expect((await get(agent, `${a.server.origin}/fast`)).status).toBe(200);
    rl.registry.replace('a', { origins: [a.server.origin], limiter: own, maxConcurrent: 1 });
    expect((await get(agent, `${a.server.origin}/fast`)).status).toBe(200);
    // Long after the replace: b holds its one slot.
    const held = get(agent, `${b.server.origin}/slow`);
    await b.server.waitForRequests(1);
    const next = settled(get(agent, `${a.server.origin}/fast2`));
    for (let i = 0; i < 30 && !next.done; i++) await flush();
    // `a` (its own instance now) must not wait for b's slot.
    expect(a.server.requests).toBe(3);
    b.held.shift()?.end('done');
    await held;
  });
});

describe('the (overflow) route looked up at each request', () => {
  it('an origin leaving (overflow) while its requests are in flight there: maxConcurrent: 1 holds (two in flight to it)', async () => {
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({ clock, maxOriginLimiters: 1, default: { maxConcurrent: 1 } });
    cleanups.push(() => registry.close());
    const agent = agentWith(limit({ registry, maxAttempts: 1 }));
    const a = await holdingServer({ capacity: 1_000 });
    const x = await holdingServer({ capacity: 1_000 });
    releaseAfter(a, x);

    const slowA = get(agent, `${a.server.origin}/slow`); // A's limiter busy: no room
    await a.server.waitForRequests(1);
    // X's first request makes (overflow) (a registry change); its second is routed from the cache.
    expect((await get(agent, `${x.server.origin}/warm`)).status).toBe(200);
    const slowX = get(agent, `${x.server.origin}/slow`);
    await x.server.waitForRequests(2);
    expect(x.held.length).toBe(1); // X holds (overflow)'s one slot

    a.held.shift()?.end('done');
    await slowA; // A's limiter is idle now: room
    const again = settled(get(agent, `${x.server.origin}/slow`));
    for (let i = 0; i < 30 && x.held.length < 2 && !again.done; i++) await flush();
    // maxConcurrent: 1 to X, yet a second request goes while the first is in flight.
    expect(x.held.length).toBe(1);
    for (const res of x.held.splice(0)) res.end('done');
    await slowX;
    await again;
  });
});

describe("a named limiter's overflow limiter: names", () => {
  it("refuses a named limiter called '<name>#(overflow)', the name of <name>'s overflow limiter", () => {
    const make = () =>
      new RateLimiterRegistry({
        clock: new ManualClock(),
        limiters: { api: { origins: ['https://a.test'] }, 'api#(overflow)': { origins: ['https://b.test'] } },
      });
    expect(make).toThrow(ConfigError);
    expect(make).toThrow('api#(overflow) is the name of one of the registry');
  });
});
