import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import {
  AdaptiveRateLimitError,
  ConfigError,
  InvalidArgumentError,
  RateLimitRejectedError,
} from '../src/errors.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import { wrap } from '../src/wrap/wrap.js';

type Options = Partial<ConstructorParameters<typeof FixedWindowRateLimiter>[0]>;

/** 2 units per 1,000 ms cycle, waits up to 5,000 ms, on a manual clock starting at 0. */
function setup(options: Options = {}) {
  const clock = new ManualClock();
  const limiter = new FixedWindowRateLimiter({
    name: 'fw',
    limitForPeriod: 2,
    limitRefreshPeriod: 1_000,
    timeoutDuration: 5_000,
    clock,
    ...options,
  });
  /** Clock times at which units were granted, one entry per grant. */
  const grants: number[] = [];
  limiter.on('acquired', () => grants.push(clock.now()));
  return { clock, limiter, grants };
}

/** Observes a promise without awaiting it. */
function track<T>(promise: Promise<T>) {
  const state = { settled: false, value: undefined as T | undefined, error: undefined as unknown };
  promise.then(
    (value) => Object.assign(state, { settled: true, value }),
    (error: unknown) => Object.assign(state, { settled: true, error }),
  );
  return state;
}

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('FixedWindowRateLimiter', () => {
  it('grants limitForPeriod units per cycle and refreshes them at the next cycle', () => {
    const { clock, limiter } = setup();
    expect(limiter.tryAcquire()).toBeDefined();
    expect(limiter.tryAcquire()).toBeDefined();
    expect(limiter.tryAcquire()).toBeUndefined();
    clock.advance(999);
    expect(limiter.tryAcquire()).toBeUndefined();
    clock.advance(1);
    expect(limiter.snapshot()).toMatchObject({ activeCycle: 1, availablePermissions: 2 });
    expect(limiter.tryAcquire(2)).toBeDefined();
  });

  it('counts cycles from its creation, not from time zero', () => {
    const clock = new ManualClock(500);
    const limiter = new FixedWindowRateLimiter({
      limitForPeriod: 1,
      limitRefreshPeriod: 1_000,
      timeoutDuration: 0,
      clock,
    });
    expect(limiter.tryAcquire()).toBeDefined();
    clock.advanceTo(1_000);
    expect(limiter.tryAcquire()).toBeUndefined();
    clock.advanceTo(1_500);
    expect(limiter.tryAcquire()).toBeDefined();
  });

  it('reserves units of later cycles and grants each waiter at the start of its cycle', async () => {
    const { clock, limiter, grants } = setup();
    const permits = Array.from({ length: 7 }, () => limiter.acquire());
    expect(limiter.snapshot()).toMatchObject({ availablePermissions: -5, queued: 5 });
    clock.advance(10_000);
    await Promise.all(permits);
    expect(grants).toEqual([0, 0, 1_000, 1_000, 2_000, 2_000, 3_000]);
    expect(limiter.snapshot()).toMatchObject({ availablePermissions: 2, queued: 0, activeCycle: 10 });
  });

  it('rejects at once with reason timeout when the wait is longer than timeoutDuration, reserving nothing', async () => {
    const { clock, limiter } = setup({ timeoutDuration: 1_500 });
    clock.advance(200);
    const held = [limiter.acquire(), limiter.acquire(), limiter.acquire(), limiter.acquire()];
    const error = await limiter.acquire().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RateLimitRejectedError);
    expect(error).toMatchObject({ reason: 'timeout', limiter: 'fw' });
    expect((error as Error).message).toBe(
      'rate limiter "fw": 1 units would wait 1800 ms for cycle 2, longer than timeoutDuration 1500 ms',
    );
    expect(clock.now()).toBe(200);
    expect(limiter.snapshot()).toMatchObject({ availablePermissions: -2, queued: 2 });
    clock.advance(800);
    await Promise.all(held);
  });

  it('never waits when timeoutDuration is 0', async () => {
    const { limiter, clock } = setup({ timeoutDuration: 0 });
    await limiter.acquire(2);
    await expect(limiter.acquire()).rejects.toMatchObject({ reason: 'timeout' });
    expect(clock.pendingTimers).toBe(0);
    expect(limiter.snapshot()).toMatchObject({ availablePermissions: 0, queued: 0 });
  });

  it('rejects a request larger than limitForPeriod at once, saying it can never be served', async () => {
    const { limiter } = setup({ timeoutDuration: 60_000 });
    await expect(limiter.acquire(3)).rejects.toThrow(
      '3 units can never be served: limitForPeriod is 2 per cycle',
    );
    expect(limiter.tryAcquire(3)).toBeUndefined();
    expect(limiter.snapshot().availablePermissions).toBe(2);
  });

  it('serves waiters first in, first out, a large head before smaller ones behind it', async () => {
    const { clock, limiter } = setup({ limitForPeriod: 3 });
    await limiter.acquire(2);
    const order: string[] = [];
    const big = limiter.acquire(3).then(() => order.push('big'));
    const small = limiter.acquire(1).then(() => order.push('small'));
    expect(limiter.tryAcquire()).toBeUndefined(); // one unit is left, but others wait
    clock.advance(1_000);
    await flush();
    expect(order).toEqual(['big']);
    clock.advance(1_000);
    await Promise.all([big, small]);
    expect(order).toEqual(['big', 'small']);
  });

  it('returns an aborted waiter’s units, so a later caller gets them in its place', async () => {
    const { clock, limiter, grants } = setup({ limitForPeriod: 1 });
    await limiter.acquire();
    const controller = new AbortController();
    const aborted = limiter.acquire(1, { signal: controller.signal });
    const behind = limiter.acquire();
    expect(limiter.snapshot().availablePermissions).toBe(-2);
    controller.abort(new Error('gave up'));
    await expect(aborted).rejects.toThrow('gave up');
    expect(limiter.snapshot()).toMatchObject({ availablePermissions: -1, queued: 1 });
    const later = limiter.acquire();
    clock.advance(2_000);
    await Promise.all([behind, later]);
    expect(grants).toEqual([0, 1_000, 2_000]);
  });

  it('rejects an acquire whose signal is already aborted with the signal’s reason', async () => {
    const { limiter } = setup();
    await expect(limiter.acquire(1, { signal: AbortSignal.abort(new Error('no')) })).rejects.toThrow('no');
    expect(limiter.snapshot().availablePermissions).toBe(2);
  });

  it('applies changeLimitForPeriod from the next cycle only', () => {
    const { clock, limiter } = setup({ limitForPeriod: 5 });
    expect(limiter.tryAcquire(2)).toBeDefined();
    limiter.changeLimitForPeriod(1);
    expect(limiter.snapshot()).toMatchObject({ limitForPeriod: 1, availablePermissions: 3 });
    expect(limiter.tryAcquire(3)).toBeDefined();
    clock.advance(1_000);
    expect(limiter.tryAcquire()).toBeDefined();
    expect(limiter.tryAcquire()).toBeUndefined();
    limiter.changeLimitForPeriod(4);
    expect(limiter.tryAcquire()).toBeUndefined();
    clock.advance(1_000);
    expect(limiter.tryAcquire(4)).toBeDefined();
  });

  it('serves current waiters at the new limit after changeLimitForPeriod', async () => {
    const { clock, limiter, grants } = setup({ limitForPeriod: 4 });
    await limiter.acquire(4);
    const waiting = [limiter.acquire(2), limiter.acquire(2)];
    limiter.changeLimitForPeriod(2);
    clock.advance(5_000);
    await Promise.all(waiting);
    expect(grants).toEqual([0, 1_000, 2_000]);
  });

  it('keeps current waiters when changeTimeoutDuration shortens the timeout, and applies it to new callers', async () => {
    const { clock, limiter } = setup({ limitForPeriod: 1, timeoutDuration: 3_000 });
    await limiter.acquire();
    const waiter = track(limiter.acquire());
    limiter.changeTimeoutDuration(0);
    expect(limiter.snapshot().timeoutDuration).toBe(0);
    await expect(limiter.acquire()).rejects.toMatchObject({ reason: 'timeout' });
    clock.advance(1_000);
    await flush();
    expect(waiter.settled).toBe(true);
    expect(waiter.error).toBeUndefined();
  });

  it('gives a burst after many idle cycles only limitForPeriod units', async () => {
    const { clock, limiter } = setup({ timeoutDuration: 0 });
    clock.advance(1_000_000);
    const results = await Promise.allSettled(Array.from({ length: 5 }, () => limiter.acquire()));
    expect(results.map((r) => r.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'rejected',
      'rejected',
      'rejected',
    ]);
    expect(limiter.snapshot()).toMatchObject({ activeCycle: 1_000, availablePermissions: 0 });
  });

  it('never grants more than limitForPeriod one-unit requests in any cycle', async () => {
    const { clock, limiter, grants } = setup({ limitForPeriod: 3, timeoutDuration: 2_500 });
    const settled: Promise<unknown>[] = [];
    for (let t = 0; t < 20_000; t += 137) {
      clock.advanceTo(t);
      for (let i = 0; i < (t % 5) + 1; i++) settled.push(limiter.acquire().catch(() => undefined));
    }
    clock.runAll();
    await Promise.all(settled);
    const perCycle = new Map<number, number>();
    for (const t of grants)
      perCycle.set(Math.floor(t / 1_000), (perCycle.get(Math.floor(t / 1_000)) ?? 0) + 1);
    expect(Math.max(...perCycle.values())).toBe(3);
  });

  it('never grants more than limitForPeriod units in any cycle to requests of several units', async () => {
    const { clock, limiter } = setup({ limitForPeriod: 5, timeoutDuration: 4_000 });
    const perCycle = new Map<number, number>();
    limiter.on('acquired', ({ units }) => {
      const cycle = Math.floor(clock.now() / 1_000);
      perCycle.set(cycle, (perCycle.get(cycle) ?? 0) + units);
    });
    const settled: Promise<unknown>[] = [];
    for (let t = 0, i = 0; t < 20_000; t += 89, i++) {
      clock.advanceTo(t);
      settled.push(limiter.acquire((i % 4) + 1).catch(() => undefined));
    }
    clock.runAll();
    await Promise.all(settled);
    expect(Math.max(...perCycle.values())).toBe(5);
  });

  it('leaves the rest of a cycle unused when the next request does not fit, and returns it on abort', async () => {
    const { clock, limiter } = setup({ limitForPeriod: 3 });
    await limiter.acquire(2);
    const controller = new AbortController();
    const big = limiter.acquire(3, { signal: controller.signal }).catch((e: unknown) => e);
    expect(limiter.snapshot().availablePermissions).toBe(-3);
    expect(limiter.tryAcquire()).toBeUndefined();
    controller.abort();
    await big;
    expect(limiter.snapshot().availablePermissions).toBe(1);
    expect(limiter.tryAcquire()).toBeDefined();
    clock.advance(1_000);
    expect(limiter.tryAcquire(3)).toBeDefined();
  });

  it('keeps at most one timer pending, and none when idle', async () => {
    const { clock, limiter } = setup();
    expect(clock.pendingTimers).toBe(0);
    await limiter.acquire(2);
    expect(clock.pendingTimers).toBe(0);
    const waiting = Array.from({ length: 8 }, () => limiter.acquire());
    expect(clock.pendingTimers).toBe(1);
    for (let i = 0; i < 4; i++) {
      clock.advance(1_000);
      expect(clock.pendingTimers).toBe(i < 3 ? 1 : 0);
    }
    await Promise.all(waiting);
    const controller = new AbortController();
    limiter.tryAcquire(2);
    const aborted = limiter.acquire(1, { signal: controller.signal }).catch((e: unknown) => e);
    expect(clock.pendingTimers).toBe(1);
    controller.abort();
    await aborted;
    expect(clock.pendingTimers).toBe(0);
  });

  it('rejects every waiter with reason closed on close, and every later acquire; close is idempotent', async () => {
    const { clock, limiter } = setup();
    await limiter.acquire(2);
    const waiting = [limiter.acquire(), limiter.acquire(2)];
    limiter.close();
    limiter.close();
    for (const w of waiting) await expect(w).rejects.toMatchObject({ reason: 'closed', limiter: 'fw' });
    expect(clock.pendingTimers).toBe(0);
    await expect(limiter.acquire()).rejects.toMatchObject({ reason: 'closed' });
    clock.advance(1_000);
    expect(limiter.tryAcquire()).toBeUndefined();
    expect(limiter.snapshot()).toMatchObject({ closed: true, queued: 0 });
  });

  it('emits acquired and rejected with the adaptive limiter’s payloads', async () => {
    const { clock, limiter } = setup({ limitForPeriod: 1, timeoutDuration: 1_000 });
    const events: unknown[] = [];
    limiter.on('acquired', (e) => events.push(['acquired', e]));
    limiter.on('rejected', (e) => events.push(['rejected', { ...e, message: undefined }]));
    clock.advance(300);
    await limiter.acquire();
    const waiter = limiter.acquire();
    await limiter.acquire().catch(() => undefined);
    clock.advance(700);
    await waiter;
    expect(events).toEqual([
      ['acquired', { limiter: 'fw', units: 1, waited: 0 }],
      ['rejected', { limiter: 'fw', units: 1, reason: 'timeout', message: undefined }],
      ['acquired', { limiter: 'fw', units: 1, waited: 700 }],
    ]);
  });

  it('accepts success, throttled and failed on its permits without changing the rate', () => {
    const { limiter } = setup();
    limiter.tryAcquire()?.success(5);
    limiter.tryAcquire()?.throttled(60_000);
    expect(limiter.snapshot()).toMatchObject({ limitForPeriod: 2, availablePermissions: 0 });
    expect(() => limiter.tryAcquire()?.failed()).not.toThrow();
  });

  it('wraps an async function, spacing its calls by cycle', async () => {
    const { clock, limiter } = setup({ limitForPeriod: 1 });
    const calls: number[] = [];
    const double = wrap(limiter, async (n: number) => {
      calls.push(clock.now());
      return n * 2;
    });
    const results = [double(1), double(2), double(3)];
    for (let i = 0; i < 3; i++) {
      await flush();
      clock.advance(1_000);
    }
    await expect(Promise.all(results)).resolves.toEqual([2, 4, 6]);
    expect(calls).toEqual([0, 1_000, 2_000]);
  });

  it.each([
    ['limitForPeriod', 0],
    ['limitForPeriod', 1.5],
    ['limitRefreshPeriod', 0],
    ['limitRefreshPeriod', Number.POSITIVE_INFINITY],
    ['timeoutDuration', -1],
    ['timeoutDuration', Number.NaN],
  ])('refuses %s = %s with a ConfigError naming the field and the value', (field, value) => {
    const options = { limitForPeriod: 1, limitRefreshPeriod: 1_000, timeoutDuration: 0, [field]: value };
    const error = (() => {
      try {
        new FixedWindowRateLimiter(options);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).issues).toEqual([
      expect.objectContaining({ path: field, received: value }),
    ]);
    expect((error as Error).message).toContain(`${field}:`);
  });

  it('refuses invalid values in changeLimitForPeriod and changeTimeoutDuration, keeping the old ones', () => {
    const { limiter } = setup();
    expect(() => limiter.changeLimitForPeriod(0)).toThrow(/limitForPeriod: .*\(received 0\)/);
    expect(() => limiter.changeTimeoutDuration(-5)).toThrow(/timeoutDuration: .*\(received -5\)/);
    expect(() => limiter.changeLimitForPeriod(0)).toThrow(InvalidArgumentError);
    expect(limiter.snapshot()).toMatchObject({ limitForPeriod: 2, timeoutDuration: 5_000 });
  });

  it.each([0, -1, Number.NaN, Number.POSITIVE_INFINITY, '2', null])(
    'refuses units = %s with an InvalidArgumentError naming units',
    async (units) => {
      const { limiter } = setup();
      const rejected = await limiter.acquire(units as number).catch((e: unknown) => e);
      expect(rejected).toBeInstanceOf(InvalidArgumentError);
      expect(rejected).toBeInstanceOf(AdaptiveRateLimitError);
      expect(rejected).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', method: 'acquire', argument: 'units' });
      expect((rejected as InvalidArgumentError).received).toBe(units);
      expect(() => limiter.tryAcquire(units as number)).toThrow(InvalidArgumentError);
      expect(limiter.snapshot()).toMatchObject({ availablePermissions: 2, queued: 0 });
    },
  );
});

