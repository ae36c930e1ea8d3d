import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The server of examples/global-dispatcher.ts: a bucket of 20 that refills 1,200 a minute; 429 with Retry-After: 1. */
const QUOTA = 1_200;
const BUCKET = 20;
const RETRY_AFTER_MS = 1_000;
/** ms from a grant to its answer. */
const LATENCY_MS = 20;

/**
 * `callers` calls at once through an unlimited limiter on a manual clock (1 ms steps, no sleeps),
 * each retried after a 429 until it gets a 200; returns the limiter once all got theirs.
 */
async function coldBurst(callers: number) {
  const clock = new ManualClock(0);
  const limiter = new AdaptiveRateLimiter({ clock, random: () => 0 });
  let tokens = BUCKET;
  let refilledAt = 0;
  const take = (now: number): boolean => {
    tokens = Math.min(BUCKET, tokens + ((now - refilledAt) * QUOTA) / 60_000);
    refilledAt = now;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  };
  let answered = 0;
  const inFlight: { permit: Permit; at: number }[] = [];
  const call = (): void => {
    void limiter.acquire().then((permit) => inFlight.push({ permit, at: clock.now() + LATENCY_MS }));
  };
  for (let i = 0; i < callers; i++) call();
  for (let t = 0; t < 20_000 && answered < callers; t++) {
    await flush();
    const now = clock.now();
    for (const f of inFlight.filter((x) => x.at <= now)) {
      inFlight.splice(inFlight.indexOf(f), 1);
      if (take(now)) {
        f.permit.success();
        answered++;
      } else {
        f.permit.throttled(RETRY_AFTER_MS);
        call();
      }
    }
    clock.advance(1);
  }
  return { limiter, answered };
}

describe('limiter: the rate learned after a cold burst', () => {
  it('60 calls at once against a bucket of 20 that refills 1,200 a minute: about the quota, not the burst read over ms', async () => {
    const { limiter, answered } = await coldBurst(60);
    expect(answered).toBe(60);
    const { rate, cuts } = limiter.snapshot();
    expect(cuts).toBeGreaterThanOrEqual(2);
    // Read over the ~100 ms it took, the bucket's 20 are 12,000 a minute; half of that was kept
    // (4,968-9,142 learned on the example before): a rate the server does not grant.
    expect(rate).toBeLessThanOrEqual(1.5 * QUOTA);
    expect(rate).toBeGreaterThanOrEqual(0.5 * QUOTA);
    limiter.close();
  });
});
