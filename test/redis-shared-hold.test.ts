import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { type DecreaseRecord, probe } from '../src/controllers/index.js';
import type { MemoryBudgetStore, SharedBudget } from '../src/redis/index.js';
import { controllerStateOf } from './helpers/controller-state.js';
import { sharedMembers } from './helpers/shared-members.js';

/** A frozen state of the whole budget: one instance, a request waited, random 0. */
const state = controllerStateOf({ rate: 2910, rateBeforeLastDecrease: 4000 });

/** An overshoot from 4,000 at which 3,000 got through (2,900 over the cycle): ceiling 3,000, cruise 2,910. */
const FIRST: DecreaseRecord = { rateBefore: 4000, acceptedRate: 3000, acceptedRateSincePrevious: 2900 };
/** The same ceiling found again. */
const SECOND: DecreaseRecord = { rateBefore: 3300, acceptedRate: 3050, acceptedRateSincePrevious: 3000 };
/** Then a throttle while cruising at 2,000 (the quota dropped) and an overshoot there. */
const DROPPED: DecreaseRecord[] = [
  FIRST,
  { rateBefore: 2910, acceptedRate: 2000, acceptedRateSincePrevious: 2800 },
  { rateBefore: 2100, acceptedRate: 2000, acceptedRateSincePrevious: 1950 },
];

describe('the probe holds 4 times as long at its highest ceiling (its 429 pauses the process, every member of a shared budget)', () => {
  const controller = probe();
  it.each([
    [
      'one find of the ceiling: not after 1 + 4 s',
      { decreases: [FIRST], sinceLastDecrease: 5000 },
      undefined,
    ],
    // At its highest ceiling the probe creeps by half a margin of it (45) a round.
    ['one find of the ceiling: after 1 + 16 s', { decreases: [FIRST], sinceLastDecrease: 17_000 }, 2955],
    [
      'found twice: not after 1 + 8 s (the hold doubled: 32 s)',
      { rate: 2958.5, decreases: [FIRST, SECOND], sinceLastDecrease: 9000 },
      undefined,
    ],
    // At the highest ceiling the cap is 4 times maxHold (120 s): the doubled hold is not cut to 30 s.
    [
      'found twice: not after 1 + 30 s (maxHold)',
      { rate: 2958.5, decreases: [FIRST, SECOND], sinceLastDecrease: 31_000 },
      undefined,
    ],
    [
      'found twice: after 1 + 32 s',
      { rate: 2958.5, decreases: [FIRST, SECOND], sinceLastDecrease: 33_000 },
      3050 * 0.985,
    ],
    // Below the highest ceiling found (read low, or a quota that dropped and may come back): the
    // hold there is holdTime's (4 s), and the steps double from the first round.
    [
      'found below the highest ceiling by more than stableTolerance: after 1 + 4 s',
      {
        rate: 2522,
        decreases: [FIRST, SECOND, { rateBefore: 3100, acceptedRate: 2600, acceptedRateSincePrevious: 2550 }],
        sinceLastDecrease: 5000,
      },
      2600 * 0.97 + 60,
    ],
    [
      'well below the highest ceiling: after 1 + 4 s',
      { rate: 1800, decreases: DROPPED, sinceLastDecrease: 5000 },
      2000 * 0.97 + 60,
    ],
  ] as const)('%s', (_name, overrides, expected) => {
    const raised = controller.onSuccess(state(overrides));
    if (expected === undefined) expect(raised).toBeUndefined();
    else expect(raised).toBeCloseTo(expected, 6);
  });
});

