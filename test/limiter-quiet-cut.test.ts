import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { grantedWithin } from './helpers/llm-stream.js';

// A first 429 after a quiet spell, on a limiter (or a budget) still unlimited: its accepted-rate
// window holds no answer (the process sent nothing), so it is no reading of what the server lets
// through. The cut starts from what the process sent, not from the empty window's 0, which took
// the rate to its minimum (1 unit a minute) whatever the process had been sending.

/** Five calls 200 ms apart, answered; then `quiet` ms with nothing sent; then one call throttled. */
async function quietThen429(
  limiter: AdaptiveRateLimiter,
  clock: ManualClock,
  quiet: number,
  costs?: { tokens: number },
) {
  for (let i = 0; i < 5; i++) {
    const permit = await limiter.acquire(1, costs === undefined ? {} : { costs });
    clock.advance(200);
    permit.success();
  }
  clock.advance(quiet);
  const permit = await limiter.acquire(1, costs === undefined ? {} : { costs });
  clock.advance(200);
  permit.throttled(1_000, undefined, costs === undefined ? undefined : ['tokens']);
}

describe('a first cut after a quiet spell', () => {
  it.each([30_000, 3_600_000])(
    'of an LLM tokens budget (%i ms quiet): near what the process sent, not the minimum; the next call is not held for hours',
    async (quiet) => {
      const clock = new ManualClock();
      const limiter = new AdaptiveRateLimiter({ clock, budgets: { requests: {}, tokens: {} } });
      await quietThen429(limiter, clock, quiet, { tokens: 500 });
      const tokens = limiter.snapshot().budgets?.tokens;
      // It sent 3,000 tokens over about 1.2 s of calls: thousands a minute, not 1.
      expect(tokens?.rate).toBeGreaterThan(1_000);
      expect(tokens?.acceptedRate).toBe(0);
      // The next call of 500 tokens is granted within maxWait (60 s), the clock moved a second at a
      // time (before: refused, its wait some 500 minutes).
      expect(await grantedWithin(limiter, clock, { tokens: 500 })).toBe('granted');
    },
  );

  it('of a limiter of one budget (30 s quiet): not the minimum either', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock });
    await quietThen429(limiter, clock, 30_000);
    expect(limiter.snapshot().rate).toBeGreaterThan(1);
  });

  it('with answers in the window, the cut still reads what got through', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, budgets: { requests: {}, tokens: {} } });
    await quietThen429(limiter, clock, 0, { tokens: 500 });
    const tokens = limiter.snapshot().budgets?.tokens;
    // 2,500 tokens answered over the last 1.2 s of the window: 125,000 a minute, cut below it.
    expect(tokens?.acceptedRate).toBe(125_000);
    expect(tokens?.rate).toBeLessThan(125_000);
  });
});
