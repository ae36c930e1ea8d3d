import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { SharedBudget, SharedBudgetOptions } from '../src/redis/index.js';
import { sharedMembers } from './helpers/shared-members.js';

const { members, closeAfter } = sharedMembers(
  'cubic',
  {
    controller: 'cubic',
    initialUnitsPerMinute: 1_500,
    decreaseCooldown: 0,
    heartbeatInterval: 250,
    // These tests send what a second's bucket holds at each step (the seed's bucket).
    burst: 'second',
  },
  [],
);

/** One limiter for the whole budget, to compare the shared budget with. */
function single(clock: ManualClock, options: Partial<SharedBudgetOptions> = {}): AdaptiveRateLimiter {
  const { redis: _r, store: _s, heartbeatInterval: _h, ...rest } = options;
  return closeAfter(
    new AdaptiveRateLimiter({
      clock,
      controller: 'cubic',
      initialUnitsPerMinute: 1_500,
      decreaseCooldown: 0,
      burst: 'second',
      ...rest,
    }),
  );
}

type Sender = Pick<SharedBudget, 'tryAcquire'>;

/**
 * Every `step` ms for `ms`: each busy sender sends what its bucket holds (one unit a request,
 * each a success) and then finds it empty (a wait: the controllers raise); `each` runs after
 * each step.
 */
function drive(clock: ManualClock, busy: readonly Sender[], ms: number, each?: () => void, step = 50): void {
  for (let t = 0; t < ms; t += step) {
    for (const s of busy) {
      for (let p = s.tryAcquire(); p !== undefined; p = s.tryAcquire()) p.success();
    }
    clock.advance(step);
    each?.();
  }
}

const sumOf = (budgets: readonly SharedBudget[]) => budgets.reduce((total, b) => total + b.limiter.rate, 0);

describe('a controller on a shared budget (ManualClock, MemoryBudgetStore)', () => {
  it('keeps CUBIC members within the whole maximum: each raises its rate to its part of it at most', () => {
    const clock = new ManualClock();
    const { store, budgets } = members(2, clock, { maxUnitsPerMinute: 2_700 });
    drive(clock, budgets, 60_000, () => {
      // The parts are computed one heartbeat apart, from demands a heartbeat old: while the
      // demands climb they add up to a little more than the whole (before the fix: 2 × 2,700).
      expect(sumOf(budgets)).toBeLessThanOrEqual(2_700 * 1.05);
      expect(store.rate).toBeLessThanOrEqual(2_700);
      for (const b of budgets) {
        // (A new share within 0.5 % of the rate is not applied.)
        const part = b.state.share! / b.state.rate!;
        expect(b.limiter.rate).toBeLessThanOrEqual(part * 2_700 * 1.005);
      }
    });
    expect(store.rate).toBe(2_700);
    expect(sumOf(budgets)).toBeCloseTo(2_700, -1);
  });

  it("moves the whole rate along one limiter's CUBIC curve: the members' level counts once", () => {
    const clock = new ManualClock();
    const options = { maxUnitsPerMinute: 60_000 };
    const one = single(clock, options);
    const { store, budgets } = members(2, clock, options);
    const seen: [number, number][] = [];
    drive(clock, [one, ...budgets], 15_000, () => {
      if (clock.now() % 1_000 === 0) seen.push([store.rate!, one.rate]);
    });
    expect(one.rate).toBeGreaterThan(40_000); // the curve's convex part, far above the start
    for (const [shared, alone] of seen) expect(shared / alone).toBeCloseTo(1, 1);
  });

  it("starts every member's curve again at another member's cut, as one limiter's", () => {
    const clock = new ManualClock();
    const options = { maxUnitsPerMinute: 6_000 };
    const one = single(clock, options);
    const { store, budgets } = members(2, clock, options);
    drive(clock, [one, ...budgets], 30_000);
    expect(store.rate).toBe(6_000);
    expect(one.rate).toBe(6_000);

    one.tryAcquire()!.throttled();
    budgets[0]!.tryAcquire()!.throttled();
    expect(store.cuts).toBe(1);
    expect(store.rate! / 6_000).toBeCloseTo(0.7, 1); // 0.7 × what a sent, a little below its rate
    const seen: [number, number][] = [];
    drive(clock, [one, ...budgets], 3_000, () => {
      if (clock.now() % 500 === 0) seen.push([store.rate!, one.rate]);
    });
    // budgets[1] did not see the 429; its curve starts again all the same (before the fix it
    // raised the budget back to its maximum within a few heartbeats).
    for (const [shared, alone] of seen) expect(shared / alone).toBeCloseTo(1, 1);
    expect(store.rate).toBeLessThan(6_000);
  });

  it("cuts the whole rate by the controller's factor when a member that sends little sees the 429", () => {
    const clock = new ManualClock();
    const { store, budgets } = members(2, clock, { maxUnitsPerMinute: 6_000 });
    const [busy, idle] = budgets as [SharedBudget, SharedBudget];
    drive(clock, [busy], 20_000, () => {
      if (clock.now() % 1_000 === 0) idle.tryAcquire()?.success(); // 60 units/min
    });
    const before = store.rate!;
    expect(idle.limiter.rate).toBeGreaterThan(3 * 60); // its floor and its demand
    idle.tryAcquire()!.throttled();
    expect(store.cuts).toBe(1);
    // CUBIC cuts to 0.7 × what was sent: the idle member's 60 units/min plus the others' shares,
    // not 0.7 × 60 / its share of the whole rate.
    expect(store.rate! / before).toBeGreaterThan(0.6);
  });

  it('raises the whole rate by one AIMD step per interval, however many members wait', () => {
    const clock = new ManualClock();
    const options = { controller: 'aimd' as const, maxUnitsPerMinute: 60_000 };
    const one = single(clock, options);
    const { store, budgets } = members(3, clock, options);
    drive(clock, [one, ...budgets], 45_500);
    expect(one.rate).toBe(1_500 + 4 * 120);
    expect(store.rate).toBeCloseTo(1_500 + 4 * 120, -1);
  });

  it('records the epoch a queued permit was granted in, not the one its callback runs in', async () => {
    const clock = new ManualClock();
    const { store, budgets } = members(2, clock, { initialUnitsPerMinute: 600 });
    const [a, b] = budgets as [SharedBudget, SharedBudget];
    clock.advance(250); // both members known: 300 units/min each, 5 units in a full bucket
    while (b.tryAcquire() !== undefined);
    const queued = b.acquire(); // b's next unit comes in 200 ms
    (await a.acquire()).throttled(); // a cuts the whole rate now: epoch 1
    expect(store.cuts).toBe(1);
    expect(b.state.epoch).toBe(0);
    // b's unit is granted at 450 ms, before b hears of the cut at its heartbeat at 500 ms; the
    // permit's callback runs after both.
    clock.advance(300);
    expect(b.state.epoch).toBe(1);
    const permit = await queued;
    permit.throttled(); // sent before b knew of the cut: no second cut for the same burst
    expect(store.cuts).toBe(1);
  });
});
