import { setImmediate as turn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { MemoryBudgetStore, type SharedBudget } from '../src/redis/index.js';
import { sharedMembers } from './helpers/shared-members.js';

const { member } = sharedMembers(
  'own-pause-away',
  { controller: 'aimd', initialUnitsPerMinute: 1_800, heartbeatInterval: 250, maxWait: 60_000 },
  [],
);

/**
 * Three members on a manual clock, each with more demand than its share (always a queue); the
 * budget's controller AIMD (a cut is 0.7 of the rate). Member `a` is answered 429 with
 * `Retry-After: 1` on its first request granted from each of `throttleAt`; every member's answers
 * are 5xx (`failed`) before `succeedFrom`, successes after. Returns, for each 429, the others'
 * parts of the whole rate sampled every ms of a's pause, and what a sent during its pauses.
 */
async function run(throttleAt: readonly number[], succeedFrom: number) {
  const clock = new ManualClock(0);
  const store = new MemoryBudgetStore({ clock });
  const members: SharedBudget[] = [];
  let next = 0;
  let sentWhilePaused = 0;
  for (let i = 0; i < 3; i++) {
    const budget = member({ store, clock });
    members.push(budget);
    for (let k = 0; k < 400; k++)
      budget.acquire().then(
        (p) => {
          const now = clock.now();
          if (i === 0) {
            const until = budget.snapshot().pausedUntil;
            if (until !== undefined && until > now) sentWhilePaused++;
            if (next < throttleAt.length && now >= throttleAt[next]!) {
              next++;
              return p.throttled(1_000);
            }
          }
          return now < succeedFrom ? p.failed() : p.success();
        },
        () => {},
      );
  }
  const [a, b, c] = members as [SharedBudget, SharedBudget, SharedBudget];
  const part = (m: SharedBudget) => m.limiter.rate / (m.state.rate ?? Number.NaN);
  const others: number[][] = throttleAt.map(() => []);
  let sumAfter = 0;
  const end = (throttleAt.at(-1) ?? 0) + 3_000;
  for (let t = 0; t < end; t++) {
    clock.advance(1);
    await turn(); // the granted requests' answers
    const until = a.snapshot().pausedUntil;
    if (next > 0 && until !== undefined && clock.now() < until) others[next - 1]!.push(part(b), part(c));
    else if (next > 0) sumAfter = Math.max(sumAfter, part(a) + part(b) + part(c));
  }
  expect(next).toBe(throttleAt.length);
  return { others, sentWhilePaused, sumAfter };
}

/** The part of the samples at about half the whole rate (a third taken from the member paused). */
const atHalf = (parts: readonly number[]) => parts.filter((p) => p > 0.45).length / parts.length;

describe('a member paused for a second of its own gives its part to the others only within the refill', () => {
  it('after a cut to at most what the members got accepted since the cut before, the others take its part for that second', async () => {
    // The first 429 is the budget's first cut: nothing read over a cycle before it, nothing given.
    // The second cuts 0.7 of a rate the members got accepted since the first: given.
    const { others, sentWhilePaused, sumAfter } = await run([3_000, 8_000], 0);
    expect(sentWhilePaused).toBe(0); // it waits what the server asked
    expect(Math.max(...others[0]!)).toBeLessThan(0.36);
    // From the others' first heartbeat after the 429 to one before the pause ends: about half each
    // (the floor of 5 % kept for the member paused), never more.
    expect(atHalf(others[1]!)).toBeGreaterThanOrEqual(0.4);
    expect(Math.max(...others[1]!)).toBeLessThan(0.5);
    // Back at their parts before it sends again: the parts never add up above the whole rate
    // (within the shares' 0.5 % tolerance).
    expect(sumAfter).toBeLessThan(1.01);
  });

  it('not after a cut above what the members got accepted since the cut before', async () => {
    // Between the two 429s only the last 2 s were accepted: the cycle reads about a third of the
    // rate, below the cut's 0.7 of it (a server's burst read in full by the 3 s window is the case).
    const { others, sentWhilePaused } = await run([3_000, 9_000], 7_000);
    expect(sentWhilePaused).toBe(0);
    for (const parts of others) expect(Math.max(...parts)).toBeLessThan(0.36);
  });
});
