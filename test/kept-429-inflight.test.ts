import { Agent, type Dispatcher, request, fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { advanceUntil, limit, throttleThenHold } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// A retry that REACHED the server (its request written, the server working on it) when the app
// destroys its Agent: undici fails it with ClientDestroyedError (UND_ERR_DESTROYED), the same code
// a dispatch to a destroyed Agent gets. The kept 429 must not stand in for an answer to a request
// the server has received (a POST it may have done).

describe('kept 429: the kept 429 and a retry destroyed in flight', () => {
  it('interceptor: a POST whose retry reached the server, then agent.destroy(): the caller gets the destroy error, not the stale 429', async () => {
    const { server, held } = await throttleThenHold(1);
    const clock = new ManualClock();
    const rl = limit({ clock });
    const agent = new Agent().compose(rl) as Dispatcher;

    let outcome: { status?: number; error?: unknown } | undefined;
    request(`${server.origin}/orders`, { dispatcher: agent, method: 'POST', body: 'create order 42' }).then(
      async (r) => {
        outcome = { status: r.statusCode };
        await r.body.text();
      },
      (error: unknown) => (outcome = { error }),
    );
    await advanceUntil(clock, () => held.length === 1, 'the retry to reach the server');
    expect(server.received.map((r) => r.body)).toEqual(['create order 42', 'create order 42']);

    await agent.destroy(); // the app shuts down while the retry is being worked on
    await until(() => outcome !== undefined, 'the outcome');
    // The server has the retry: a 429 tells the caller "not done", which is false.
    expect(outcome?.status).toBeUndefined();
    expect((outcome?.error as { code?: string } | undefined)?.code).toBe('UND_ERR_DESTROYED');
  });

  it('fetch wrapper: a POST whose retry reached the server, then agent.destroy(): the fetch rejects, it does not resolve with the stale 429', async () => {
    const { server, held } = await throttleThenHold(1);
    const clock = new ManualClock();
    const agent = new Agent();
    const f = rateLimitedFetch({
      clock,
      fetch: (input, init) =>
        undiciFetch(input as string, { ...(init as object), dispatcher: agent }) as never,
    });

    let outcome: { status?: number; error?: unknown } | undefined;
    f(`${server.origin}/orders`, { method: 'POST', body: 'create order 42' }).then(
      (r) => (outcome = { status: r.status }),
      (error: unknown) => (outcome = { error }),
    );
    await advanceUntil(clock, () => held.length === 1, 'the retry to reach the server');
    await agent.destroy();
    await until(() => outcome !== undefined, 'the outcome');
    f.close();
    expect(outcome?.status).toBeUndefined();
    expect(outcome?.error).toBeInstanceOf(Error);
  });
});
