import diagnosticsChannel from 'node:diagnostics_channel';
import type { ServerResponse } from 'node:http';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { attachDiagnostics, DIAGNOSTICS_CHANNELS } from '../src/diagnostics.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { ConcurrencyGate } from '../src/http/concurrency.js';
import { runtimeOf } from '../src/http/interceptor.js';
import { kHeldDeadlines } from '../src/internal.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import { agentWith, cleanups, get, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';

// Two leaks. A maxConcurrent gate kept the deadline of every waiter that left (aborted, or given
// its slot) until the timer or the head of the line reached it: a long line of aborted waits at a
// full gate stayed in memory until maxWait, and the timer stayed armed for a waiter gone. And a
// limiter's name, masked in metrics and NODE_DEBUG lines, went as given into a refusal's
// `limiter`, the events and the diagnostics channels' payloads. Time is a manual clock throughout.

/** A ManualClock that tells when each of its armed timers is due. */
class DueClock extends ManualClock {
  readonly #due = new Map<unknown, number>();

  override setTimeout(fn: () => void, ms: number): unknown {
    const handle = super.setTimeout(() => {
      this.#due.delete(handle);
      fn();
    }, ms);
    this.#due.set(handle, this.now() + Math.max(0, ms));
    return handle;
  }

  override clearTimeout(handle: unknown): void {
    this.#due.delete(handle);
    super.clearTimeout(handle);
  }

