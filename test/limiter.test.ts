import { describe, expect, it, vi } from 'vitest';
import { type Clock, MAX_TIMER_MS, ManualClock } from '../src/clock.js';
import { keepsNoState, mayReuseState, resolveController } from '../src/controllers/index.js';
import type { RateController, RateControllerState } from '../src/controllers/types.js';
import { ConfigError, InvalidArgumentError, RateLimitRejectedError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import type { Permit } from '../src/limiter/types.js';
import { wrap } from '../src/wrap/wrap.js';

/** Lets resolved promises run; no time passes. */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A limiter on a manual clock; AIMD (the seed's controller), whose cuts these tests count on. */
function setup(options: AdaptiveLimiterOptions = {}) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, controller: 'aimd', ...options });
  return { clock, limiter };
}

/** A controller that records the states it sees and answers as told. */
function spyController(answers: { throttled?: (s: RateControllerState) => number; success?: number } = {}) {
  const states: { kind: 'throttled' | 'success'; state: RateControllerState }[] = [];
  const controller: RateController = {
    onThrottled(state) {
      states.push({ kind: 'throttled', state });
      return answers.throttled ? answers.throttled(state) : state.rate / 2;
    },
    onSuccess(state) {
      states.push({ kind: 'success', state });
      return answers.success;
    },
  };
  return { controller, states };
}

/** Acquires and records when each permit was granted. */
function queue(limiter: AdaptiveRateLimiter, clock: ManualClock, n: number, units = 1) {
  const granted: number[] = [];
  const permits: Permit[] = [];
  const errors: unknown[] = [];
  for (let i = 0; i < n; i++) {
    limiter.acquire(units).then(
      (p) => {
        granted.push(clock.now());
        permits.push(p);
      },
      (e) => errors.push(e),
    );
  }
  return { granted, permits, errors };
}

async function advance(clock: ManualClock, ms: number, step = 50) {
  for (let t = 0; t < ms; t += step) {
    clock.advance(Math.min(step, ms - t));
    await flush();
  }
}