describe('the probe at its highest ceiling creeps half a margin a round, then doubles', () => {
  const controller = probe();
  /** FIRST's ceiling (3,000): drain 1 s, the hold of 16 s (random 0), then round k of 2 s. */
  const round = (k: number) =>
    state({ decreases: [FIRST], sinceLastDecrease: 1_000 + 16_000 + k * 2_000 + 1 });
  it.each([
    // Round k: 45 x (k + 1) for 4 rounds (to 3 % above the ceiling), then 180 + 60 x (2^(k-3) - 1).
    [0, 2910 + 45],
    [1, 2910 + 90],
    [2, 2910 + 135],
    [3, 2910 + 180],
    [4, 2910 + 180 + 60],
    [5, 2910 + 180 + 180],
    [6, 2910 + 180 + 420],
  ] as const)('round %i', (k, expected) => {
    expect(controller.onSuccess(round(k))).toBeCloseTo(expected, 6);
  });

  it('below its highest ceiling (a quota that dropped) its steps double from the first round', () => {
    // The hold there is 4 s: round k starts at 1 + 4 + 2k s.
    const s = state({ rate: 1800, decreases: DROPPED, sinceLastDecrease: 5_000 + 2 * 2_000 + 1 });
    expect(controller.onSuccess(s)).toBeCloseTo(2000 * 0.97 + 420, 6);
  });
});

const { members } = sharedMembers(
  'hold',
  { initialUnitsPerMinute: 3_000, heartbeatInterval: 250, random: () => 0, burst: 'second' },
  [],
);

describe('three members of a shared budget (ManualClock, MemoryBudgetStore, the default probe)', () => {
  it('hold at the ceiling a second overshoot found 16 s before probing, not 4 s', () => {
    const { store, budgets, send } = threeMembers();
    send(3_000);
    budgets[0]!.tryAcquire()!.throttled(); // the first cut: an estimate, climbed without a hold
    send(6_000);
    const before = store.cuts;
    budgets[1]!.tryAcquire()!.throttled(); // an overshoot of that climb: a ceiling
    expect(store.cuts).toBe(before + 1);
    const cut = store.rate!;
    const cruise = (cut / 0.9) * 0.97; // drained at 0.9 x the ceiling, then cruising 3 % below it
    send(12_000); // drain 1 s, then 11 s: a single limiter's hold (4 s) is long over
    expect(store.rate!).toBeCloseTo(cruise, 0);
    send(6_000); // 18 s: past the budget's hold (16 s), into the probe's first round
    expect(store.rate!).toBeGreaterThan(cruise + 1);
  });

  it("creep from the ceiling before the probe's steps double: 3 % above it after four rounds", () => {
    const { store, budgets, send } = threeMembers();
    send(3_000);
    budgets[0]!.tryAcquire()!.throttled(); // the first cut: an estimate
    send(6_000);
    budgets[1]!.tryAcquire()!.throttled(); // an overshoot of its climb: the ceiling
    const ceiling = store.rate! / 0.9; // drained at 0.9 x the ceiling
    send(17_000 + 2 * 2_000 + 500); // drain 1 s, the hold 16 s, then the probe's rounds 0-2
    // Three rounds of half a margin: 1.5 % above the ceiling (doubled steps of 60: 3,000 x 0.97 + 420).
    expect(store.rate!).toBeGreaterThan(ceiling * 1.01);
    expect(store.rate!).toBeLessThanOrEqual(ceiling * 1.015 + 1);
    send(2 * 2_000); // round 4: a margin above it, then the usual step
    expect(store.rate!).toBeCloseTo(ceiling * 1.03 + 60, -1);
  });
});

/**
 * Three members of one shared budget on a ManualClock and a MemoryBudgetStore, and `send`: every
 * 50 ms for `ms`, each member asks for 2 units (2,400/min each, more than its share: it waits).
 */
function threeMembers(): {
  store: MemoryBudgetStore;
  budgets: SharedBudget[];
  send: (ms: number) => void;
} {
  const clock = new ManualClock();
  const { store, budgets } = members(3, clock);
  const send = (ms: number) => {
    for (let t = 0; t < ms; t += 50) {
      for (const b of budgets) for (let i = 0; i < 2; i++) b.tryAcquire()?.success();
      clock.advance(50);
    }
  };
  return { store, budgets, send };
}