/** Units granted per cycle (cycles of 1,000 ms from time 0), from the limiter's `acquired` events. */
function unitsPerCycle(clock: ManualClock, limiter: FixedWindowRateLimiter): Map<number, number> {
  const perCycle = new Map<number, number>();
  limiter.on('acquired', ({ units }) => {
    const cycle = Math.floor(clock.now() / 1_000);
    perCycle.set(cycle, (perCycle.get(cycle) ?? 0) + units);
  });
  return perCycle;
}

describe('FixedWindowRateLimiter reservations after an abort or a limit change', () => {
  it('re-packs the waiters behind an aborted one, so no cycle gets more than limitForPeriod', async () => {
    const { clock, limiter } = setup({ limitForPeriod: 4, timeoutDuration: 60_000 });
    const perCycle = unitsPerCycle(clock, limiter);
    await limiter.acquire(1);
    const controller = new AbortController();
    const aborted = limiter.acquire(4, { signal: controller.signal }).catch((e: unknown) => e);
    const order: number[] = [];
    const behind = [
      limiter.acquire(4).then(() => order.push(4)),
      limiter.acquire(3).then(() => order.push(3)),
    ];
    controller.abort();
    await aborted;
    clock.runAll();
    await Promise.all(behind);
    expect(order).toEqual([4, 3]);
    expect([...perCycle]).toEqual([
      [0, 1],
      [1, 4],
      [2, 3],
    ]);
  });

  it('gives a waiter behind an aborted one the units left in the current cycle', async () => {
    const { clock, limiter, grants } = setup({ limitForPeriod: 4 });
    await limiter.acquire(1);
    const controller = new AbortController();
    const aborted = limiter.acquire(4, { signal: controller.signal }).catch((e: unknown) => e);
    const small = limiter.acquire(2);
    controller.abort();
    await aborted;
    await small;
    expect(grants).toEqual([0, 0]);
    expect(limiter.snapshot()).toMatchObject({ availablePermissions: 1, queued: 0 });
    expect(clock.pendingTimers).toBe(0);
  });

  it('re-packs current waiters when changeLimitForPeriod lowers the limit', async () => {
    const { clock, limiter } = setup({ limitForPeriod: 4, timeoutDuration: 60_000 });
    const perCycle = unitsPerCycle(clock, limiter);
    await limiter.acquire(4);
    const big = limiter.acquire(4).catch((e: unknown) => e);
    const small = limiter.acquire(2);
    limiter.changeLimitForPeriod(3);
    clock.runAll();
    await small;
    expect([...perCycle]).toEqual([
      [0, 4],
      [1, 2],
    ]);
    // A waiter that no cycle at the new limit can hold is rejected, as a new caller would be.
    const error = await big;
    expect(error).toBeInstanceOf(RateLimitRejectedError);
    expect(error).toMatchObject({ reason: 'timeout' });
    expect((error as Error).message).toBe(
      'rate limiter "fw": 4 units can never be served: limitForPeriod is 3 per cycle',
    );
  });

  it('re-packs current waiters when changeLimitForPeriod raises the limit', async () => {
    const { clock, limiter, grants } = setup({ limitForPeriod: 2 });
    await limiter.acquire(2);
    const waiting = [limiter.acquire(2), limiter.acquire(1), limiter.acquire(1), limiter.acquire(2)];
    expect(limiter.snapshot().availablePermissions).toBe(-6);
    limiter.changeLimitForPeriod(4);
    expect(limiter.snapshot().availablePermissions).toBe(-6);
    clock.runAll();
    await Promise.all(waiting);
    expect(grants).toEqual([0, 1_000, 1_000, 1_000, 2_000]);
  });
  it('re-packs the waiters of a cycle its timer missed, instead of granting them all at once', async () => {
    const clock = new ManualClock();
    // A clock whose timers never fire: only calls move the limiter, as under a blocked event loop.
    const stalled = { now: () => clock.now(), setTimeout: () => undefined, clearTimeout: () => {} };
    const limiter = new FixedWindowRateLimiter({
      limitForPeriod: 2,
      limitRefreshPeriod: 1_000,
      timeoutDuration: 10_000,
      clock: stalled,
    });
    const perCycle = unitsPerCycle(clock, limiter);
    await limiter.acquire(2);
    const waiting = [limiter.acquire(2), limiter.acquire(2), limiter.acquire(1)];
    for (const t of [3_500, 4_000, 5_000]) {
      clock.advanceTo(t);
      limiter.snapshot();
    }
    await Promise.all(waiting);
    expect([...perCycle]).toEqual([
      [0, 2],
      [3, 2],
      [4, 2],
      [5, 1],
    ]);
  });
});