describe('AdaptiveRateLimiter: the bucket and the queue', () => {
  it('paces by default: one request at once, then one per 1/rate, first in first out', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 600 });
    const order: number[] = [];
    for (let i = 0; i < 4; i++) void limiter.acquire().then(() => order.push(i));
    await flush();
    expect(order).toEqual([0]);
    // The first slot took 10 ms of idle credit: the next is 90 ms on, then every 100 ms.
    clock.advance(89);
    await flush();
    expect(order).toEqual([0]);
    clock.advance(1);
    await flush();
    expect(order).toEqual([0, 1]);
    clock.advance(99);
    await flush();
    expect(order).toEqual([0, 1]);
    clock.advance(1);
    await flush();
    expect(order).toEqual([0, 1, 2]);
  });

  it('grants several waiters per timer tick when their slots are closer than a millisecond, and no more; 2 ms of slots a wake below a quarter millisecond apart', async () => {
    // 480,000 units/min: a slot every 0.125 ms (exact in binary floating point).
    const { clock, limiter } = setup({ initialUnitsPerMinute: 480_000 });
    const at: number[] = [];
    limiter.on('acquired', () => at.push(clock.now()));
    for (let i = 0; i < 200; i++) void limiter.acquire();
    await flush();
    // One at once, plus the 4 ms (a timer tick) that idle time may earn at this rate (32 slots,
    // not the 10 ms of lower rates: 80 at once would pass a strict leaky bucket's burst).
    expect(at.length).toBe(33);
    // The first waiter queued alone: its timer wakes at its slot.
    clock.advance(1);
    expect(at.length).toBe(34);
    expect(at[33]).toBe(0.125);
    // With more queued, the timer wakes 2 ms past the head's slot (0.25 ms) and serves every
    // slot due by then at once: 17 slots, 0.25 to 2.25 ms, none before its slot.
    clock.advance(2);
    expect(at.length).toBe(51);
    expect(new Set(at.slice(34))).toEqual(new Set([2.25]));
    // And so on, 2.125 ms of slots a wake: the rate holds, each slot at most 2 ms late.
    clock.advance(15);
    expect(at.length).toBe(33 + 1 + 17 * 8);
    expect(new Set(at.slice(34))).toEqual(new Set([2.25, 4.375, 6.5, 8.625, 10.75, 12.875, 15, 17.125]));
    // The last 30 waiters: the wake at 19.25 ms serves 17; the 13 left fill less than 2 ms of the
    // rate, so each goes at its own slot (19.375 ms on).
    clock.advance(3);
    expect(at.slice(170)).toEqual([
      ...Array(17).fill(19.25),
      19.375,
      19.5,
      19.625,
      19.75,
      19.875,
      20,
      20.125,
      20.25,
      20.375,
      20.5,
      20.625,
      20.75,
      20.875,
    ]);
    limiter.close();
  });

  it('grants a waiter whose slot came by its deadline when a batched wake serves it after the deadline', async () => {
    // 480,000 units/min: slots 0.125 ms apart, served 2 ms of them a wake.
    const { clock, limiter, refused, grants, acquire } = batchedLine();
    // 33 at once (idle credit), 20 queued (slots 0.125 to 2.5 ms), then a retry whose maxWait is
    // nearly spent (its deadline at 3 ms, its slot at 2.625 ms), then 30 more behind it.
    for (let i = 0; i < 53; i++) acquire(1);
    acquire(2, { waitedMs: 60_000 - 3 });
    for (let i = 0; i < 30; i++) acquire(1);
    // Wakes at 0.125 ms (the first queued, alone), 2.25 ms (slots 0.25 to 2.25), then at the
    // retry's deadline (3 ms), which cuts short the wake put off to 4.375 ms (slots from 2.375):
    // the retry waits behind the head, with an earlier deadline than the waiters before it. Its
    // slot came before its deadline, so it is served then, not refused.
    clock.advance(5);
    await flush();
    expect(refused).toEqual([]);
    expect(grants.filter((g) => g.units === 2)).toEqual([{ units: 2, at: 3 }]);
    limiter.close();
  });

  it('grants a waiter behind the head by its slot when the deadline of the head cut a batched wake short', async () => {
    // 480,000 units/min: slots 0.125 ms apart, served 2 ms of them a wake.
    const { clock, limiter, refused, grants, acquire } = batchedLine();
    // 33 at once (idle credit), one queued (its slot at 0.125 ms), then one whose deadline is at
    // 2 ms (its slot at 0.25 ms), then a retry of 2 units whose deadline is at 0.5 ms (its slot at
    // 0.375 ms), then 20 more: the wake for the second is put off to its deadline (2 ms).
    for (let i = 0; i < 34; i++) acquire(1);
    acquire(1, { waitedMs: 60_000 - 2 });
    acquire(2, { waitedMs: 60_000 - 0.5 });
    for (let i = 0; i < 20; i++) acquire(1);
    clock.advance(3);
    await flush();
    // The retry's slot came by its deadline: it is served, not refused, in a wake at its own
    // deadline (it waits behind a waiter whose deadline is later), not in the one put off to 2 ms.
    expect(refused).toEqual([]);
    expect(grants.filter((g) => g.units === 2)).toEqual([{ units: 2, at: 0.5 }]);
    limiter.close();
  });

  it('refuses a waiter whose deadline passed during a pause, though its slot in the pacer came before it', async () => {
    // 480,000 units/min: slots 0.125 ms apart. A pause holds every waiter until 10 ms.
    const { clock, limiter, refused, grants: granted, acquire } = batchedLine();
    // 33 at once (idle credit), one queued (its slot at 0.125 ms), then a retry of 2 units whose
    // maxWait is nearly spent (its deadline at 8 ms, its slot at 0.25 ms); then a pause to 10 ms.
    for (let i = 0; i < 34; i++) acquire(1);
    acquire(2, { waitedMs: 60_000 - 8 });
    limiter.pauseFor(10);
    clock.advance(12);
    await flush();
    // Paused through its deadline: it could not have gone by then, so it is refused at the
    // pause's end (10 ms, 2 ms past its deadline), not served.
    expect(granted.filter((g) => g.units === 2)).toEqual([]);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toBeInstanceOf(RateLimitRejectedError);
    expect((refused[0] as RateLimitRejectedError).reason).toBe('max-wait');
    limiter.close();
  });

  it('keeps the rate when its timer fires late (a busy event loop): late slots are caught up, not lost', async () => {
    // Every timer fires 30 ms after its due time; slots are 10 ms apart (6,000 units/min).
    class LateClock extends ManualClock {
      override setTimeout(fn: () => void, ms: number): unknown {
        return super.setTimeout(fn, ms + 30);
      }
    }
    const clock = new LateClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 6_000, controller: 'aimd' });
    let granted = 0;
    for (let i = 0; i < 300; i++) void limiter.acquire().then(() => granted++);
    for (let t = 0; t < 1_000; t += 10) {
      clock.advance(10);
      await flush();
    }
    // 100 slots in a second (plus the 10 ms idle credit, minus the last late fire), not the 25
    // that a timer 30 ms late would give if each late fire lost its lateness.
    expect(granted).toBeGreaterThanOrEqual(96);
    expect(granted).toBeLessThanOrEqual(102);
  });

  it('at 150,000 units/min sends no bunch above a 4 ms tick of the rate, however late its timer fires', async () => {
    // Slots 0.4 ms apart. A timer 50 ms late caught up in full would send 125 requests at once,
    // which a strict leaky bucket (nginx, burst=10) answers with 429s and a Retry-After pause.
    const late = (ms: number) =>
      class extends ManualClock {
        override setTimeout(fn: () => void, delay: number): unknown {
          return super.setTimeout(fn, delay + ms);
        }
      };
    const run = async (lateMs: number, stepMs: number) => {
      const clock = new (late(lateMs))();
      const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 150_000, controller: 'aimd' });
      const at = new Map<number, number>();
      let granted = 0;
      for (let i = 0; i < 5_000; i++)
        void limiter.acquire().then(
          () => {
            granted++;
            at.set(clock.now(), (at.get(clock.now()) ?? 0) + 1);
          },
          // The waiters left at the end are rejected by close(): expected, not counted.
          () => {},
        );
      await flush();
      for (let t = 0; t < 1_000; t += stepMs) {
        clock.advance(stepMs);
        await flush();
      }
      limiter.close();
      return { granted, bunch: Math.max(...at.values()) };
    };
    // 50 ms late: at most a 4 ms tick of the rate (10) and the one due now go at once.
    expect((await run(50, 10)).bunch).toBeLessThanOrEqual(11);
    // 2 ms late, a timer tick apart: the slots are kept, the rate holds (2,500 in a second,
    // plus the idle credit).
    const { granted, bunch } = await run(2, 1);
    expect(bunch).toBeLessThanOrEqual(11);
    expect(granted).toBeGreaterThanOrEqual(2_490);
    expect(granted).toBeLessThanOrEqual(2_515);
  });

  it("burst 'second': serves a full bucket at once, then one request per 1/rate, first in first out", async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 600, burst: 'second' });
    const order: number[] = [];
    for (let i = 0; i < 13; i++) void limiter.acquire().then(() => order.push(i));
    await flush();
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    clock.advance(99);
    await flush();
    expect(order).toHaveLength(10);
    clock.advance(1);
    await flush();
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    await advance(clock, 200);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  });

  it("burst 'second': serves a request larger than the burst once the bucket is full and leaves it in debt", async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60, burst: 'second' });
    const { granted } = queue(limiter, clock, 1, 5);
    await flush();
    expect(granted).toEqual([0]);
    expect(limiter.snapshot().tokens).toBe(-4);
    const second = queue(limiter, clock, 1, 1);
    await advance(clock, 6_000, 500);
    expect(second.granted).toEqual([5_000]);
  });

  it('rejects a request at once when the queue is full, with the numbers in the message', async () => {
    const { limiter } = setup({ initialUnitsPerMinute: 60, queueLimit: 2 });
    limiter.tryAcquire();
    void limiter.acquire().catch(() => {});
    void limiter.acquire().catch(() => {});
    const error = await limiter.acquire().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RateLimitRejectedError);
    expect(error).toMatchObject({
      reason: 'queue-full',
      limiter: 'default',
      code: 'ERR_RATE_LIMIT_QUEUE_FULL',
    });
    expect((error as Error).message).toContain('2 of 2 waiting');
  });

  it('rejects at once a request whose predicted wait is longer than maxWait, and admits one exactly at it', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60, maxWait: 2_000, burst: 'second' });
    limiter.tryAcquire();
    const first = queue(limiter, clock, 2);
    const late = await limiter.acquire().catch((e: unknown) => e);
    expect(late).toMatchObject({ reason: 'max-wait' });
    expect((late as Error).message).toContain('3000 ms is longer than maxWait 2000 ms');
    await advance(clock, 2_000, 1_000);
    expect(first.granted).toEqual([1_000, 2_000]);
    expect(first.errors).toEqual([]);
  });

  it('rejects a waiter at its deadline when a cut pushes its wait past maxWait', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60, maxWait: 3_000 });
    const sent = limiter.tryAcquire()!;
    const waiting = queue(limiter, clock, 3);
    sent.throttled(); // 60 -> 42/min: the third waiter now comes after its deadline
    await advance(clock, 2_999, 1);
    expect(waiting.errors).toEqual([]);
    clock.advance(1);
    await flush();
    expect(waiting.errors).toHaveLength(1);
    expect(waiting.errors[0]).toMatchObject({ reason: 'max-wait' });
    expect(waiting.granted).toHaveLength(2);
    expect(Math.max(...waiting.granted)).toBeLessThanOrEqual(3_000);
  });

  it('takes an aborted waiter out of the queue, returns its units, and rejects with the abort reason', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60 });
    limiter.tryAcquire();
    const controller = new AbortController();
    const aborted = limiter.acquire(1, { signal: controller.signal });
    const next = queue(limiter, clock, 1);
    expect(limiter.snapshot().queued).toBe(2);
    controller.abort();
    await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
    expect(limiter.snapshot()).toMatchObject({ queued: 1, queuedUnits: 1 });
    await advance(clock, 1_000, 1_000);
    expect(next.granted).toEqual([1_000]);
  });

  it('rejects at once when the signal is already aborted', async () => {
    const { limiter } = setup({ initialUnitsPerMinute: 60 });
    await expect(limiter.acquire(1, { signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: 'AbortError',
    });
    expect(limiter.snapshot().queued).toBe(0);
  });

  it('tryAcquire never queues and marks that a request had to wait', () => {
    const { limiter } = setup({ initialUnitsPerMinute: 60 });
    expect(limiter.tryAcquire()).toBeDefined();
    expect(limiter.tryAcquire()).toBeUndefined();
    expect(limiter.snapshot()).toMatchObject({ queued: 0, waited: true });
  });

  it('arms at most one timer, and none when idle', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60 });
    expect(clock.pendingTimers).toBe(0);
    limiter.tryAcquire();
    queue(limiter, clock, 100);
    expect(clock.pendingTimers).toBe(1);
    await advance(clock, 100_000, 1_000);
    expect(clock.pendingTimers).toBe(0);
  });

  it('rejects bad units with an error naming the value', async () => {
    const { limiter } = setup();
    await expect(limiter.acquire(0)).rejects.toThrow('units: must be a positive finite number (received 0)');
    await expect(limiter.acquire('2' as unknown as number)).rejects.toMatchObject({
      name: 'InvalidArgumentError',
      code: 'ERR_INVALID_ARGUMENT',
      method: 'acquire',
      argument: 'units',
      received: '2',
    });
    await expect(limiter.acquire(0)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(() => limiter.tryAcquire(Number.NaN)).toThrow('received NaN');
  });
});

