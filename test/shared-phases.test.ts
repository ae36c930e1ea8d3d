import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { PACING_SLACK_MS, Pacer } from '../src/limiter/pacer.js';
import { MemoryBudgetStore } from '../src/redis/index.js';
import { sharedMembers } from './helpers/shared-members.js';

/** Distance of `x` from the nearest whole number. */
const offGrid = (x: number) => Math.abs(x - Math.round(x));

describe('Pacer.align', () => {
  it("moves a busy pacer's next slot onto the grid by at most half a gap, the slots after it stay there, and leaves an idle one", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 60, max: 60_000 }), // units/min: gaps of 1 s down to 1 ms
        fc.double({ min: 0, max: 0.999, noNaN: true }),
        fc.double({ min: -1e6, max: 1e6, noNaN: true }),
        fc.integer({ min: 0, max: 20 }), // slots reserved before the alignment
        fc.integer({ min: 0, max: 5_000 }), // idle ms before it
        (rate, phase, offset, reserved, idle) => {
          const gap = 60_000 / rate;
          let now = 1_000_000;
          const pacer = new Pacer(rate, now);
          for (let i = 0; i < reserved; i++) pacer.take(1, now);
          now += idle;
          const before = pacer.readyAt(1, now - PACING_SLACK_MS);
          pacer.align(phase, offset, now);
          const after = pacer.readyAt(1, 0); // the next slot itself
          const onGrid = (t: number) => offGrid((t + offset) / gap - phase) * gap;
          if (before <= now) {
            // Idle (its next slot due): left as it was, the next request goes at once.
            expect(after).toBe(pacer.readyAt(1, 0));
            expect(Math.max(after, now - PACING_SLACK_MS)).toBe(Math.max(before, now - PACING_SLACK_MS));
            return;
          }
          expect(onGrid(after)).toBeLessThan(1e-6 * Math.max(1, gap));
          expect(after).toBeGreaterThanOrEqual(now - PACING_SLACK_MS - 1e-6);
          // At most half a gap from where it was, unless that was before the floor.
          if (before - gap / 2 >= now - PACING_SLACK_MS)
            expect(Math.abs(after - before)).toBeLessThanOrEqual(gap / 2 + 1e-6);
          // The next slots keep the gap: still on the grid.
          pacer.take(1, after, true);
          pacer.take(1, after + gap, true);
          expect(onGrid(pacer.readyAt(1, 0))).toBeLessThan(1e-6 * Math.max(1, gap));
        },
      ),
    );
  });

  it('does nothing while unlimited', () => {
    const pacer = new Pacer(Number.POSITIVE_INFINITY, 0);
    pacer.align(0.5, 123, 1_000);
    expect(pacer.readyAt(1, 1_000)).toBe(1_000);
  });
});

describe('the members of a shared budget at the same rate', () => {
  const { member } = sharedMembers(
    'phases',
    { initialUnitsPerMinute: 1_800, heartbeatInterval: 250, maxWait: 60_000 },
    [],
  );

  /** Three busy members of one budget of 1,800/min (100 ms between one member's slots); their grant times. */
  function run(): number[][] {
    const clock = new ManualClock(0);
    const store = new MemoryBudgetStore({ clock });
    const grants: number[][] = [];
    for (let i = 0; i < 3; i++) {
      const budget = member({ store, clock });
      const times: number[] = [];
      grants.push(times);
      budget.limiter.on('acquired', () => times.push(clock.now()));
      // Demand above the share: always a queue, so the member sends at every slot.
      for (let k = 0; k < 200; k++)
        budget.acquire().then(
          (p) => p.success(),
          () => {},
        );
    }
    for (let t = 0; t < 2_000; t++) clock.advance(1);
    return grants;
  }

  it('send in turn: their slots are a third of the gap apart on the shared clock', () => {
    const grants = run();
    const gap = 100;
    // After the members learned of each other (a heartbeat or two), each keeps one phase.
    const phases = grants.map((times) => {
      const late = times.filter((t) => t >= 1_000);
      expect(late.length).toBeGreaterThanOrEqual(9);
      const phase = late[0]! % gap;
      for (const t of late) expect(offGrid((t - late[0]!) / gap) * gap).toBeLessThanOrEqual(1);
      return phase;
    });
    const sorted = [...phases].sort((a, b) => a - b);
    const spacing = [sorted[1]! - sorted[0]!, sorted[2]! - sorted[1]!, gap + sorted[0]! - sorted[2]!];
    // A third of the gap each (33.3 ms), within the manual clock's 1 ms steps.
    for (const d of spacing) expect(Math.abs(d - gap / 3)).toBeLessThanOrEqual(2);
  });
});