type Command =
  | { op: 'acquire'; units: number; abortable: boolean }
  | { op: 'abort'; index: number }
  | { op: 'limit'; limit: number }
  | { op: 'advance'; ms: number };

const MAX_LIMIT = 5;

const command = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant('acquire' as const),
      units: fc.integer({ min: 1, max: MAX_LIMIT }),
      abortable: fc.boolean(),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('abort' as const), index: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('limit' as const),
      limit: fc.integer({ min: 1, max: MAX_LIMIT }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 2_500 }) }),
  },
) as fc.Arbitrary<Command>;

describe('FixedWindowRateLimiter invariants (fast-check)', () => {
  it('never grants more than a cycle’s limit in it, settles every acquire, and serves in FIFO order', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(command, { minLength: 1, maxLength: 80 }),
        fc.integer({ min: 1, max: MAX_LIMIT }),
        fc.integer({ min: 0, max: 8_000 }),
        async (commands, initialLimit, timeoutDuration) => {
          const { clock, limiter } = setup({ limitForPeriod: initialLimit, timeoutDuration });
          const perCycle = unitsPerCycle(clock, limiter);
          /** Limit changes as [time, limit]: a change applies to the cycles that start after it. */
          const changes: [number, number][] = [[Number.NEGATIVE_INFINITY, initialLimit]];
          const limitOf = (cycle: number) => changes.filter(([t]) => t < cycle * 1_000).at(-1)![1];
          const requests: { controller: AbortController | undefined; settled: boolean }[] = [];
          const granted: number[] = [];
          for (const c of commands) {
            if (c.op === 'acquire') {
              const limit = limiter.snapshot().limitForPeriod;
              const units = Math.min(c.units, limit);
              const controller = c.abortable ? new AbortController() : undefined;
              const request = { controller, settled: false };
              const id = requests.push(request) - 1;
              limiter.acquire(units, { signal: controller?.signal }).then(
                () => {
                  request.settled = true;
                  granted.push(id);
                },
                () => {
                  request.settled = true;
                },
              );
            } else if (c.op === 'abort') {
              const abortable = requests.filter((r) => r.controller !== undefined);
              abortable[c.index % Math.max(1, abortable.length)]?.controller?.abort();
            } else if (c.op === 'limit') {
              limiter.changeLimitForPeriod(c.limit);
              changes.push([clock.now(), c.limit]);
            } else {
              clock.advance(c.ms);
            }
          }
          clock.runAll();
          await flush();
          expect(requests.filter((r) => !r.settled)).toEqual([]);
          expect(requests.length).toBe(commands.filter((c) => c.op === 'acquire').length);
          expect(limiter.snapshot().queued).toBe(0);
          for (const [cycle, units] of perCycle) expect(units).toBeLessThanOrEqual(limitOf(cycle));
          expect(granted).toEqual([...granted].sort((a, b) => a - b));
        },
      ),
      { numRuns: 300 },
    );
  });
});