describe('AdaptiveRateLimiter: throttles, cuts and pauses', () => {
  it('cuts once for a burst of 429s sent before the cut', () => {
    const { limiter } = setup({ initialUnitsPerMinute: 6_000, burst: 'second' });
    const permits = Array.from({ length: 50 }, () => limiter.tryAcquire()!);
    for (const p of permits) p.throttled();
    expect(limiter.snapshot()).toMatchObject({ cuts: 1, throttles: 50 });
    expect(limiter.rate).toBeCloseTo(4_200);
  });

  it('cuts again only after the cooldown, and only for a request sent after the last cut', () => {
    const { clock, limiter } = setup({
      initialUnitsPerMinute: 6_000,
      decreaseCooldown: 1_000,
      burst: 'second',
    });
    const before = limiter.tryAcquire()!;
    limiter.tryAcquire()!.throttled();
    const after = limiter.tryAcquire()!;
    clock.advance(500);
    limiter.tryAcquire()!.throttled(); // sent after the cut, but within the cooldown
    expect(limiter.snapshot().cuts).toBe(1);
    clock.advance(600);
    before.throttled(); // after the cooldown, but sent before the cut
    expect(limiter.snapshot().cuts).toBe(1);
    after.throttled();
    expect(limiter.snapshot().cuts).toBe(2);
    expect(limiter.rate).toBeCloseTo(6_000 * 0.7 * 0.7);
  });

  it('uses the lower of the controller answer and the rate, and keeps it at the minimum or above', () => {
    const raising = spyController({ throttled: (s) => s.rate * 2 });
    const { limiter } = setup({ initialUnitsPerMinute: 600, controller: raising.controller });
    limiter.tryAcquire()!.throttled();
    expect(limiter.rate).toBe(600);
    const sinking = spyController({ throttled: () => -5 });
    const other = setup({
      initialUnitsPerMinute: 600,
      minUnitsPerMinute: 60,
      controller: sinking.controller,
    });
    other.limiter.tryAcquire()!.throttled();
    expect(other.limiter.rate).toBe(60);
  });

  it('pauses every send for the Retry-After, then resumes', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 6_000 });
    const events: string[] = [];
    limiter.on('paused', (e) => events.push(`paused ${e.ms}`));
    limiter.on('resumed', () => events.push(`resumed at ${clock.now()}`));
    limiter.tryAcquire()!.throttled(5_000);
    expect(limiter.tryAcquire()).toBeUndefined();
    const waiting = queue(limiter, clock, 1);
    await advance(clock, 4_999, 1_000);
    expect(waiting.granted).toEqual([]);
    await advance(clock, 1, 1);
    expect(waiting.granted).toEqual([5_000]);
    expect(events).toEqual(['paused 5000', 'resumed at 5000']);
    expect(limiter.snapshot().pausedUntil).toBeUndefined();
  });

  it('caps a hostile Retry-After at maxPause and never arms a timer past 2^31-1 ms', () => {
    const delays: number[] = [];
    const manual = new ManualClock();
    const clock: Clock = {
      now: () => manual.now(),
      setTimeout: (fn, ms) => {
        delays.push(ms);
        return manual.setTimeout(fn, ms);
      },
      clearTimeout: (h) => manual.clearTimeout(h),
    };
    const capped = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600 });
    capped.tryAcquire()!.throttled(999_999_999_000);
    expect(capped.snapshot().pausedUntil).toBe(600_000);
    const huge = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600, maxPause: 1e13 });
    huge.tryAcquire()!.throttled(1e13);
    expect(Math.max(...delays)).toBeLessThanOrEqual(MAX_TIMER_MS);
  });

  it('pauses without cutting on a failure that carries a Retry-After', () => {
    const { limiter } = setup({ initialUnitsPerMinute: 600 });
    limiter.tryAcquire()!.failed(2_000);
    limiter.tryAcquire()?.failed();
    expect(limiter.snapshot()).toMatchObject({ rate: 600, cuts: 0, throttles: 0, pausedUntil: 2_000 });
  });

  it('does not call onSuccess during a pause', () => {
    const spy = spyController({ success: 1_000 });
    const { clock, limiter } = setup({
      initialUnitsPerMinute: 600,
      controller: spy.controller,
      burst: 'second',
    });
    const late = limiter.tryAcquire()!;
    limiter.tryAcquire()!.throttled(2_000);
    clock.advance(1_000);
    late.success();
    expect(spy.states.filter((s) => s.kind === 'success')).toHaveLength(0);
    clock.advance(1_000);
    limiter.tryAcquire()!.success();
    expect(spy.states.filter((s) => s.kind === 'success')).toHaveLength(1);
  });

  it('tells the controller the pause since the last cut and counts the increase clock from the end of the pause', () => {
    const spy = spyController({ throttled: (s) => s.rate * 0.7 });
    const { clock, limiter } = setup({ initialUnitsPerMinute: 600, controller: spy.controller });
    limiter.tryAcquire()!.throttled(3_000);
    clock.advance(5_000);
    limiter.tryAcquire()!.success();
    const seen = spy.states.at(-1)!.state;
    expect(seen).toMatchObject({
      sinceLastDecrease: 5_000,
      pauseSinceLastDecrease: 3_000,
      sinceLastIncrease: 2_000,
    });
    expect(seen.rateBeforeLastDecrease).toBe(600);
  });

  it('leaves an unlimited limiter at its first throttle for the measured send rate', () => {
    const { clock, limiter } = setup();
    expect(limiter.rate).toBe(Number.POSITIVE_INFINITY);
    for (let t = 0; t < 3_000; t += 10) {
      limiter.tryAcquire()!.success();
      clock.advance(10);
    }
    limiter.tryAcquire()!.throttled();
    // 100 responses a second = 6,000/min measured; AIMD cuts it by 30 %.
    expect(limiter.rate).toBeCloseTo(4_200, -2);
    expect(limiter.tryAcquire()).toBeUndefined();
  });

  it.each(['aimd', 'cubic'] as const)(
    'starts the first cut of a throttled burst from what the server accepted, not from what was sent (%s)',
    async (controller) => {
      // Regression: the first half-second bucket closed empty while the burst was in flight, the
      // measured rate read 0, and the first cut went straight to 1 unit/min.
      const clock = new ManualClock(400);
      const limiter = new AdaptiveRateLimiter({ clock, controller, slowStart: false });
      const permits = await Promise.all(Array.from({ length: 30 }, () => limiter.acquire()));
      clock.advance(150);
      for (const p of permits.slice(0, 20)) p.success();
      permits[20]!.throttled(1_000);
      // 30 units sent, 20 accepted in the first 150 ms: the 3 s window reads 8,000/min (20
      // answers are enough to read over the 150 ms since the first grant; fewer than 16 read over
      // a second); the last second's, read from the first answer over one 250 ms slot at least,
      // 4,800/min. The first cut starts from the higher, cut by 30 %.
      expect(limiter.snapshot().acceptedRate).toBeCloseTo(8_000);
      expect(limiter.rate).toBeCloseTo(8_000 * 0.7);
    },
  );
});

