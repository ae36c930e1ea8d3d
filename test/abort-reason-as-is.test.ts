import type { ServerResponse } from 'node:http';
import { Agent, request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { agentWith, cleanups, limit, serve } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

// undici hands a caller the reason its signal was aborted with, whatever it is (a string, a
// number, an object): `request()` rejects with that value. Through the interceptor it must be the
// same value, while the request waits for its units and while it is in flight, not an Error made
// of its text.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("an abort reason that is not an Error reaches undici's caller as it is", () => {
  it.each<[string, unknown]>([
    ['a string', 'shutting down'],
    ['a number', 42],
    ['an object', { why: 'user left' }],
  ])('%s: without the interceptor, waiting for units, in flight', async (_, reason) => {
    const held: ServerResponse[] = [];
    const server = await serve({
      respond: (_req, res) => {
        held.push(res); // never answered: in flight until aborted
        return true;
      },
    });
    cleanups.push(() => {
      for (const res of held) res.destroy();
    });
    const plain = new Agent();
    cleanups.push(() => plain.destroy());

    // undici alone.
    const bare = new AbortController();
    const direct = settled(request(`${server.origin}/direct`, { dispatcher: plain, signal: bare.signal }));
    await server.waitForRequests(1);
    bare.abort(reason);
    await expect.poll(() => direct.done).toBe(true);
    expect(direct.error).toBe(reason);

    const clock = new ManualClock();
    const rl = limit({ clock, default: { initialUnitsPerMinute: 60, slowStart: false } });
    const agent = agentWith(rl);
    const limiter = rl.registry.limiterFor(server.origin) as AdaptiveRateLimiter;
    expect(limiter.tryAcquire()).toBeDefined();

    // Waiting for its units.
    const waitingAbort = new AbortController();
    const waiting = settled(
      request(`${server.origin}/waiting`, { dispatcher: agent, signal: waitingAbort.signal }),
    );
    await flush();
    expect(limiter.snapshot().queued).toBe(1);
    waitingAbort.abort(reason);
    await expect.poll(() => waiting.done).toBe(true);
    expect(waiting.error).toBe(reason);

    // In flight.
    clock.advance(1_000);
    const flightAbort = new AbortController();
    const flight = settled(
      request(`${server.origin}/flight`, { dispatcher: agent, signal: flightAbort.signal }),
    );
    await server.waitForRequests(2);
    flightAbort.abort(reason);
    await expect.poll(() => flight.done).toBe(true);
    expect(flight.error).toBe(reason);
  });
});
