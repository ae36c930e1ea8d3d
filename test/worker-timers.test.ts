import { AsyncLocalStorage } from 'node:async_hooks';
import { expect, it } from 'vitest';
import { type Clock, ManualClock } from '../src/clock.js';
import type { AdaptiveRateLimiter as Limiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';
import { callsEndingWhenServed, type Kind, limitersInWorker } from './helpers/worker-limiters.js';

// A limiter kept across requests in a Cloudflare Worker (workerd): a timer belongs to the request
// that armed it and ends with it, and a request that waits with no timer of its own is cancelled
// as hung. test/runtimes.test.ts runs it on workerd; here a manual clock whose timers belong to
// requests stands for it. A promise's continuation runs in the request that made it, as on
// workerd (whose V8 tags a promise with its request), where node's AsyncLocalStorage follows it.

/**
 * A manual clock whose timers belong to the request running when they were armed: the one that
 * armed a timer that fired, or that made a promise whose continuation runs.
 */
class RequestClock implements Clock {
  readonly manual = new ManualClock();
  readonly #current = new AsyncLocalStorage<string>();
  readonly #timers = new Map<string, Set<unknown>>();

  now(): number {
    return this.manual.now();
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const request = this.#current.getStore() ?? 'module';
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
    return this.#current.run(request, fn);
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

/** The limiters as a Worker loads them (in `beforeAll`). */
const worker = limitersInWorker();
const { oneASecond } = worker;

function settled(promise: Promise<Permit>): { permit?: Permit; error?: unknown } {
  const state: { permit?: Permit; error?: unknown } = {};
  promise.then(
    (permit) => (state.permit = permit),
    (error: unknown) => (state.error = error),
  );
  return state;
}

/**
 * A first call of request A served, a second of A and a third of B waiting behind it; A's second
 * is served a second later and A ends (with `answer`, each of A's permits told a success first):
 * B keeps a timer of its own throughout, and is served a second after.
 */
async function behindAnEndedRequest(
  clock: RequestClock,
  limiter: { acquire(): Promise<Permit>; close(): void },
  answer: boolean,
): Promise<void> {
  try {
    const first = await clock.in('A', () => limiter.acquire());
    if (answer) first.success();
    const second = settled(clock.in('A', () => limiter.acquire()));
    const third = settled(clock.in('B', () => limiter.acquire()));
    // B waits: it has a timer of its own to wait on (else workerd cancels it as hung).
    expect(clock.pending('B')).toBeGreaterThan(0);
    clock.manual.advance(1000);
    await Promise.resolve();
    expect(second.permit).toBeDefined();
    if (answer) second.permit?.success();
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
}

it("serves a request waiting behind another request's waiter once that request has ended", async () => {
  const clock = new RequestClock();
  // 60 units/min: a grant a second; kept in module scope, across requests.
  const limiter = new worker.AdaptiveRateLimiter({ name: 'worker', initialUnitsPerMinute: 60, clock });
  await behindAnEndedRequest(clock, limiter, true);
});

it("serves a request waiting behind another request's waiter once that request has ended: a fixed window", async () => {
  const clock = new RequestClock();
  // One unit a second.
  await behindAnEndedRequest(clock, oneASecond('window', clock, 10_000), false);
});

/** A {@link RequestClock} that counts the timers armed. */
class CountingClock extends RequestClock {
  armed = 0;

  override setTimeout(fn: () => void, ms: number): unknown {
    this.armed++;
    return super.setTimeout(fn, ms);
  }
}

/** Timers armed to drain a line of `n` calls, one a second, each of a request of its own. */
async function timersToDrain(kind: Kind, n: number): Promise<number> {
  const clock = new CountingClock();
  const limiter = oneASecond(kind, clock, n * 1000 + 1000);
  try {
    await clock.in('first', () => limiter.acquire());
    const waiting = Array.from({ length: n }, (_, i) => settled(clock.in(`r${i}`, () => limiter.acquire())));
    for (let i = 0; i < n; i++) {
      clock.manual.advance(1000);
      await Promise.resolve();
      expect(waiting[i]?.permit).toBeDefined();
    }
    return clock.armed;
  } finally {
    limiter.close();
  }
}

it('arms a few timers a waiting call to drain a line in a Worker, not one a call at each wake', async () => {
  // Each call's timer set for every wake of the limiter's armed 80,999 for 400 calls (N²/2): now a
  // timer each at its predicted turn, and one at the limiter's timer while it is the head (1,599).
  expect(await timersToDrain('line', 400)).toBeLessThanOrEqual(4 * 400);
  expect(await timersToDrain('window', 400)).toBeLessThanOrEqual(4 * 400);
});

it.each(['line', 'window'] as const)(
  "serves every call in order at its turn when each request ends as soon as it is served, the limiter's timer with it (%s)",
  async (kind) => {
    const clock = new RequestClock();
    const limiter = oneASecond(kind, clock, 60_000);
    try {
      await clock.in('first', () => limiter.acquire());
      clock.end('first');
      const waiting = Array.from({ length: 6 }, (_, i) =>
        settled(clock.in(`r${i}`, () => limiter.acquire())),
      );
      for (let i = 0; i < waiting.length; i++) {
        for (let j = i; j < waiting.length; j++) expect(clock.pending(`r${j}`)).toBeGreaterThan(0);
        clock.manual.advance(1000);
        await Promise.resolve();
        // The one whose turn it is, and nobody after it.
        expect(waiting.map((w) => w.permit !== undefined)).toEqual(waiting.map((_, j) => j <= i));
        // It answers at once: the timer it armed for the next turn ends with it.
        clock.end(`r${i}`);
      }
      expect(waiting.every((w) => w.error === undefined)).toBe(true);
    } finally {
      limiter.close();
    }
  },
);

it.each(['line', 'window'] as const)(
  'an abort of the head in a request that then ends hands the head on: the next call is served at that turn (%s)',
  async (kind) => {
    const clock = new RequestClock();
    const limiter = oneASecond(kind, clock, 60_000);
    try {
      await clock.in('first', () => limiter.acquire());
      clock.end('first');
      const controller = new AbortController();
      const head = settled(clock.in('head', () => limiter.acquire(1, { signal: controller.signal })));
      const waiting = Array.from({ length: 3 }, (_, i) =>
        settled(clock.in(`r${i}`, () => limiter.acquire())),
      );
      // The head armed the limiter's timer; it gives up and answers.
      clock.in('head', () => controller.abort(new Error('gave up')));
      // Every microtask runs before the next timer, as in a runtime (a manual clock's advance
      // runs timers with none in between): the window moves its line up in one.
      await new Promise((resolve) => setImmediate(resolve));
      clock.end('head');
      expect(head.error).toBeDefined();
      for (let i = 0; i < waiting.length; i++) {
        for (let j = i; j < waiting.length; j++) expect(clock.pending(`r${j}`)).toBeGreaterThan(0);
        clock.manual.advance(1000);
        await Promise.resolve();
        expect(waiting.map((w) => w.permit !== undefined)).toEqual(waiting.map((_, j) => j <= i));
        clock.end(`r${i}`);
      }
    } finally {
      limiter.close();
    }
  },
);

it('leaves no waiting request without a timer of its own through an abort from the middle of the line, a pause and a deadline', async () => {
  const clock = new RequestClock();
  const limiter = oneASecond('line', clock, 10_000) as Limiter;
  try {
    const first = await clock.in('first', () => limiter.acquire());
    const controller = new AbortController();
    const calls = [
      clock.in('r0', () => limiter.acquire()),
      clock.in('r1', () => limiter.acquire()),
      clock.in('r2', () => limiter.acquire(1, { signal: controller.signal })),
      // A retry with 4,500 ms of its maxWait left: its turn, 4 s away, is within it.
      clock.in('r3', () => limiter.acquire(1, { waitedMs: 5_500 })),
    ];
    const at: (number | undefined)[] = [];
    const outcomes = calls.map((call, i) => {
      const state = settled(call);
      call.then(
        () => (at[i] = clock.now()),
        () => (at[i] = clock.now()),
      );
      return state;
    });
    // r2 gives up from the middle of the line; a 429 pauses the line until 3 s: r3's turn falls
    // past its deadline. Both requests answer then, the timers they armed with them.
    clock.in('r2', () => controller.abort(new Error('gave up')));
    clock.in('first', () => first.throttled(3000));
    await Promise.resolve();
    clock.end('r2');
    clock.end('first');
    for (let t = 500; t <= 12_000; t += 500) {
      for (let i = 0; i < calls.length; i++) {
        if (at[i] !== undefined) clock.end(`r${i}`);
        else expect(clock.pending(`r${i}`), `r${i} at ${t - 500} ms`).toBeGreaterThan(0);
      }
      clock.manual.advance(500);
      await Promise.resolve();
      await Promise.resolve();
    }
    expect(outcomes[0]?.permit).toBeDefined();
    expect(outcomes[1]?.permit).toBeDefined();
    // In order, each at its turn after the pause (the 429 cut the rate to 40 a minute).
    expect(at.slice(0, 2)).toEqual([3000, 4500]);
    expect(outcomes[2]?.error).toBeDefined();
    // Refused at its deadline, by its own timer: the line's was armed by a request that ended.
    expect((outcomes[3]?.error as { reason?: string } | undefined)?.reason).toBe('max-wait');
    expect(at[3]).toBe(4500);
  } finally {
    limiter.close();
  }
});

it('drains a line as fast as its rate rises when each request ends as soon as it is served', async () => {
  const clock = new RequestClock();
  // From 60 units/min, each success raising the rate; every call a request of its own.
  const limiter = new worker.AdaptiveRateLimiter({
    name: 'worker',
    initialUnitsPerMinute: 60,
    maxWait: 600_000,
    clock,
  });
  try {
    clock.in('first', () => limiter.tryAcquire())?.success();
    clock.end('first');
    const n = 200;
    // Each answers at once: the limiter's timer, if its request armed it, ends with it.
    const calls = callsEndingWhenServed(clock, limiter, n);
    // All served within half as long again as a timer of each call at each wake serves them
    // (14.8 s); a call's timer at its turn as predicted when it last woke took 199 s (the rate
    // rose since, and the limiter's timer ended with each request served).
    while (calls.served < n && clock.now() < 22_500) {
      for (let i = calls.served; i < n; i++) expect(clock.pending(`r${i}`), `r${i}`).toBeGreaterThan(0);
      clock.manual.advance(10);
      for (let j = 0; j < 5; j++) await Promise.resolve();
    }
    expect(calls.served).toBe(n);
  } finally {
    limiter.close();
  }
});
