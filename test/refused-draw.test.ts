import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import { wrap } from '../src/wrap/wrap.js';

// A call the API refused (a 429) consumed none of what it would have used: the tokens it drew
// from another budget that did not run out are given back. The request it drew from the first
// budget is not (an API counts the requests it refuses), nor the draw of a budget that ran out
// (the 429 shows that budget's level was too high). On a manual clock, each bucket's level is
// read from the snapshot.

/** 60 requests/min and 60,000 tokens/min, each in a one-second bucket: 1 request, 1,000 tokens. */
const TWO: AdaptiveLimiterOptions = {
  budgets: {
    requests: { initialUnitsPerMinute: 60, burst: 'second' },
    tokens: { initialUnitsPerMinute: 60_000, burst: 'second' },
  },
};

function setup() {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, slowStart: false, ...TWO });
  const level = (budget: 'requests' | 'tokens') => limiter.snapshot().budgets?.[budget]?.tokens;
  return { clock, limiter, level };
}

describe('a refused call gives back what it drew from the other budgets', () => {
  it('refunds the tokens of a throttled permit and keeps its request charged', async () => {
    const { limiter, level } = setup();
    const permit = await limiter.acquire(1, { costs: { tokens: 700 } });
    expect(level('tokens')).toBe(300);
    expect(level('requests')).toBe(0);

    permit.throttled(undefined, undefined, ['requests']);

    expect(level('tokens')).toBe(1_000);
    expect(level('requests')).toBe(0);
  });

  it('applies a quota the answer announces after the refund: the server’s word wins', async () => {
    const { limiter, level } = setup();
    const permit = await limiter.acquire(1, { costs: { tokens: 700 } });
    permit.throttled(undefined, [{ budget: 'tokens', remaining: 200, resetMs: 1_000 }], ['requests']);
    expect(level('tokens')).toBe(200);
  });

  it('keeps the draw of the budget that ran out (the 429 says its level was too high)', async () => {
    const { limiter, level } = setup();
    const permit = await limiter.acquire(1, { costs: { tokens: 700 } });
    permit.throttled(undefined, undefined, ['tokens']);
    expect(level('tokens')).toBe(300);
    expect(level('requests')).toBe(0);
  });

  it('keeps every draw when the answer does not say which budget ran out', async () => {
    const { limiter, level } = setup();
    (await limiter.acquire(1, { costs: { tokens: 700 } })).throttled();
    expect(level('tokens')).toBe(300);
  });

  it('keeps the charge of a success and of a failure (the API may have done the work)', async () => {
    const { clock, limiter, level } = setup();
    (await limiter.acquire(1, { costs: { tokens: 300 } })).success();
    expect(level('tokens')).toBe(700);
    clock.advance(1_000); // a request unit again; the tokens bucket full
    const failed = await limiter.acquire(1, { costs: { tokens: 300 } });
    failed.failed();
    expect(level('tokens')).toBe(700);
  });

  it('charges a call wrapped with costs once, not once per refused attempt', async () => {
    const { limiter, level } = setup();
    let calls = 0;
    const call = wrap(
      limiter,
      async () => {
        calls++;
        if (calls === 1) throw Object.assign(new Error('slow down'), { status: 429 });
        return 'ok';
      },
      // The error names the budget that ran out, as the HTTP adapters' api reads a 429's body.
      { costs: { tokens: 400 }, classifyError: () => ({ kind: 'throttled', budgets: ['requests'] }) },
    );
    const done = call();
    // The retry waits for a request unit: one second at 60 a minute (the refused one stays charged).
    await new Promise((resolve) => setImmediate(resolve));
    expect(level('tokens')).toBe(1_000);
    expect(limiter.snapshot().queued).toBe(1);
    (limiter as unknown as { clock: ManualClock }).clock.advance(60_000);
    expect(await done).toBe('ok');
    expect(calls).toBe(2);
  });
});
