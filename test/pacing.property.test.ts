import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { PACING_SLACK_MS, WAKE_BATCH_MS, WAKE_GAP_MS } from '../src/limiter/pacer.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

type Command = { op: 'acquire'; units: number } | { op: 'advance'; ms: number };

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constant('acquire' as const), units: fc.integer({ min: 1, max: 3 }) }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 400 }) }),
  },
);

/** Runs `commands` against a paced limiter at a fixed `rate`; returns the grants in order. */
async function run(commands: readonly Command[], rate: number) {
  const clock = new ManualClock(1_000);
  const limiter = new AdaptiveRateLimiter({
    clock,
    initialUnitsPerMinute: rate,
    minUnitsPerMinute: rate,
    maxUnitsPerMinute: rate,
    maxWait: 10 * 60_000,
  });
  const asked: { units: number; at: number }[] = [];
  const grants: { index: number; at: number; units: number }[] = [];
  // The grant's time is read when the limiter grants (inside advance), not when a callback runs;
  // grants are numbered in the order they happen.
  limiter.on('acquired', (e) => grants.push({ index: grants.length, at: clock.now(), units: e.units }));
  const order: number[] = [];
  for (const c of commands) {
    if (c.op === 'acquire') {
      const index = asked.length;
      asked.push({ units: c.units, at: clock.now() });
      void limiter.acquire(c.units).then(() => order.push(index));
    } else {
      clock.advance(c.ms);
    }
    await flush();
  }
  // Enough time for every waiter: all the units asked for, at the rate.
  const total = asked.reduce((sum, a) => sum + a.units, 0);
  clock.advance((total * 60_000) / rate + 1_000);
  await flush();
  limiter.close();
  return { asked, grants, order };
}

describe('pacing (fast-check)', () => {
  it('grants every waiter in order, each at its own slot: no more than the rate plus 10 ms of it in any window, and no later than its slot (2 ms after it when slots are under 0.25 ms apart: a wake serves them by the batch)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(command, { minLength: 1, maxLength: 80, size: 'max' }),
        fc.constantFrom(60, 600, 3_000, 120_000, 480_000),
        async (commands, rate) => {
          const { asked, grants, order } = await run(commands, rate);
          const gap = 60_000 / rate;
          // Slots under WAKE_GAP_MS apart are served a batch per timer wake, each at most
          // WAKE_BATCH_MS after its slot (the rate holds: the window check above).
          const wakeLate = gap < WAKE_GAP_MS ? WAKE_BATCH_MS : 0;
          // Every acquire was granted, first in first out, with the units it asked for.
          expect(order).toEqual(asked.map((_, i) => i));
          expect(grants.map((g) => g.units)).toEqual(asked.map((a) => a.units));
          // The latest each grant's slot can be (a batched grant goes after its slot, never before).
          const slots: number[] = [];
          for (let i = 0; i < grants.length; i++) {
            // Units granted from grant i up to (not counting) grant j fit the time between them
            // plus the slack idle time may earn: slots are never shared.
            let units = 0;
            for (let j = i + 1; j < grants.length; j++) {
              units += grants[j - 1]!.units;
              const window = grants[j]!.at - grants[i]!.at;
              expect(units).toBeLessThanOrEqual(((window + PACING_SLACK_MS) * rate) / 60_000 + 1e-6);
            }
            // And none waits past its slot: the later of its arrival and the previous slot's end.
            const due =
              i === 0 ? grants[0]!.at : Math.max(asked[i]!.at, slots[i - 1]! + grants[i - 1]!.units * gap);
            expect(grants[i]!.at).toBeLessThanOrEqual(due + wakeLate + 1e-6);
            slots.push(Math.min(grants[i]!.at, due));
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  it('wakes no group of waiters at once below 6,000 units/min (one grant per instant)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(command, { minLength: 1, maxLength: 60 }),
        fc.constantFrom(60, 600, 3_000),
        async (commands, rate) => {
          const { grants } = await run(commands, rate);
          for (let i = 1; i < grants.length; i++) expect(grants[i]!.at).toBeGreaterThan(grants[i - 1]!.at);
        },
      ),
      { numRuns: 100 },
    );
  });
});
