import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateController, RateControllerState } from '../src/controllers/types.js';
import type { BudgetControllerState } from '../src/redis/budget-controller.js';
import { MemoryBudgetStore, type SharedBudget } from '../src/redis/index.js';
import { sharedMembers, storeDownWhile } from './helpers/shared-members.js';

const { member, members } = sharedMembers(
  'controller',
  {
    initialUnitsPerMinute: 12_000,
    decreaseCooldown: 0,
    heartbeatInterval: 250,
    // These tests send without moving the clock between grants: the one-second bucket.
    burst: 'second',
  },
  [],
);

/** Every 50 ms for `ms`: each member sends `perStep` units, each answered as a success. */
function send(clock: ManualClock, budgets: readonly SharedBudget[], perStep: number, ms: number): void {
  for (let t = 0; t < ms; t += 50) {
    for (const b of budgets) for (let i = 0; i < perStep; i++) b.tryAcquire()?.success();
    clock.advance(50);
  }
}

/** A controller that records what it is shown: cuts by half, raises by 100 after a wait. */
function recording(): RateController & {
  throttled: BudgetControllerState[];
  succeeded: RateControllerState[];
} {
  const throttled: BudgetControllerState[] = [];
  const succeeded: RateControllerState[] = [];
  return {
    throttled,
    succeeded,
    onThrottled(state) {
      throttled.push(state as BudgetControllerState);
      return state.rate / 2;
    },
    onSuccess(state) {
      succeeded.push(state);
      return state.waited ? state.rate + 100 : undefined;
    },
  };
}