  /** When the armed timers are due, earliest first. */
  get due(): number[] {
    return [...this.#due.values()].sort((a, b) => a - b);
  }
}

const bound = (clock: ManualClock, leftMs: number) => ({
  clock,
  leftMs,
  refuse: () => new RateLimitRejectedError('max-wait', 'test', 'too long'),
});

describe('a maxConcurrent gate’s deadlines', () => {
  it('holds none for a thousand waits aborted behind a waiter at a full gate, and one timer, for that waiter', async () => {
    const clock = new DueClock();
    const gate = new ConcurrencyGate(1);
    expect(gate.tryEnter()).toBe(true);
    const head = gate.enter(undefined, bound(clock, 1_000)).catch((e: unknown) => e);
    const reason = new Error('gave up');
    const aborted: Promise<unknown>[] = [];
    for (let i = 0; i < 1_000; i++) {
      const controller = new AbortController();
      aborted.push(gate.enter(controller.signal, bound(clock, 1_000)).catch((e: unknown) => e));
      controller.abort(reason);
    }
    expect(new Set(await Promise.all(aborted))).toEqual(new Set([reason]));

    expect(gate.waiting).toBe(1);
    expect(gate[kHeldDeadlines]).toBe(1);
    expect(clock.due).toEqual([1_000]);
    clock.advance(1_000);
    expect(await head).toMatchObject({ reason: 'max-wait' });
    expect(gate[kHeldDeadlines]).toBe(0);
    expect(clock.due).toEqual([]);
    gate.leave();
  });

  it('moves the timer to the next waiter when the earliest is aborted or given its slot, and stops it when none is left', async () => {
    const clock = new DueClock();
    const gate = new ConcurrencyGate(1);
    expect(gate.tryEnter()).toBe(true);
    const abortA = new AbortController();
    const a = gate.enter(abortA.signal, bound(clock, 1_000)).catch((e: unknown) => e); // due 1000
    clock.advance(500);
    const b = gate.enter(undefined, bound(clock, 1_000)); // due 1500
    clock.advance(200);
    const abortC = new AbortController();
    const c = gate.enter(abortC.signal, bound(clock, 1_000)).catch((e: unknown) => e); // due 1700
    // A retry, with less of maxWait left: its deadline goes between a's and b's.
    const d = gate.enter(undefined, bound(clock, 600)).catch((e: unknown) => e); // due 1300
    expect(clock.due).toEqual([1_000]);
    expect(gate[kHeldDeadlines]).toBe(4);

    abortA.abort(new Error('a gave up'));
    expect(await a).toMatchObject({ message: 'a gave up' });
    expect(clock.due).toEqual([1_300]);

    clock.advance(600); // 1300: d's time is up
    expect(await d).toMatchObject({ reason: 'max-wait' });
    expect(clock.due).toEqual([1_500]);

    gate.leave(); // b gets the slot
    const held = await b;
    expect(held.waitedMs).toBe(800);
    expect(clock.due).toEqual([1_700]);
    expect(gate[kHeldDeadlines]).toBe(1);

    abortC.abort(new Error('c gave up'));
    expect(await c).toMatchObject({ message: 'c gave up' });
    expect(clock.due).toEqual([]);
    expect(clock.pendingTimers).toBe(0);
    expect(gate[kHeldDeadlines]).toBe(0);
    held.release();
  });
});

// What redactText masks in a name: a vendor's key, a bearer token, a URL's password.
const SECRET_NAMES = [
  ['an API key', 'openai sk-proj-Zq81kLmN0pQrStUvWx', 'Zq81kLmN0pQrStUvWx'],
  ['a bearer token', 'customer Bearer eyJhbGciOiJIUzI1NiJ9tok', 'eyJhbGciOiJIUzI1NiJ9tok'],
  ['a URL password', 'https://acme:pa55w0rd-Xy@api.example.com', 'pa55w0rd-Xy'],
] as const;

/** Every message published on the library's diagnostics channels until the test ends. */
function published(): unknown[] {
  const seen: unknown[] = [];
  const listen = (message: unknown) => seen.push(message);
  for (const channel of Object.values(DIAGNOSTICS_CHANNELS)) diagnosticsChannel.subscribe(channel, listen);
  cleanups.push(() => {
    for (const channel of Object.values(DIAGNOSTICS_CHANNELS))
      diagnosticsChannel.unsubscribe(channel, listen);
  });
  return seen;
}

describe('a limiter’s name that holds a secret', () => {
  it.each(SECRET_NAMES)(
    'is masked (%s) in a refusal, its events, the diagnostics channels and snapshot()',
    async (_, name, secret) => {
      const seen = published();
      const clock = new ManualClock();
      const limiter = new AdaptiveRateLimiter({ name, clock, initialUnitsPerMinute: 60, maxWait: 1_000 });
      attachDiagnostics(limiter);
      const events: unknown[] = [];
      for (const event of ['throttled', 'decreased', 'paused', 'rejected', 'acquired'] as const)
        limiter.on(event, (e) => events.push(e));

      limiter.tryAcquire()?.throttled(5_000); // throttle, rate, pause
      const error = await limiter.acquire().catch((e: unknown) => e); // paused 5 s: past maxWait

      expect(error).toBeInstanceOf(RateLimitRejectedError);
      const refused = error as RateLimitRejectedError;
      expect(refused.reason).toBe('max-wait');
      expect(refused.limiter).not.toContain(secret);
      expect(refused.limiter).toContain('***');
      expect(refused.message).not.toContain(secret);
      expect(seen).toHaveLength(4); // pause, rate, throttle, reject
      for (const message of seen) expect((message as { limiter: string }).limiter).toBe(refused.limiter);
      expect(JSON.stringify(seen)).not.toContain(secret);
      expect(events.map((e) => (e as { limiter: string }).limiter)).toEqual(
        events.map(() => refused.limiter),
      );
      expect(JSON.stringify(events)).not.toContain(secret);
      expect(limiter.snapshot().name).toBe(refused.limiter);
      // What you gave it, and look it up by, is kept.
      expect(limiter.name).toBe(name);
      limiter.close();
    },
  );

  it('is masked in a fixed-window limiter’s refusal and its events', async () => {
    const [, name, secret] = SECRET_NAMES[0];
    const limiter = new FixedWindowRateLimiter({
      name,
      clock: new ManualClock(),
      limitForPeriod: 1,
      limitRefreshPeriod: 60_000,
      timeoutDuration: 1_000,
    });
    const events: unknown[] = [];
    limiter.on('rejected', (e) => events.push(e));
    await limiter.acquire();
    const error = (await limiter.acquire().catch((e: unknown) => e)) as RateLimitRejectedError;
    expect(error).toMatchObject({ reason: 'timeout' });
    expect(error.limiter).not.toContain(secret);
    expect(error.message).not.toContain(secret);
    expect(JSON.stringify([events, limiter.snapshot()])).not.toContain(secret);
    expect(limiter.name).toBe(name);
  });

  it('is masked in the refusal of a maxConcurrent slot through the interceptor, for a partition named after a key', async () => {
    const [, customer, secret] = SECRET_NAMES[0];
    let held: ServerResponse | undefined;
    const server = await serve({
      respond: (req, res) => {
        if (req.url !== '/slow') return false;
        held = res;
        return true;
      },
    });
    const seen = published();
    const clock = new ManualClock();
    const tokenA = { authorization: 'Bearer customer-a-0123456789abcdef' };
    const tokenB = { authorization: 'Bearer customer-b-fedcba9876543210' };
    const rl = limit({
      clock,
      default: { ...NEVER_BINDS, maxConcurrent: 1, maxWait: 1_000 },
      partitionName: (r) => (r.headers.authorization === tokenB.authorization ? customer : undefined),
    });
    const agent = agentWith(rl);
    // A failed test's held answer ends before the agent closes.
    cleanups.push(() => {
      if (held !== undefined && !held.headersSent) held.writeHead(200).end();
    });
    // The first credential's requests go through the origin's own limiter; the second gets one of its own.
    expect((await get(agent, `${server.origin}/a`, { headers: tokenA })).status).toBe(200);
    const slow = get(agent, `${server.origin}/slow`, { headers: tokenB });
    await server.waitForRequests(2);
    const waiting = get(agent, `${server.origin}/b`, { headers: tokenB }).catch((e: unknown) => e);
    const limiter = rl.registry
      .names()
      .map((n) => rl.registry.get(n))
      .find((l) => l?.name.endsWith(`#${customer}`));
    const gate = runtimeOf(rl).gateOf(limiter as AdaptiveRateLimiter) as ConcurrencyGate;
    await vi.waitFor(() => expect(gate.waiting).toBe(1));
    clock.advance(1_000);

    const error = (await waiting) as RateLimitRejectedError;
    expect(error).toBeInstanceOf(RateLimitRejectedError);
    expect(error.message).toMatch(/maxConcurrent slot/);
    expect(error.limiter).not.toContain(secret);
    expect(error.message).not.toContain(secret);
    expect(seen.filter((m) => (m as { reason?: string }).reason === 'max-wait')).toHaveLength(1);
    expect(JSON.stringify(seen)).not.toContain(secret);
    held?.writeHead(200).end('slow');
    expect((await slow).body).toBe('slow');
  });
});
