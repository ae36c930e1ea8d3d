import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';
import { against } from './helpers/refilling-answers.js';
import { flush as tick } from './helpers/unhandled.js';

describe('rule (2): the floor "serves a call within 90 % of maxWait" holds a limiter above what the server lets through', () => {
  it('a limiter with maxWait 500 ms against a server of 60 requests a minute stays at 133/min: half its sends are 429s, for good', async () => {
    // One caller at 240/min; the server lets 60/min through. Before the change the limiter learned
    // about 52/min (2 429s in the last 5 minutes of 10). Now every cut stops at
    // 60,000 / (500 * 0.9) = 133/min: 207 429s of 414 sends in those 5 minutes, and fewer
    // successes than before (the Retry-After pauses of the 429s take the room).
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, maxWait: 500, random: () => 0.5 });
    const counts = await against(limiter, clock, 60, 1, 250, 600_000, 300_000);
    expect(limiter.snapshot().rate).toBeLessThanOrEqual(66);
    expect(counts.throttled).toBeLessThanOrEqual(counts.ok / 10);
  });
});

/**
 * `n` processes (`instanceCount: n`, `maxWait`), each asking every `everyMs` for 1 unit, against
 * one server bucket of `perMinute` (holding `n`): the 429s and successes of all, over the last
 * `measureMs` of `runMs`, and the rates.
 */
async function crowdAgainst(
  n: number,
  maxWait: number,
  perMinute: number,
  everyMs: number,
  runMs: number,
  measureMs: number,
) {
  const clock = new ManualClock();
  const limiters = Array.from(
    { length: n },
    () =>
      new AdaptiveRateLimiter({
        clock,
        maxWait,
        instanceCount: n,
        initialUnitsPerMinute: 300,
        random: () => 0.5,
      }),
  );
  let level = n;
  let last = clock.now();
  const counts = { ok: 0, throttled: 0 };
  const answer = (permit: Permit) => {
    const now = clock.now();
    level = Math.min(n, level + ((now - last) * perMinute) / 60_000);
    last = now;
    const counted = now >= runMs - measureMs;
    if (level >= 1) {
      level -= 1;
      if (counted) counts.ok++;
      permit.success();
    } else {
      if (counted) counts.throttled++;
      permit.throttled(1_000);
    }
  };
  for (let t = 0, round = 0; t < runMs; t += everyMs, round++) {
    // Each round another process asks first.
    for (let i = 0; i < n; i++) limiters[(round + i) % n]!.acquire(1).then(answer, () => {});
    await tick();
    for (let s = 0; s < everyMs; s += 50) {
      clock.advance(50);
      await tick();
    }
  }
  const rates = limiters.map((l) => l.snapshot().rate);
  for (const l of limiters) l.close();
  return { counts, rates };
}

describe('rule (2) with instanceCount > 1: the floor is per process, the quota is the whole', () => {
  it('5 processes (instanceCount 5, maxWait 2 s) on a quota of 60/min: 4 of them held at 33/min each, 429s outnumber successes', async () => {
    // Before the change: 4 429s in the last 5 minutes of 10. Now the cuts of each process stop at
    // 60,000 / (2,000 * 0.9) = 33/min, the five together at 3 times the quota: 668 429s for 300
    // successes in those 5 minutes (a maxWait of 5 s: 268; the default 60 s: 20).
    const { counts } = await crowdAgainst(5, 2_000, 60, 1_000, 600_000, 300_000);
    expect(counts.throttled).toBeLessThanOrEqual(counts.ok / 10);
  });
});