describe("the budget's controller, once for the budget (ManualClock, MemoryBudgetStore)", () => {
  it("shows a cut the whole rate and the members' accepted sum, as one limiter's controller would see it", () => {
    const clock = new ManualClock();
    const controller = recording();
    const { store, budgets } = members(2, clock, { controller });
    const [a, b] = budgets as [SharedBudget, SharedBudget];
    send(clock, budgets, 5, 3_000); // 100 units/s each: 6,000 units/min each, 12,000 in all
    send(clock, [a], 5, 3_000); // then b sends nothing: 6,000 units/min accepted in all
    expect(a.state.accepted).toBeCloseTo(6_000, -2);
    a.tryAcquire()!.throttled();
    expect(store.cuts).toBe(1);
    const seen = controller.throttled.at(-1)!;
    expect(seen.instanceCount).toBe(1);
    expect(seen.rate).toBe(12_000);
    expect(seen.acceptedRate).toBeCloseTo(6_000, -2);
    // What the server accepted is what a cut starts from (before: the whole send rate, or
    // this member's own as its part of it).
    expect(seen.measuredRate).toBeCloseTo(6_000, -2);
    expect(store.rate).toBe(6_000); // the recording controller halves the whole rate: decided once
    clock.advance(250);
    expect(a.limiter.rate + b.limiter.rate).toBeCloseTo(6_000, 0);
  });

  it('leaves "unlimited" from what the server accepted of the members, as the measured rate too', () => {
    const clock = new ManualClock();
    const controller = recording();
    const { store, budgets } = members(2, clock, { controller, initialUnitsPerMinute: undefined });
    const [a, b] = budgets as [SharedBudget, SharedBudget];
    send(clock, budgets, 5, 3_000); // 6,000 units/min each, all accepted
    expect(store.rate).toBeUndefined();
    a.tryAcquire()!.throttled();
    const seen = controller.throttled.at(-1)!;
    expect(seen.rate).toBeCloseTo(12_000, -2); // the members' accepted sum, not a's own
    expect(seen.measuredRate).toBeCloseTo(12_000, -2); // all of it accepted
    expect(store.rate).toBeCloseTo(6_000, -2);
    clock.advance(250); // b hears of it: no longer unlimited
    expect(b.limiter.rate).toBeLessThan(6_000);
    expect(a.limiter.rate + b.limiter.rate).toBeCloseTo(store.rate!, -1);
  });

  it('leaving "unlimited", the member that cut takes an equal part of the members heard, not the whole rate', () => {
    const clock = new ManualClock();
    const controller = recording();
    const { store, budgets } = members(3, clock, { controller, initialUnitsPerMinute: undefined });
    const [a, b, c] = budgets as [SharedBudget, SharedBudget, SharedBudget];
    send(clock, budgets, 5, 3_000); // 6,000 units/min each, all accepted: no share answered yet
    expect(a.state.share).toBeUndefined();
    a.tryAcquire()!.throttled(); // no Retry-After: a keeps sending at what the cut left it
    const whole = store.rate!;
    expect(whole).toBeCloseTo(9_000, -2); // the recording controller halves the accepted 18,000
    // Before: the store's answer gave a the whole rate (its part was the guess, 1 member) until
    // its next heartbeat, while b and c were still unlimited.
    expect(a.limiter.rate).toBeCloseTo(whole / 3, 0);
    clock.advance(250); // every member hears of the cut
    expect(a.limiter.rate + b.limiter.rate + c.limiter.rate).toBeCloseTo(whole, -1);
  });

  it('leaving "unlimited" under a Retry-After pause, the first cut waits for reports made after the throttle and starts from half their sum', () => {
    const clock = new ManualClock();
    const { store, budgets } = members(3, clock, { initialUnitsPerMinute: undefined });
    const [a, b, c] = budgets as [SharedBudget, SharedBudget, SharedBudget];
    send(clock, [a], 5, 3_000); // a alone: 6,000 units/min, reported at each heartbeat
    send(clock, budgets, 5, 200); // b and c start between two heartbeats: none reported yet
    a.tryAcquire()!.throttled(1_000);
    // Before: cut at once from the reports of the last heartbeat (b and c: nothing), 0.9 × a's
    // 6,000. Now the cut waits for a heartbeat after every member reported.
    expect(store.cuts).toBe(0);
    for (let i = 0; i < 20 && store.cuts === 0; i++) clock.advance(50);
    expect(store.cuts).toBe(1);
    const sum = a.state.accepted!; // the answer the cut was computed from
    expect(sum).toBeGreaterThan(12_000); // b's and c's sends counted
    // The probe's estimate is half the fresh sum (every request so far got through): it cuts to
    // 0.9 × that, and to no less than half the rate it cuts from (the sum): half the sum.
    expect(store.rate! / (sum / 2)).toBeCloseTo(1, 1);
    // Within the shared pause: nobody sent at the old estimate meanwhile.
    expect(b.snapshot().pausedUntil).toBeDefined();
    expect(c.snapshot().pausedUntil).toBeDefined();
  });

  it('leaving "unlimited" under a Retry-After longer than maxPause, the first cut waits only if the capped pause is long enough', () => {
    const clock = new ManualClock();
    // maxPause 500 ms: the pause every member takes is 500 ms, two heartbeats, too short for a
    // fresh heartbeat to land within it. The Retry-After asked (1,000 ms) is long enough.
    const { store, budgets } = members(3, clock, { initialUnitsPerMinute: undefined, maxPause: 500 });
    const [a, b] = budgets as [SharedBudget, SharedBudget, SharedBudget];
    send(clock, budgets, 5, 3_000);
    a.tryAcquire()!.throttled(1_000);
    // Before: compared the Retry-After asked, so the cut waited for a heartbeat 312 ms on, landing
    // after the others' 500-ms pause ended (they resumed unlimited meanwhile). Now: cut at once.
    expect(store.cuts).toBe(1);
    const pausedAt = clock.now();
    clock.advance(250); // b's heartbeat: it hears of the pause and of the cut, within the pause
    expect(b.snapshot().pausedUntil! - pausedAt).toBeLessThanOrEqual(500);
    expect(b.limiter.rate).toBeLessThan(store.rate!);
  });

  it('a first cut waiting for fresh reports is not made from a throttle long over when the store comes back', () => {
    const clock = new ManualClock();
    const memory = new MemoryBudgetStore({ clock });
    let down = false;
    const store = storeDownWhile(memory, () => down);
    const budgets = [0, 1].map(() => member({ store, clock, initialUnitsPerMinute: undefined }));
    for (const b of budgets) b.on('degraded', () => {});
    for (const b of budgets) b.on('recovered', () => {});
    const [a] = budgets as [SharedBudget, SharedBudget];
    const send = (ms: number) => {
      for (let t = 0; t < ms; t += 50) {
        for (const b of budgets) for (let i = 0; i < 5; i++) b.tryAcquire()?.success();
        clock.advance(50);
      }
    };
    send(3_000);
    a.tryAcquire()!.throttled(1_000); // the first cut waits for a heartbeat 312 ms on
    down = true; // ... which fails: the store is down for a minute
    send(60_000);
    expect(memory.cuts).toBe(0);
    down = false;
    for (let t = 0; t < 2_000 && memory.cuts === 0; t += 50) send(50);
    expect(memory.cuts).toBe(1);
    const sum = a.state.accepted!; // the answer the cut was computed from
    // The pause ended a minute ago: the sum is what the members send now, not the burst before the
    // 429. The cut is any cut's (0.9 x the sum), not one to half of it.
    expect(memory.rate! / sum).toBeGreaterThan(0.8);
  });

  it('runs the probe controller by default, once for the budget: drains at 0.9 × the accepted sum', () => {
    const clock = new ManualClock();
    const { store, budgets } = members(2, clock, { initialUnitsPerMinute: undefined });
    send(clock, budgets, 5, 3_000); // 6,000 units/min each, all accepted
    budgets[0]!.tryAcquire()!.throttled();
    expect(store.cuts).toBe(1);
    // AIMD would have cut to 0.7 × 12,000.
    expect(store.rate! / (0.9 * 12_000)).toBeCloseTo(1, 1);
  });

  it("keeps the probe controller's books in the store: the cuts, the draw, the units accepted since the cut", () => {
    const clock = new ManualClock();
    const controller = recording();
    const { store, budgets } = members(2, clock, { controller, random: () => 0.25 });
    const [a, b] = budgets as [SharedBudget, SharedBudget];
    send(clock, budgets, 5, 3_000); // 12,000 units/min accepted in all
    a.tryAcquire()!.throttled(); // cut 1, by a: the whole rate halves to 6,000
    const first = controller.throttled.at(-1)!;
    expect(first.decreases).toEqual([]);
    expect(first.acceptedRateSinceLastDecrease).toBeUndefined();
    clock.advance(250); // both hear of the cut
    send(clock, budgets, 1, 2_000); // 20 units/s each for 2 s: 80 units since the cut, each reported
    clock.advance(250);
    b.tryAcquire()!.throttled(); // cut 2, by the other member: it sees the budget's books
    expect(store.cuts).toBe(2);
    const second = controller.throttled.at(-1)!;
    expect(second.decreases).toHaveLength(1);
    expect(second.decreases[0]!.rateBefore).toBe(12_000);
    expect(second.decreases[0]!.acceptedRate).toBeCloseTo(12_000, -2);
    expect(second.decreases[0]!.acceptedRateSincePrevious).toBeUndefined();
    // a's draw at cut 1 (books without a cut show 0.5), the same for every member.
    expect(second.random).toBe(0.25);
    // 80 units (and a's throttled one not) over 2.5 s: 1,920 units/min.
    expect(second.acceptedRateSinceLastDecrease).toBeCloseTo(1_920, -2);
  });

  it("cuts CUBIC's whole rate from the accepted sum: 0.7 × what the members got accepted", () => {
    const clock = new ManualClock();
    const { store, budgets } = members(3, clock, { controller: 'cubic', initialUnitsPerMinute: 30_000 });
    send(clock, budgets, 2, 3_000); // 40 units/s each: 2,400 units/min each, 7,200 in all
    budgets[2]!.tryAcquire()!.throttled();
    expect(store.cuts).toBe(1);
    expect(store.rate! / (0.7 * 7_200)).toBeCloseTo(1, 1);
  });

  it('raises the whole rate once per change, whichever member proposes it', () => {
    const clock = new ManualClock();
    const controller = recording();
    const { store, budgets } = members(3, clock, { controller, initialUnitsPerMinute: 600 });
    clock.advance(250);
    const waiting = budgets.map((b) => {
      while (b.tryAcquire() !== undefined);
      return b.acquire().catch(() => undefined); // each member waits: a proposal each
    });
    clock.advance(250);
    clock.advance(250);
    // Three members proposed +100 from the same books: the store made one change per version.
    expect(store.rate).toBeLessThanOrEqual(600 + 3 * 100);
    expect(store.rate).toBeGreaterThan(600);
    const shown = controller.succeeded.at(-1)!;
    expect(shown.instanceCount).toBe(1);
    expect(shown.maxRate).toBe(Number.POSITIVE_INFINITY);
    for (const b of budgets) b.limiter.close();
    return Promise.all(waiting);
  });

  it('proposes nothing during the shared pause, as a single limiter raises nothing while paused', () => {
    const clock = new ManualClock();
    const controller = recording();
    const { store, budgets } = members(2, clock, { controller, initialUnitsPerMinute: 600 });
    clock.advance(250);
    budgets[0]!.tryAcquire()!.throttled(5_000); // a cut to 300, and a pause of 5 s for all
    expect(store.rate).toBe(300);
    const waiting = budgets.map((b) => b.acquire().catch(() => undefined)); // both wait
    clock.advance(4_500);
    expect(store.rate).toBe(300);
    clock.advance(1_000); // the pause is over: the next heartbeats propose
    expect(store.rate).toBeGreaterThan(300);
    for (const b of budgets) b.limiter.close();
    return Promise.all(waiting);
  });

  it("asks the controller nothing on a member's success: the local rate moves only with the budget", () => {
    const clock = new ManualClock();
    const controller = recording();
    const { budgets } = members(1, clock, { controller, initialUnitsPerMinute: 600 });
    const calls = controller.succeeded.length;
    budgets[0]!.tryAcquire()!.success();
    expect(controller.succeeded).toHaveLength(calls);
  });
});
