import { describe, expect, it } from 'vitest';
import { feed } from '../src/attempt-loop.js';
import { ManualClock } from '../src/clock.js';
import { InvalidArgumentError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AnnouncedQuota, Permit } from '../src/limiter/types.js';
import { MemoryBudgetStore } from '../src/redis/index.js';
import { sharedMembers } from './helpers/shared-members.js';

/** One announced quota passed where the list belongs (a plain JavaScript caller can). */
const ONE = { limit: 100, remaining: 0, resetMs: 1_000 } as unknown as readonly AnnouncedQuota[];

const { member } = sharedMembers('quota-argument', { initialUnitsPerMinute: 600 }, []);

/** Each kind of permit, and the rate its limiter reports now. */
const kinds: [string, () => { permit: Permit; rate: () => number }][] = [
  [
    'a limiter',
    () => {
      const limiter = new AdaptiveRateLimiter({
        clock: new ManualClock(),
        initialUnitsPerMinute: 600,
        slowStart: false,
      });
      return { permit: limiter.tryAcquire()!, rate: () => limiter.rate };
    },
  ],
  [
    'a limiter of two budgets',
    () => {
      const limiter = new AdaptiveRateLimiter({
        clock: new ManualClock(),
        slowStart: false,
        budgets: { requests: { initialUnitsPerMinute: 600 }, tokens: { initialUnitsPerMinute: 6_000 } },
      });
      return { permit: limiter.tryAcquire(1, { tokens: 10 })!, rate: () => limiter.rate };
    },
  ],
  [
    'a shared budget',
    () => {
      const clock = new ManualClock();
      const budget = member({ store: new MemoryBudgetStore({ clock }), clock });
      return { permit: budget.tryAcquire()!, rate: () => budget.state.rate ?? Number.NaN };
    },
  ],
];

describe('a permit given a wait that is not a number of ms >= 0', () => {
  for (const [kind, make] of kinds) {
    it(`${kind}: throttled and failed throw InvalidArgumentError naming retryAfterMs, and the permit is still open`, () => {
      const { permit, rate } = make();
      const before = rate();
      for (const wait of [Number.NaN, -1, '30', Number('Wed, 21 Oct 2015 07:28:00 GMT')]) {
        for (const call of [() => permit.throttled(wait as number), () => permit.failed(wait as number)]) {
          expect(call).toThrow(InvalidArgumentError);
          expect(call).toThrow(/retryAfterMs: must be a number of ms >= 0/);
        }
      }
      permit.throttled(1_000);
      expect(rate()).toBeLessThan(before);
    });
  }
});

describe('a permit given units used that are not a finite number >= 0', () => {
  for (const [kind, make] of kinds) {
    it(`${kind}: success throws InvalidArgumentError naming unitsUsed and the value, and the permit is still open`, () => {
      const { permit, rate } = make();
      const before = rate();
      for (const used of [Number.NaN, -1, Number.POSITIVE_INFINITY, '3', Number(undefined)]) {
        const call = () => permit.success(used as number);
        expect(call).toThrow(InvalidArgumentError);
        expect(call).toThrow(/unitsUsed: must be a finite number of units >= 0/);
        expect(call).toThrow(`(received ${typeof used === 'string' ? JSON.stringify(used) : String(used)})`);
      }
      // Not settled by the calls refused: the 429 reported properly still cuts the rate.
      permit.throttled(1_000);
      expect(rate()).toBeLessThan(before);
    });
  }

  it("the adapters' path (feed) never throws after the server answered: the permit's units count", () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 600, slowStart: false });
    const permit = limiter.tryAcquire(2)!;
    expect(() => feed(permit, { kind: 'success', units: Number.NaN })).not.toThrow();
    // Settled: a later call does nothing.
    permit.throttled();
    expect(limiter.snapshot().throttles).toBe(0);
  });
});

describe('a permit given one quota object where the list of quotas belongs', () => {
  for (const [kind, make] of kinds) {
    it(`${kind}: throws InvalidArgumentError naming the argument, and the permit is still open`, () => {
      const { permit, rate } = make();
      const before = rate();
      for (const call of [
        () => permit.success(1, ONE),
        () => permit.throttled(1_000, ONE),
        () => permit.failed(undefined, ONE),
      ]) {
        expect(call).toThrow(InvalidArgumentError);
        expect(call).toThrow(/quota: must be an array of announced quotas/);
      }
      // Not settled by the calls refused: the 429 reported properly still cuts the rate.
      permit.throttled();
      expect(rate()).toBeLessThan(before);
    });
  }
});

describe('a permit given a list of quotas with a hole', () => {
  for (const [kind, make] of kinds) {
    it(`${kind}: throws InvalidArgumentError naming the element and its value, and the permit is still open`, () => {
      const { permit, rate } = make();
      const before = rate();
      for (const hole of [undefined, null, 5]) {
        const list = [
          { limit: 100, remaining: 50, resetMs: 1_000 },
          hole,
        ] as unknown as readonly AnnouncedQuota[];
        for (const [method, call] of [
          ['success', () => permit.success(1, list)],
          ['throttled', () => permit.throttled(1_000, list)],
          ['failed', () => permit.failed(undefined, list)],
        ] as const) {
          expect(call).toThrow(InvalidArgumentError);
          expect(call).toThrow(
            `${method}(): quota[1]: must be an announced quota { policy, remaining, resetMs, limit, windowMs }: ${String(hole)} is not an object (received ${String(hole)})`,
          );
        }
      }
      // Not settled by the calls refused: the 429 reported properly still cuts the rate.
      permit.throttled();
      expect(rate()).toBeLessThan(before);
    });
  }
});
