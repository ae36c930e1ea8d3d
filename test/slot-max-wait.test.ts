import type { ServerResponse } from 'node:http';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { ConcurrencyGate } from '../src/http/concurrency.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { runtimeOf } from '../src/http/interceptor.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import { agentWith, get, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';
import { settled } from './helpers/settled.js';

// maxWait bounds a request's whole wait in the limiter: the wait for a maxConcurrent slot as much
// as the wait for units. Real node:http servers hold the slot (a response not started); the
// limiters run on a manual clock, so every wait is stepped by hand and read from state.

/** A server that holds `/slow` until `startSlow()`, and answers anything else 200 at once. */
async function slowFirst() {
  let held: ServerResponse | undefined;
  const server = await serve({
    respond: (req, res) => {
      if (req.url !== '/slow') return false;
      held = res;
      return true;
    },
  });
  return { server, startSlow: () => held?.writeHead(200).end('slow') };
}

function setup(options: { maxWait: number; rate?: number }) {
  const clock = new ManualClock();
  const rates =
    options.rate === undefined
      ? NEVER_BINDS
      : {
          initialUnitsPerMinute: options.rate,
          minUnitsPerMinute: options.rate,
          maxUnitsPerMinute: options.rate,
        };
  const rl = limit({ clock, default: { ...rates, maxConcurrent: 1, maxWait: options.maxWait } });
  return { clock, rl, agent: agentWith(rl) };
}

describe('maxWait bounds the wait for a maxConcurrent slot', () => {
  it('refuses a request still waiting for a slot when maxWait is up (max-wait), not before', async () => {
    const { server, startSlow } = await slowFirst();
    const { clock, rl, agent } = setup({ maxWait: 1_000 });
    const slow = get(agent, `${server.origin}/slow`);
    await server.waitForRequests(1);
    const a = settled(get(agent, `${server.origin}/a`));
    const gate = runtimeOf(rl).gateOf(rl.registry.get(server.origin)!)!;
    await vi.waitFor(() => expect(gate.waiting).toBe(1));

    clock.advance(999);
    await new Promise((resolve) => setImmediate(resolve));
    expect(a.done).toBe(false);
    clock.advance(1);
    await vi.waitFor(() => expect(a.done).toBe(true));

    expect(a.error).toBeInstanceOf(RateLimitRejectedError);
    expect(a.error).toMatchObject({ reason: 'max-wait', code: 'ERR_RATE_LIMIT_MAX_WAIT' });
    expect((a.error as Error).message).toMatch(/maxConcurrent slot.*maxWait 1000 ms/);
    expect(gate.waiting).toBe(0);
    startSlow();
    expect((await slow).body).toBe('slow');
    expect(server.received.map((r) => r.path)).toEqual(['/slow']);
  });

  it('keeps FIFO order: the waiter whose time is not up gets the slot after the one that expired', async () => {
    const { server, startSlow } = await slowFirst();
    const { clock, rl, agent } = setup({ maxWait: 1_000 });
    const slow = get(agent, `${server.origin}/slow`);
    await server.waitForRequests(1);
    const gate = runtimeOf(rl).gateOf(rl.registry.get(server.origin)!)!;
    const a = settled(get(agent, `${server.origin}/a`));
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    clock.advance(500);
    const b = settled(get(agent, `${server.origin}/b`));
    const c = settled(get(agent, `${server.origin}/c`));
    await vi.waitFor(() => expect(gate.waiting).toBe(3));

    clock.advance(500); // a has waited 1000 ms, b and c 500
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(a.error).toMatchObject({ reason: 'max-wait' });
    expect(gate.waiting).toBe(2);

    startSlow();
    await slow;
    await vi.waitFor(() => expect(c.done).toBe(true));
    expect(b.value?.status).toBe(200);
    expect(c.value?.status).toBe(200);
    expect(server.received.map((r) => r.path)).toEqual(['/slow', '/b', '/c']);
  });

  it('counts the slot wait against maxWait for the units: what is left bounds the rate wait', async () => {
    const { server, startSlow } = await slowFirst();
    // 60 a minute: the next unit 1 s after the first. maxWait 800 ms.
    const { clock, rl, agent } = setup({ maxWait: 800, rate: 60 });
    const slow = get(agent, `${server.origin}/slow`);
    await server.waitForRequests(1);
    const gate = runtimeOf(rl).gateOf(rl.registry.get(server.origin)!)!;
    const a = settled(get(agent, `${server.origin}/a`));
    await vi.waitFor(() => expect(gate.waiting).toBe(1));

    clock.advance(600);
    startSlow();
    await slow;
    // 600 ms for the slot, then 400 for the unit: 1000 > 800. It waited past maxWait before.
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(a.error).toBeInstanceOf(RateLimitRejectedError);
    expect(a.error).toMatchObject({ reason: 'max-wait' });
    expect((a.error as Error).message).toMatch(/the 200 ms left of maxWait 800 ms/);
    expect(server.received.map((r) => r.path)).toEqual(['/slow']);
  });

  it('bounds it by timeoutDuration for a fixed-window limiter, refused as its own wait is (timeout)', async () => {
    const { server, startSlow } = await slowFirst();
    const clock = new ManualClock();
    const fixed = new FixedWindowRateLimiter({
      limitForPeriod: 100,
      limitRefreshPeriod: 1_000,
      timeoutDuration: 500,
      clock,
    });
    const rl = limit({ limiters: { api: { origins: [server.origin], limiter: fixed, maxConcurrent: 1 } } });
    const agent = agentWith(rl);
    const slow = get(agent, `${server.origin}/slow`);
    await server.waitForRequests(1);
    const a = settled(get(agent, `${server.origin}/a`));
    await vi.waitFor(() => expect(runtimeOf(rl).gateOf(fixed)?.waiting).toBe(1));
    clock.advance(500);
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(a.error).toMatchObject({ reason: 'timeout', code: 'ERR_RATE_LIMIT_TIMEOUT' });
    expect((a.error as Error).message).toMatch(/no maxConcurrent slot within timeoutDuration 500 ms/);
    startSlow();
    await slow;
  });

  it('refuses through the fetch wrapper over Node’s fetch the same way', async () => {
    const { server, startSlow } = await slowFirst();
    const clock = new ManualClock();
    const limitedFetch = rateLimitedFetch({
      clock,
      default: { ...NEVER_BINDS, maxConcurrent: 1, maxWait: 1_000 },
    });
    const slow = limitedFetch(`${server.origin}/slow`);
    await server.waitForRequests(1);
    const a = settled(limitedFetch(`${server.origin}/a`));
    await vi.waitFor(() => expect(limitedFetch.registry.get(server.origin)).toBeDefined());
    await new Promise((resolve) => setImmediate(resolve));
    clock.advance(1_000);
    await vi.waitFor(() => expect(a.done).toBe(true));
    expect(a.error).toBeInstanceOf(RateLimitRejectedError);
    expect(a.error).toMatchObject({ reason: 'max-wait' });
    startSlow();
    expect(await (await slow).text()).toBe('slow');
    limitedFetch.close();
  });
});

describe('ConcurrencyGate with a bound', () => {
  const bound = (clock: ManualClock, leftMs: number) => ({
    clock,
    leftMs,
    refuse: () => new RateLimitRejectedError('max-wait', 'test', 'too long'),
  });

  it('still drops a waiter whose signal aborts, and its deadline with it', async () => {
    const clock = new ManualClock();
    const gate = new ConcurrencyGate(1);
    expect(gate.tryEnter()).toBe(true);
    const abort = new AbortController();
    const abortee = gate.enter(abort.signal, bound(clock, 1_000));
    const next = gate.enter(undefined, bound(clock, 2_000));
    abort.abort(new Error('gone'));
    await expect(abortee).rejects.toThrow('gone');
    clock.advance(1_500);
    gate.leave();
    const held = await next;
    expect(held.waitedMs).toBe(1_500);
    held.release();
    await new Promise((resolve) => setImmediate(resolve)); // p-queue counts the task done after it
    expect(gate.inFlight).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it('refuses at once a waiter with no time left, and arms no timer for a slot free now', async () => {
    const clock = new ManualClock();
    const gate = new ConcurrencyGate(1);
    const first = await gate.enter(undefined, bound(clock, 0));
    expect(first.waitedMs).toBe(0);
    await expect(gate.enter(undefined, bound(clock, 0))).rejects.toMatchObject({ reason: 'max-wait' });
    expect(gate.waiting).toBe(0);
    expect(clock.pendingTimers).toBe(0);
    first.release();
  });
});