describe('AdaptiveRateLimiter: increases', () => {
  it('climbs by 60 units/min per instance every 10 s while requests wait (AIMD, 2 instances)', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 1_000, instanceCount: 2, maxWait: 600_000 });
    const rates: number[] = [];
    limiter.on('increased', (e) => rates.push(e.to));
    for (let second = 0; second < 60; second++) {
      for (let i = 0; i < 20; i++)
        void limiter.acquire().then(
          (p) => p.success(),
          () => {},
        );
      await advance(clock, 1_000, 100);
    }
    expect(rates).toEqual([560, 620, 680, 740, 800, 860]);
    // 360/min per instance in a minute: 720/min for the budget of two.
    expect((rates.at(-1)! - 500) * 2).toBe(720);
  });

  it('does not increase when no request had to wait', () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 600 });
    for (let t = 0; t < 60; t++) {
      clock.advance(1_000);
      limiter.tryAcquire()!.success();
    }
    expect(limiter.rate).toBe(600);
  });

  it('restarts the increase clock and clears waited on a non-null answer, even the same rate', () => {
    const spy = spyController({ success: 600 });
    const { clock, limiter } = setup({ initialUnitsPerMinute: 600, controller: spy.controller });
    limiter.tryAcquire(10);
    limiter.tryAcquire();
    expect(limiter.snapshot().waited).toBe(true);
    clock.advance(3_000);
    limiter.tryAcquire()!.success();
    expect(limiter.snapshot().waited).toBe(false);
    clock.advance(1_000);
    limiter.tryAcquire()!.success();
    expect(spy.states.at(-1)!.state.sinceLastIncrease).toBe(1_000);
  });

  /** 0.25, 0.5, 0.75, 0, ...: a `random` that changes at each draw. */
  function draws() {
    let next = 0;
    return () => (next = (next + 0.25) % 1);
  }

  /** Successes with waits, a cut and a pause between them: the states a controller is asked with. */
  function askSuccesses(controller: RateController) {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 600, controller, random: draws() });
    for (let i = 0; i < 6; i++) {
      clock.advance(1_300);
      const permit = limiter.tryAcquire();
      expect(limiter.tryAcquire()).toBeUndefined(); // turned away: a wait
      if (i === 2) permit?.throttled(1_500);
      else permit?.success();
    }
  }

  it('hands a custom controller a state of its own at each success: what it keeps shows its own call', () => {
    const spy = spyController();
    askSuccesses(spy.controller);
    const successes = spy.states.filter((s) => s.kind === 'success').map((s) => s.state);
    expect(new Set(successes).size).toBe(successes.length);
    // Each kept state still shows its own call (1.3 s apart; a cut at 3.9 s, paused 1.5 s), not the last one's.
    expect(successes.map((s) => [s.sinceLastDecrease, s.decreases.length])).toEqual([
      [1_300, 0],
      [2_600, 0],
      [2_600, 1],
      [3_900, 1],
    ]);
  });

  it('asks a controller that keeps no state with one object, rewritten with every field of the call', () => {
    const seen = (mark: (c: RateController) => RateController) => {
      const copies: RateControllerState[] = [];
      const objects = new Set<RateControllerState>();
      const spy = spyController();
      askSuccesses(
        mark({
          onThrottled: spy.controller.onThrottled,
          onSuccess(state) {
            objects.add(state);
            copies.push({ ...state });
            return undefined;
          },
        }),
      );
      return { copies, objects };
    };
    const common = {
      minRate: 1,
      maxRate: Infinity,
      rateBeforeLastDecrease: 600,
      waited: true,
      instanceCount: 1,
    };
    const cut = { ...common, rate: 300, measuredRateAtLastDecrease: 56, pauseSinceLastDecrease: 1_500 };
    // The cut's record keeps the request rate measured at it (56 requests/min of one unit).
    const decreases = [
      {
        rateBefore: 600,
        acceptedRate: 46.15384615384615,
        acceptedRateSincePrevious: undefined,
        requestRate: 56,
      },
    ];
    // What a new state showed at each call before the limiter could reuse one.
    const expected = [
      { ...common, rate: 600, sinceLastDecrease: 1_300, sinceLastIncrease: 1_300 },
      { ...common, rate: 600, sinceLastDecrease: 2_600, sinceLastIncrease: 2_600, measuredRate: 40 },
      { ...cut, sinceLastDecrease: 2_600, sinceLastIncrease: 1_100, measuredRate: 27.199999999999996 },
      { ...cut, sinceLastDecrease: 3_900, sinceLastIncrease: 2_400, measuredRate: 53.44 },
    ].map((s, i) => ({
      measuredRateAtLastDecrease: undefined,
      pauseSinceLastDecrease: 0,
      measuredRate: undefined,
      // Requests of one unit: as many requests as units.
      measuredRequestRate: 'measuredRate' in s ? s.measuredRate : undefined,
      acceptedRate: [60, 92.3076923076923, 48, 50][i],
      acceptedRateSinceLastDecrease: [undefined, undefined, 54.54545454545455, 50][i],
      decreases: i < 2 ? [] : decreases,
      random: i < 2 ? 0.25 : 0.5,
      announcedRate: undefined,
      ...s,
    }));
    const fields = Object.keys(expected[0]!).sort();
    const reused = seen(keepsNoState);
    const fresh = seen((c) => c);
    expect(reused.objects.size).toBe(1);
    expect(fresh.objects.size).toBe(4);
    for (const { copies } of [reused, fresh]) {
      expect(copies).toEqual(expected);
      for (const state of copies) expect(Object.keys(state).sort()).toEqual(fields);
    }
  });

  it('reuses the state only for the built-in controllers named, never for an object it was given', () => {
    for (const name of ['aimd', 'cubic', 'probe'] as const)
      expect(mayReuseState(resolveController(name))).toBe(true);
    expect(mayReuseState(resolveController(spyController().controller))).toBe(false);
  });

  it('keeps the rate within [min, max] whatever the controller says', () => {
    const spy = spyController({ success: 1e9 });
    const { limiter } = setup({
      initialUnitsPerMinute: 600,
      maxUnitsPerMinute: 900,
      controller: spy.controller,
    });
    limiter.tryAcquire()!.success();
    expect(limiter.rate).toBe(900);
  });

  it('divides min, max and initial by the instance count', () => {
    const { limiter } = setup({
      initialUnitsPerMinute: 1_000,
      minUnitsPerMinute: 100,
      maxUnitsPerMinute: 5_625,
      instanceCount: 2,
    });
    expect(limiter.snapshot()).toMatchObject({ rate: 500, minRate: 50, maxRate: 2_812.5, instanceCount: 2 });
  });

  it('measures the accepted rate from successes only, over the last 3 s', () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60_000, minUnitsPerMinute: 60_000 });
    expect(limiter.snapshot().acceptedRate).toBeUndefined();
    for (let t = 0; t < 6_000; t += 100) {
      limiter.tryAcquire()!.success(); // 10 a second accepted
      if (t >= 3_000) limiter.tryAcquire()!.throttled(); // 10 a second throttled: not counted
      clock.advance(100);
    }
    // 27 units in the 2.75 s the window spans at t = 6 s (its slots are 250 ms).
    expect(limiter.snapshot().acceptedRate).toBeCloseTo((27 * 60_000) / 2_750);
    clock.advance(3_000);
    // Nothing accepted in the last 3 s.
    expect(limiter.snapshot().acceptedRate).toBe(0);
  });

  it('shows controllers the accepted rate, what each cut recorded and a random number drawn at each cut', () => {
    const spy = spyController({ throttled: (s) => s.rate * 0.9 });
    const draws = [0.25, 0.75, 0.5];
    const { clock, limiter } = setup({
      initialUnitsPerMinute: 6_000,
      controller: spy.controller,
      random: () => draws.shift() ?? 0,
    });
    for (let t = 0; t < 2_000; t += 100) {
      limiter.tryAcquire()!.success(2);
      clock.advance(100);
    }
    limiter.tryAcquire()!.throttled();
    const first = spy.states.at(-1)!.state;
    expect(first).toMatchObject({ decreases: [], random: 0.25 });
    expect(first.acceptedRate).toBeCloseTo(1_200);
    clock.advance(1_000);
    limiter.tryAcquire()!.throttled();
    const second = spy.states.at(-1)!.state;
    expect(second.random).toBe(0.75);
    expect(second.decreases).toHaveLength(1);
    expect(second.decreases[0]!.rateBefore).toBe(6_000);
    expect(second.decreases[0]!.acceptedRate).toBeCloseTo(1_200);
    expect(second.decreases[0]!.acceptedRateSincePrevious).toBeUndefined();
    expect(second.acceptedRateSinceLastDecrease).toBe(0);
    // The first state still shows what it showed.
    expect(first.decreases).toEqual([]);
  });

  it('measures the send rate in units of responses, and corrects a permit by the units used', () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60_000 });
    for (let t = 0; t < 2_000; t += 100) {
      limiter.tryAcquire()!.success(3); // charged 1, used 3: 30 units/s
      clock.advance(100);
    }
    limiter.tryAcquire()!.success(3);
    expect(limiter.snapshot().measuredRate).toBeCloseTo(1_800);
  });
});

