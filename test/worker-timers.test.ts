import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { type Clock, ManualClock } from '../src/clock.js';
import type { AdaptiveRateLimiter as Limiter } from '../src/limiter/adaptive.js';
import type { FixedWindowRateLimiter as WindowLimiter } from '../src/limiter/fixed-window.js';
import type { Permit } from '../src/limiter/types.js';

// A limiter kept across requests in a Cloudflare Worker (workerd): a timer belongs to the request
// that armed it and ends with it, and a request that waits with no timer of its own is cancelled
// as hung. test/runtimes.test.ts runs it on workerd; here a manual clock whose timers belong to
// requests stands for it.

/** A manual clock whose timers belong to the request running when they were armed. */
class RequestClock implements Clock {
  readonly manual = new ManualClock();
  #current = 'module';
  readonly #timers = new Map<string, Set<unknown>>();

  now(): number {
    return this.manual.now();
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const request = this.#current;
    const handle = this.manual.setTimeout(() => {
      this.#timers.get(request)?.delete(handle);
      this.in(request, fn);
    }, ms);
    const timers = this.#timers.get(request) ?? new Set();
    this.#timers.set(request, timers.add(handle));
    return handle;
  }

  clearTimeout(handle: unknown): void {
    this.manual.clearTimeout(handle);
    for (const timers of this.#timers.values()) timers.delete(handle);
  }

  /** Runs `fn` as request `request` would. */
  in<T>(request: string, fn: () => T): T {
    const before = this.#current;
    this.#current = request;
    try {
      return fn();
    } finally {
      this.#current = before;
    }
  }

  /** Request `request` answered: its timers end with it. */
  end(request: string): void {
    for (const handle of this.#timers.get(request) ?? []) this.manual.clearTimeout(handle);
    this.#timers.delete(request);
  }

  /** Timers of request `request` still to run. */
  pending(request: string): number {
    return this.#timers.get(request)?.size ?? 0;
  }
}

let AdaptiveRateLimiter: typeof Limiter;
let FixedWindowRateLimiter: typeof WindowLimiter;

beforeAll(async () => {
  // The limiter reads where it runs when it loads.
  vi.stubGlobal('navigator', { userAgent: 'Cloudflare-Workers' });
  vi.resetModules();
  ({ AdaptiveRateLimiter } = await import('../src/limiter/adaptive.js'));
  ({ FixedWindowRateLimiter } = await import('../src/limiter/fixed-window.js'));
});

afterAll(() => {
  vi.unstubAllGlobals();
});

function settled(promise: Promise<Permit>): { permit?: Permit; error?: unknown } {
  const state: { permit?: Permit; error?: unknown } = {};
  promise.then(
    (permit) => (state.permit = permit),
    (error: unknown) => (state.error = error),
  );
  return state;
}

it("serves a request waiting behind another request's waiter once that request has ended", async () => {
  const clock = new RequestClock();
  // 60 units/min: a grant a second; kept in module scope, across requests.
  const limiter = new AdaptiveRateLimiter({ name: 'worker', initialUnitsPerMinute: 60, clock });
  try {
    (await clock.in('A', () => limiter.acquire())).success();
    const second = settled(clock.in('A', () => limiter.acquire()));
    const third = settled(clock.in('B', () => limiter.acquire()));
    // B waits: it has a timer of its own to wait on (else workerd cancels it as hung).
    expect(clock.pending('B')).toBeGreaterThan(0);
    clock.manual.advance(1000);
    await Promise.resolve();
    expect(second.permit).toBeDefined();
    second.permit?.success();
    // A answers: the line's timer, armed by A for B's turn, ends with it.
    clock.end('A');
    expect(clock.pending('B')).toBeGreaterThan(0);
    clock.manual.advance(1000);
    await Promise.resolve();
    expect(third.error).toBeUndefined();
    expect(third.permit).toBeDefined();
  } finally {
    limiter.close();
  }
});

it("serves a request waiting behind another request's waiter once that request has ended: a fixed window", async () => {
  const clock = new RequestClock();
  // One unit a second.
  const limiter = new FixedWindowRateLimiter({
    name: 'worker',
    limitForPeriod: 1,
    limitRefreshPeriod: 1000,
    timeoutDuration: 10_000,
    clock,
  });
  try {
    await clock.in('A', () => limiter.acquire());
    const second = settled(clock.in('A', () => limiter.acquire()));
    const third = settled(clock.in('B', () => limiter.acquire()));
    expect(clock.pending('B')).toBeGreaterThan(0);
    clock.manual.advance(1000);
    await Promise.resolve();
    expect(second.permit).toBeDefined();
    clock.end('A');
    expect(clock.pending('B')).toBeGreaterThan(0);
    clock.manual.advance(1000);
    await Promise.resolve();
    expect(third.error).toBeUndefined();
    expect(third.permit).toBeDefined();
  } finally {
    limiter.close();
  }
});