describe('AdaptiveRateLimiter: options, update, close and events', () => {
  it.each([
    [{ initialUnitsPerMinute: -5 }, 'initialUnitsPerMinute', '-5'],
    [{ minUnitsPerMinute: 10, maxUnitsPerMinute: 5 }, 'minUnitsPerMinute', '10'],
    [{ maxWait: Number.NaN }, 'maxWait', 'NaN'],
    [{ aimd: { increaseInterval: 0 } }, 'aimd.increaseInterval', '0'],
    [{ instanceCount: 1.5 }, 'instanceCount', '1.5'],
    [{ controller: 'vegas' }, 'controller', '"vegas"'],
  ])('rejects %j naming the field and the value', (options, field, received) => {
    const create = () => new AdaptiveRateLimiter(options as AdaptiveLimiterOptions);
    expect(create).toThrow(ConfigError);
    expect(create).toThrow(
      new RegExp(`${field.replace('.', '\\.')}: .*received ${received.replace('.', '\\.')}`),
    );
  });

  it('changes limits, controller and waits at run time and keeps its state', () => {
    const { limiter } = setup({ initialUnitsPerMinute: 6_000 });
    limiter.tryAcquire()!.throttled();
    limiter.update({ maxUnitsPerMinute: 3_000, controller: 'cubic', maxWait: 5_000 });
    expect(limiter.rate).toBe(3_000);
    expect(limiter.snapshot()).toMatchObject({ cuts: 1, throttles: 1, maxRate: 3_000 });
    expect(() => limiter.update({ minUnitsPerMinute: 10_000 })).toThrow(/minUnitsPerMinute/);
    expect(limiter.rate).toBe(3_000);
  });

  it('refuses to change what is built once (burst, reserve, slowStart) rather than ignore it', () => {
    const { limiter } = setup({ burst: 'announced', reserve: 1_500 });
    expect(() => limiter.update({ reserve: 0 })).toThrow(/reserve: cannot change at run time.*received 0/);
    expect(() => limiter.update({ slowStart: false })).toThrow(/slowStart: cannot change at run time/);
    expect(() => limiter.update({ burst: 'paced' })).toThrow(/burst: cannot change at run time/);
    // The same values are accepted: a whole options object can be passed again.
    limiter.update({ burst: 'announced', reserve: 1_500, slowStart: 10 });
    // Nothing changed: 10,000 a minute announced, 1.5 s of it (250) kept back.
    limiter.tryAcquire(1)!.success(undefined, [{ limit: 10_000, remaining: 10_000, windowMs: 60_000 }]);
    expect(limiter.snapshot().tokens).toBeCloseTo(9_750, 0);
  });

  it('refuses update(null) with the ConfigError update(5) gives, and keeps its options', () => {
    const { limiter } = setup({ initialUnitsPerMinute: 600, maxWait: 5_000 });
    for (const options of [null, 5]) {
      const update = () => limiter.update(options as never);
      expect(update).toThrow(ConfigError);
      expect(update).toThrow(new RegExp(`\\(root\\): .*received ${options}`));
    }
    expect(limiter.rate).toBe(600);
  });

  it('sets the rate and pauses on request, within the limits', () => {
    const { limiter } = setup({ initialUnitsPerMinute: 600, maxUnitsPerMinute: 1_200, maxPause: 5_000 });
    limiter.setRate(900);
    expect(limiter.rate).toBe(900);
    limiter.setRate(1e9);
    expect(limiter.rate).toBe(1_200);
    expect(() => limiter.setRate(-1)).toThrow(/rate: must be a positive number \(received -1\)/);
    expect(() => limiter.setRate(-1)).toThrow(InvalidArgumentError);
    expect(() => limiter.pauseFor(-1)).toThrow(InvalidArgumentError);
    limiter.pauseFor(60_000);
    expect(limiter.snapshot()).toMatchObject({ pausedUntil: 5_000, cuts: 0 });
  });

  it('rejects every waiter with reason closed, once, and every later acquire', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60 });
    limiter.tryAcquire();
    const waiting = queue(limiter, clock, 3);
    limiter.close();
    limiter.close();
    await flush();
    expect(waiting.errors.map((e) => (e as RateLimitRejectedError).reason)).toEqual([
      'closed',
      'closed',
      'closed',
    ]);
    await expect(limiter.acquire()).rejects.toMatchObject({ reason: 'closed' });
    expect(clock.pendingTimers).toBe(0);
  });

  it('emits typed events for acquire, reject, throttle and rate changes', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60, queueLimit: 0 });
    const seen = vi.fn();
    for (const name of ['acquired', 'rejected', 'throttled', 'decreased'] as const) {
      limiter.on(name, (e: unknown) => seen(name, e));
    }
    limiter.tryAcquire()!.throttled();
    await limiter.acquire().catch(() => {});
    clock.advance(0);
    expect(seen.mock.calls.map((c) => c[0])).toEqual(['acquired', 'decreased', 'throttled', 'rejected']);
    expect(seen.mock.calls[1]![1]).toMatchObject({ from: 60, to: 42, cause: 'throttle' });
  });
});

describe('AdaptiveRateLimiter.wrap', () => {
  it('refuses units that are neither a positive number nor a function, naming the field and value', () => {
    const { limiter } = setup();
    const fn = async () => 'ok';
    for (const units of ['abc', 0, -1, Number.NaN, null]) {
      expect(() => wrap(limiter, fn, { units: units as never })).toThrow(ConfigError);
    }
    expect(() => wrap(limiter, fn, { units: 'abc' as never })).toThrow(/units: .*received "abc"/);
    expect(() => wrap(limiter, fn, { units: () => 2 })).not.toThrow();
  });

  it('retries a throttled call up to maxAttempts and then returns its last answer', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60_000 });
    const fn = vi.fn(async () => ({ status: 429 }));
    const wrapped = wrap(limiter, fn, {
      classify: (r) => (r.status === 429 ? { kind: 'throttled', retryAfterMs: 100 } : { kind: 'success' }),
    });
    const result = wrapped();
    await advance(clock, 1_000, 10);
    await expect(result).resolves.toEqual({ status: 429 });
    expect(fn).toHaveBeenCalledTimes(4);
  });

  it('returns the last answer when the limiter refuses the retry (a Retry-After longer than maxWait)', async () => {
    const { limiter } = setup({ initialUnitsPerMinute: 60_000, maxWait: 60_000 });
    const fn = vi.fn(async () => ({ status: 429 }));
    const wrapped = wrap(limiter, fn, { classify: () => ({ kind: 'throttled', retryAfterMs: 120_000 }) });
    await expect(wrapped()).resolves.toEqual({ status: 429 });
    expect(fn).toHaveBeenCalledTimes(1);
  });

  it('rethrows the last error when the limiter refuses the retry of a thrown 429', async () => {
    const { limiter } = setup({ initialUnitsPerMinute: 60_000, maxWait: 5_000 });
    const boom = Object.assign(new Error('slow down'), { status: 429, retryAfterMs: 30_000 });
    const wrapped = wrap(limiter, async () => Promise.reject(boom));
    await expect(wrapped()).rejects.toBe(boom);
  });

  it('rejects, never throws, when its units or costs function throws, and never calls the function', async () => {
    const { limiter } = setup({ initialUnitsPerMinute: 60_000 });
    const boom = new Error('no size');
    const fn = vi.fn(async () => 'ok');
    const byUnits = wrap(limiter, fn, {
      units: () => {
        throw boom;
      },
    });
    const byCosts = wrap(limiter, fn, {
      costs: () => {
        throw boom;
      },
    });
    for (const call of [byUnits, byCosts]) {
      let result: Promise<string> | undefined;
      expect(() => {
        result = call();
      }).not.toThrow();
      await expect(result).rejects.toBe(boom);
    }
    expect(fn).not.toHaveBeenCalled();
  });

  it('reads a thrown 429 as a throttle and other errors as failures', async () => {
    const { limiter } = setup({ initialUnitsPerMinute: 60_000 });
    const boom = Object.assign(new Error('slow down'), { status: 429 });
    const wrapped = wrap(limiter, async () => Promise.reject(boom), { maxAttempts: 1 });
    await expect(wrapped()).rejects.toBe(boom);
    expect(limiter.snapshot().throttles).toBe(1);
    const failing = wrap(limiter, async () => Promise.reject(new Error('reset')));
    await expect(failing()).rejects.toThrow('reset');
    expect(limiter.snapshot().throttles).toBe(1);
  });
});

describe('AdaptiveRateLimiter: edge cases (slow start, rounding, pauses, refunds, instance count)', () => {
  it('keeps climbing while a batch stays queued across rate changes', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60, maxWait: 3_600_000 });
    for (let i = 0; i < 2_000; i++)
      void limiter.acquire().then(
        (p) => p.success(),
        () => {},
      );
    await advance(clock, 60_000, 500);
    // +120/min every 10 s while requests wait: 60 -> 780 in a minute (it stopped at 180 before).
    expect(limiter.rate).toBe(780);
  });

  it('turns a burst on an unlimited limiter into a slow start: 10 in flight, doubling each round trip, dropped once it no longer binds', async () => {
    const { clock, limiter } = setup();
    const granted: Permit[] = [];
    for (let i = 0; i < 100; i++) void limiter.acquire().then((p) => granted.push(p));
    await flush();
    expect(granted).toHaveLength(10);
    expect(limiter.snapshot()).toMatchObject({ queued: 90, inFlightCap: 10 });
    // One round trip: 10 answers, each frees its unit and adds one: 20 go.
    clock.advance(100);
    for (const p of granted.slice(0, 10)) p.success();
    await flush();
    expect(granted).toHaveLength(30);
    expect(limiter.snapshot().inFlightCap).toBe(20);
    clock.advance(100);
    for (const p of granted.slice(10, 30)) p.success();
    await flush();
    expect(granted).toHaveLength(70);
    clock.advance(100);
    for (const p of granted.slice(30, 70)) p.success();
    await flush();
    expect(granted).toHaveLength(100);
    // 30 in flight under a cap of 80: it no longer binds after the next answer, and is dropped.
    granted[70]!.success();
    expect(limiter.snapshot().inFlightCap).toBeUndefined();
    expect(limiter.rate).toBe(Number.POSITIVE_INFINITY);
    for (let i = 0; i < 50; i++) expect(limiter.tryAcquire()).toBeDefined();
  });

  it('drops the slow start at the first throttle, which cuts from what was accepted', async () => {
    const { clock, limiter } = setup();
    const granted: Permit[] = [];
    for (let i = 0; i < 100; i++) void limiter.acquire().then((p) => granted.push(p));
    await flush();
    clock.advance(1_000);
    for (const p of granted.slice(0, 9)) p.success();
    granted[9]!.throttled();
    // 9 accepted at 1 s: 540/min over the window; the last second's, from the first answer over
    // one 250 ms slot at least, 2,160/min: AIMD cuts the higher by 30 %.
    expect(limiter.rate).toBeCloseTo(2_160 * 0.7);
    expect(limiter.snapshot().inFlightCap).toBeUndefined();
  });

  it('starts the first cut of an idle unlimited limiter from what it sent, not from its age', async () => {
    const { clock, limiter } = setup({ slowStart: false });
    clock.advance(600_000); // made at startup, first used ten minutes later
    const permits = Array.from({ length: 300 }, () => limiter.tryAcquire()!);
    clock.advance(200);
    permits[0]!.throttled();
    // 300 units within a second: 18,000/min, cut by 30 %.
    expect(limiter.rate).toBeCloseTo(12_600);
  });

  it('makes progress when rounding at a large clock value leaves the head a hair short', () => {
    const clock = new ManualClock(1_000_000_007.31);
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 3_013.7 });
    limiter.tryAcquire(limiter.snapshot().capacity);
    void limiter.acquire(1);
    void limiter.acquire(1);
    let fired = 0;
    const setTimeout = clock.setTimeout.bind(clock);
    clock.setTimeout = (fn, ms) =>
      setTimeout(() => {
        fired++;
        fn();
      }, ms);
    clock.advance(5_000);
    expect(fired).toBeLessThan(100);
    expect(limiter.snapshot().queued).toBe(0);
  });

  it('keeps the Retry-After pause when a custom controller throws', () => {
    const controller: RateController = {
      onThrottled: () => {
        throw new Error('controller bug');
      },
      onSuccess: () => undefined,
    };
    const { limiter } = setup({ initialUnitsPerMinute: 600, controller });
    expect(() => limiter.tryAcquire()!.throttled(5_000)).toThrow('controller bug');
    expect(limiter.snapshot().pausedUntil).toBe(5_000);
    expect(limiter.tryAcquire()).toBeUndefined();
  });

  it('rescales its share when the instance count changes at run time', () => {
    const { limiter } = setup({ initialUnitsPerMinute: 1_200 });
    limiter.update({ instanceCount: 4 });
    expect(limiter.rate).toBe(300);
  });

  it('keeps what it booked of its cuts, rescaled, when the instance count changes (a start-capped first cut stays one)', () => {
    const spy = spyController();
    const { clock, limiter } = setup({ initialUnitsPerMinute: 1_200, controller: spy.controller });
    // A 429 within the first second of answers: the first cut is booked start-capped.
    limiter.tryAcquire()!.success();
    clock.advance(100);
    limiter.tryAcquire()!.throttled();
    limiter.update({ instanceCount: 2 });
    clock.advance(2_000);
    limiter.tryAcquire()!.throttled();
    const { decreases } = spy.states.at(-1)!.state;
    expect(decreases).toHaveLength(1);
    expect(decreases[0]).toMatchObject({ rateBefore: 600, startCapped: true });
  });

  it('books a first cut made unlimited as one; not one made at a rate, nor the cuts after it', () => {
    const booked = (initialUnitsPerMinute?: number) => {
      const spy = spyController({ throttled: (s) => s.rate * 0.9 });
      const { clock, limiter } = setup({
        controller: spy.controller,
        ...(initialUnitsPerMinute === undefined ? {} : { initialUnitsPerMinute }),
      });
      // 40 answers over 2 s, one at a time (the cold start's cap never holds them back), then a 429.
      for (let i = 0; i < 40; i++) {
        clock.advance(50);
        limiter.tryAcquire()?.success();
      }
      limiter.tryAcquire()!.throttled();
      for (let i = 0; i < 2; i++) {
        clock.advance(3_000);
        limiter.tryAcquire()!.throttled();
      }
      return spy.states.filter((x) => x.kind === 'throttled').at(-1)!.state.decreases;
    };
    const unlimited = booked();
    expect(unlimited).toHaveLength(2);
    expect(unlimited[0]!.unlimited).toBe(true);
    expect(unlimited[0]!.startCapped).toBeUndefined();
    expect(unlimited[1]!.unlimited).toBeUndefined();
    expect(booked(6_000)[0]!.unlimited).toBeUndefined();
  });

  it('clears its timer when the last waiter aborts', () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60 });
    limiter.tryAcquire();
    const controller = new AbortController();
    void limiter.acquire(1, { signal: controller.signal }).catch(() => {});
    expect(clock.pendingTimers).toBe(1);
    controller.abort();
    expect(clock.pendingTimers).toBe(0);
  });

  it('serves the head sooner when an answer refunds units', async () => {
    const { clock, limiter } = setup({ initialUnitsPerMinute: 60 });
    const permit = limiter.tryAcquire()!;
    const waiting = queue(limiter, clock, 1);
    clock.advance(100);
    permit.success(0); // cost nothing after all: its unit comes back
    await flush();
    expect(waiting.granted).toEqual([100]);
  });

  it('does not pause at all with maxPause 0', () => {
    const { limiter } = setup({ initialUnitsPerMinute: 600, maxPause: 0 });
    const paused = vi.fn();
    limiter.on('paused', paused);
    limiter.tryAcquire()!.throttled(5_000);
    expect(paused).not.toHaveBeenCalled();
    expect(limiter.snapshot().pausedUntil).toBeUndefined();
  });
});

/** A limiter at 480,000 units/min (slots 0.125 ms apart), what it refused and granted, and an acquire that records a refusal. */
function batchedLine() {
  const { clock, limiter } = setup({ initialUnitsPerMinute: 480_000, maxWait: 60_000 });
  const refused: unknown[] = [];
  const grants: { units: number; at: number }[] = [];
  limiter.on('acquired', (e) => grants.push({ units: e.units, at: clock.now() }));
  const acquire = (units: number, options?: { waitedMs: number }) =>
    void limiter.acquire(units, options).catch((e: unknown) => refused.push(e));
  return { clock, limiter, refused, grants, acquire };
}
