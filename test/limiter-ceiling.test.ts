import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateController, RateControllerState } from '../src/controllers/types.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import type { AnnouncedQuota, ReadQuota } from '../src/limiter/types.js';
import { wrap } from '../src/wrap/wrap.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

function setup(options: AdaptiveLimiterOptions = {}) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, ...options });
  return { clock, limiter };
}

/** One request granted now and answered with `quota` (a success unless told). */
function answer(
  limiter: AdaptiveRateLimiter,
  quota: AnnouncedQuota[] | undefined,
  kind: 'success' | 'throttled' | 'failed' = 'success',
  retryAfterMs?: number,
) {
  const permit = limiter.tryAcquire();
  if (permit === undefined) throw new Error('no permit: the test expected units to be free');
  if (kind === 'success') permit.success(undefined, quota);
  else if (kind === 'throttled') permit.throttled(retryAfterMs, quota);
  else permit.failed(retryAfterMs, quota);
}

/** How many of `n` acquires are granted within `ms` of the clock, stepping 10 ms. */
async function grantedWithin(limiter: AdaptiveRateLimiter, clock: ManualClock, n: number, ms: number) {
  let granted = 0;
  const rejected: unknown[] = [];
  for (let i = 0; i < n; i++)
    limiter.acquire().then(
      () => granted++,
      (e) => rejected.push(e),
    );
  await flush();
  for (let t = 0; t < ms; t += 10) {
    clock.advance(10);
    await flush();
  }
  limiter.close();
  await flush();
  return granted;
}

const minute: AnnouncedQuota = { remaining: 600, resetMs: 60_000, limit: 600, windowMs: 60_000 };

describe('AdaptiveRateLimiter: announced quotas', () => {
  it.each([
    // 600/min: one second of it (10) at once, then 10 per second.
    ['second', 30],
    // 600/min paced: one at once, then one every 100 ms.
    ['paced', 21],
  ] as const)(
    'never sends faster than the announced ceiling, even while unlimited (burst %s)',
    async (burst, n) => {
      const { clock, limiter } = setup({ burst });
      answer(limiter, [minute]);
      expect(limiter.snapshot().announcedRate).toBe(600);
      expect(limiter.rate).toBe(Number.POSITIVE_INFINITY);
      expect(await grantedWithin(limiter, clock, 100, 2_000)).toBe(n);
    },
  );

  it.each([
    // 1,200/min holds 20 units, cut to one second of the ceiling (10) at once, then 10 per second.
    ['second', 30],
    // Paced at the ceiling's gap (100 ms), not the rate's (50 ms): the slot the first grant
    // reserved (0.8 unit) is respaced to 80 ms, then one every 100 ms.
    ['paced', 20],
  ] as const)('sends at the ceiling below a finite rate (burst %s)', async (burst, n) => {
    const { clock, limiter } = setup({ burst, initialUnitsPerMinute: 1_200 });
    answer(limiter, [minute]);
    expect(limiter.rate).toBe(1_200);
    expect(limiter.snapshot().announcedRate).toBe(600);
    expect(await grantedWithin(limiter, clock, 100, 2_000)).toBe(n);
  });

  it('takes remaining over the time to reset when it is lower than the quota over the window', () => {
    const { limiter } = setup();
    answer(limiter, [{ remaining: 100, resetMs: 30_000, limit: 600, windowMs: 60_000 }]);
    expect(limiter.snapshot().announcedRate).toBe(200);
  });

  it('holds a remaining/reset pair that overstates the rate to the quota over the window', () => {
    const { limiter } = setup();
    answer(limiter, [{ remaining: 10_000, resetMs: 10_000, limit: 10_000, windowMs: 1_000_000 }]);
    expect(limiter.snapshot().announcedRate).toBe(600);
  });

  it('takes the lowest of several policies', () => {
    const { limiter } = setup();
    answer(limiter, [
      { policy: 'burst', remaining: 100, resetMs: 60_000, limit: 100, windowMs: 60_000 },
      { policy: 'daily', remaining: 1000, resetMs: 86_400_000, limit: 1000, windowMs: 86_400_000 },
    ]);
    expect(limiter.snapshot().announcedRate).toBeCloseTo(1000 / 1440, 9);
  });

  it('pauses until the reset of a policy with nothing remaining', () => {
    const { clock, limiter } = setup();
    clock.advance(1_000);
    answer(limiter, [{ remaining: 0, resetMs: 30_000 }]);
    expect(limiter.snapshot().pausedUntil).toBe(31_000);
    expect(limiter.tryAcquire()).toBeUndefined();
  });

  it('lets a Retry-After win over an announced reset, shorter or longer', () => {
    const { clock, limiter } = setup();
    answer(limiter, [{ remaining: 0, resetMs: 30_000 }], 'throttled', 5_000);
    expect(limiter.snapshot().pausedUntil).toBe(5_000);
    clock.advance(5_000);
    answer(limiter, [{ remaining: 0, resetMs: 1_000 }], 'failed', 20_000);
    expect(limiter.snapshot().pausedUntil).toBe(25_000);
  });

  it('caps the pause for a huge reset by maxPause, and reads such a reset as maxPause without a window', () => {
    const { limiter } = setup({ maxPause: 60_000 });
    answer(limiter, [{ policy: 'a', remaining: 50, resetMs: 1e12 }]);
    expect(limiter.snapshot().announcedRate).toBe(50);
    answer(limiter, [{ policy: 'b', remaining: 0, resetMs: 1e12 }]);
    expect(limiter.snapshot().pausedUntil).toBe(60_000);
  });

  it('reads a reset longer than the window as the window', () => {
    const { limiter } = setup();
    answer(limiter, [{ remaining: 100, resetMs: 3_600_000, limit: 100, windowMs: 60_000 }]);
    expect(limiter.snapshot().announcedRate).toBe(100);
  });

  it.each([
    ['a negative remaining', { remaining: -5, resetMs: 10_000 }, 'remaining -5'],
    ['a NaN reset', { remaining: 5, resetMs: Number.NaN }, 'resetMs NaN'],
    ['a string', { remaining: '5', resetMs: 10_000 } as unknown as AnnouncedQuota, 'remaining "5"'],
    ['an infinite window', { limit: 5, windowMs: Number.POSITIVE_INFINITY }, 'windowMs Infinity'],
    ['a zero window', { limit: 5, windowMs: 0 }, 'windowMs 0'],
  ])('refuses %s (naming the field and its value), and reads nothing from it', (_name, quota, field) => {
    const { limiter } = setup();
    expect(() => answer(limiter, [quota])).toThrow(field);
    expect(limiter.snapshot().announcedRate).toBeUndefined();
    expect(limiter.snapshot().pausedUntil).toBeUndefined();
  });

  it('ignores a quota that announces nothing', () => {
    const { limiter } = setup();
    answer(limiter, [{}]);
    expect(limiter.snapshot().announcedRate).toBeUndefined();
    expect(limiter.snapshot().pausedUntil).toBeUndefined();
  });

  it('keeps a policy through answers that do not announce it until its reset, then forgets it', () => {
    // The one-second bucket: the answers go without moving the clock.
    const { clock, limiter } = setup({ burst: 'second' });
    answer(limiter, [minute]);
    for (let i = 0; i < 8; i++) answer(limiter, undefined);
    answer(limiter, []);
    expect(limiter.snapshot().announcedRate).toBe(600);
    clock.advance(60_000);
    answer(limiter, []);
    expect(limiter.snapshot().announcedRate).toBeUndefined();
  });

  it('moves from remaining/reset to the quota over the window once the reset passes', () => {
    const { clock, limiter } = setup();
    answer(limiter, [{ remaining: 10, resetMs: 10_000, limit: 600, windowMs: 60_000 }]);
    expect(limiter.snapshot().announcedRate).toBe(60);
    clock.advance(10_000);
    expect(limiter.snapshot().announcedRate).toBe(600);
  });

  it('scales the ceiling to its part when other clients drain the same quota', () => {
    const { clock, limiter } = setup();
    // Each answer of ours sees `remaining` drop by 2: one unit is ours, one another client's.
    let remaining = 600;
    for (let i = 0; i < 60; i++) {
      answer(limiter, [{ remaining, resetMs: 60_000 - clock.now(), limit: 600, windowMs: 60_000 }]);
      remaining -= 2;
      clock.advance(200);
    }
    const rate = limiter.snapshot().announcedRate ?? 0;
    expect(rate).toBeGreaterThan(600 * 0.45);
    expect(rate).toBeLessThan(600 * 0.56);
  });

  it('starts a policy at 1/instanceCount of the ceiling until its part is measured', () => {
    const { limiter } = setup({ instanceCount: 3 });
    answer(limiter, [{ limit: 600, windowMs: 60_000 }]);
    expect(limiter.snapshot().announcedRate).toBe(200);
  });

  it('keeps the whole ceiling when only this process drains the quota', () => {
    const { clock, limiter } = setup();
    let remaining = 600;
    for (let i = 0; i < 60; i++) {
      answer(limiter, [{ remaining, resetMs: 60_000 - clock.now(), limit: 600, windowMs: 60_000 }]);
      remaining -= 1;
      clock.advance(100);
    }
    expect(limiter.snapshot().announcedRate).toBe(600);
  });

  it('gives the controllers the announced rate, and no raise above it', () => {
    const states: RateControllerState[] = [];
    const controller: RateController = {
      onThrottled: (s) => s.rate / 2,
      onSuccess: (s) => {
        states.push(s);
        return s.rate + 100;
      },
    };
    const { clock, limiter } = setup({ controller, initialUnitsPerMinute: 120 });
    answer(limiter, [{ remaining: 300, resetMs: 60_000 }]);
    expect(states.at(-1)?.announcedRate).toBe(300);
    expect(limiter.rate).toBe(220);
    clock.advance(1_000);
    answer(limiter, [{ remaining: 300, resetMs: 60_000 }]);
    expect(limiter.rate).toBe(320);
    // At the ceiling: the controller is not asked for more.
    clock.advance(1_000);
    answer(limiter, [{ remaining: 300, resetMs: 60_000 }]);
    expect(limiter.rate).toBe(320);
  });
});

describe('the probe controller with an announced rate', () => {
  it('goes to the announced rate at once, once a request waited, instead of probing for it', () => {
    const { limiter } = setup({ controller: 'probe', initialUnitsPerMinute: 120, burst: 'second' });
    const first = limiter.tryAcquire();
    limiter.tryAcquire();
    // The bucket of 2 is empty: this one waits, so the controller is asked at the next success.
    expect(limiter.tryAcquire()).toBeUndefined();
    first?.success(undefined, [minute]);
    expect(limiter.snapshot().announcedRate).toBe(600);
    expect(limiter.rate).toBe(600);
  });
});

describe('announced quotas through wrap', () => {
  it('takes the quota a classifier returns in its outcome', async () => {
    const { limiter } = setup();
    const call = wrap(limiter, async () => ({ left: 30, resetMs: 60_000 }), {
      classify: (r) => ({ kind: 'success', quota: [{ remaining: r.left, resetMs: r.resetMs }] }),
    });
    await call();
    expect(limiter.snapshot().announcedRate).toBe(30);
  });
});

describe('AdaptiveRateLimiter: a fixed window told from a refilling bucket', () => {
  /** `n` permits taken while nothing caps the limiter, answered later one by one. */
  function permits(limiter: AdaptiveRateLimiter, n: number) {
    return Array.from({ length: n }, () => {
      const permit = limiter.tryAcquire();
      if (permit === undefined) throw new Error('no permit');
      return permit;
    });
  }
  /** A bucket of 600 a minute announcing its tokens and a next token a second away (rounded up). */
  const bucket = (remaining: number): AnnouncedQuota[] => [
    { policy: 'b', limit: 600, windowMs: 60_000, remaining, resetMs: 1_000 },
  ];

  it('a bucket whose remaining rises before its reset is paced at its quota, not remaining over the reset', () => {
    const { clock, limiter } = setup();
    const [a, b] = permits(limiter, 2);
    a?.success(undefined, bucket(3));
    // One reading: remaining over the reset (3 a second).
    expect(limiter.snapshot().announcedRate).toBe(180);
    clock.advance(200);
    b?.success(undefined, bucket(4));
    expect(limiter.snapshot().announcedRate).toBe(600);
  });

  it('a bucket whose reset stays short answer after answer, remaining steady, is a bucket too', () => {
    const { clock, limiter } = setup({ slowStart: false });
    const ps = permits(limiter, 30);
    // A full bucket: each answer sees 9 left and the next token within a second, for 2.9 s.
    ps.forEach((p, i) => {
      if (i > 0) clock.advance(100);
      p.success(undefined, bucket(9));
      // Not before the first reading's reset and 1.5 s of rounding have passed.
      if (i === 24) expect(limiter.snapshot().announcedRate).toBe(540);
    });
    expect(limiter.snapshot().announcedRate).toBe(600);
  });

  it("a fixed window's last seconds (short resets, then a new window) are not read as a bucket", () => {
    const { clock, limiter } = setup();
    const ps = permits(limiter, 4);
    const window = (remaining: number, resetMs: number) =>
      [{ limit: 600, windowMs: 60_000, remaining, resetMs }] as AnnouncedQuota[];
    ps[0]?.success(undefined, window(20, 1_800));
    clock.advance(1_300);
    ps[1]?.success(undefined, window(10, 500));
    clock.advance(600);
    // The new window: a minute away, more left.
    ps[2]?.success(undefined, window(599, 59_900));
    clock.advance(100);
    ps[3]?.success(undefined, window(598, 59_800));
    // A fixed window with no documented burst: remaining over the time to reset.
    expect(limiter.snapshot().announcedRate).toBeCloseTo((598 * 60_000) / 59_800, 5);
  });

  it('a bucket with nothing left pauses for one unit to refill, not for its rounded-up reset', () => {
    const { clock, limiter } = setup();
    const [a, b, c] = permits(limiter, 3);
    a?.success(undefined, bucket(1));
    clock.advance(100);
    b?.success(undefined, bucket(2));
    c?.success(undefined, bucket(0));
    // 600 a minute: the next token within 100 ms (one unit), not the announced 1 s.
    expect(limiter.snapshot().pausedUntil).toBe(clock.now() + 100);
  });

  /** A GitHub-like hour: 5,000, 4,880 left, the reset 50 minutes away; GitHub's burst 900/min. */
  const hour = (remaining: number, resetMs: number, burstPerMinute?: number) =>
    [
      { policy: 'core', limit: 5_000, windowMs: 3_600_000, remaining, resetMs, burstPerMinute },
    ] as ReadQuota[];

  it('a fixed window whose API documents a burst is spent at that burst, not spread over the hour', async () => {
    const { clock, limiter } = setup();
    const [a, b] = permits(limiter, 2);
    a?.success(undefined, hour(4_880, 3_000_000, 900));
    // One reading: not told apart yet; the hour's average.
    expect(limiter.snapshot().announcedRate).toBeCloseTo(5_000 / 60, 5);
    clock.advance(50);
    b?.success(undefined, hour(4_879, 2_999_950, 900));
    // The same reset, remaining falling: a fixed window, spent at 900 a minute.
    expect(limiter.snapshot().announcedRate).toBe(900);
    // 40 calls at once: granted in 2.7 s (900 a minute is 15 a second), not in 28 s.
    expect(await grantedWithin(limiter, clock, 40, 2_700)).toBe(40);
  });

  it('a fixed window spent to 0 pauses until its reset', () => {
    const { clock, limiter } = setup({ maxPause: 3_600_000 });
    const [a, b, c] = permits(limiter, 3);
    a?.success(undefined, hour(2, 600_000, 900));
    b?.success(undefined, hour(1, 600_000, 900));
    c?.success(undefined, hour(0, 600_000, 900));
    expect(limiter.snapshot().announcedRate).toBe(900);
    expect(limiter.snapshot().pausedUntil).toBe(clock.now() + 600_000);
  });

  it('a fixed window with no documented burst keeps remaining over the time to reset', () => {
    const { clock, limiter } = setup();
    const [a, b] = permits(limiter, 2);
    a?.success(undefined, hour(4_880, 3_000_000));
    clock.advance(50);
    b?.success(undefined, hour(4_879, 2_999_950));
    expect(limiter.snapshot().announcedRate).toBeCloseTo(5_000 / 60, 5);
  });

  it('a fixed window drained by other clients too is not spent at the burst', () => {
    const { clock, limiter } = setup();
    const ps = permits(limiter, 6);
    // Each answer of ours sees the remaining fall by 10: other clients take 9 in 10.
    ps.forEach((p, i) => {
      clock.advance(10);
      p.success(undefined, hour(4_880 - 10 * i, 3_000_000 - 10 * i, 900));
    });
    expect(limiter.snapshot().announcedRate).toBeLessThan(900);
  });

  it('its own calls answered out of order are its own: a slow call is counted when granted, not when answered', () => {
    const { clock, limiter } = setup({ slowStart: false });
    const ps = permits(limiter, 42);
    // The API counts a call when it arrives (in grant order): every fast (odd) answer sees the
    // slow (even) call before it counted too, and the slow answers come last with older readings.
    for (let i = 1; i < 42; i += 2) {
      clock.advance(10);
      ps[i]?.success(undefined, hour(4_880 - (i + 1), 3_000_000 - 10 * i, 900));
    }
    expect(limiter.snapshot().announcedRate).toBe(900);
    for (let i = 0; i < 42; i += 2) {
      clock.advance(10);
      ps[i]?.success(undefined, hour(4_880 - (i + 1), 3_000_000 - 10 * i, 900));
    }
    // Not another client's drain (a part of 3/4), nor a refill (a bucket at the hour's average).
    expect(limiter.snapshot().announcedRate).toBe(900);
  });

  it('a slow answer older than the last reading (more left) does not move the ceiling', () => {
    const { clock, limiter } = setup({ maxPause: 3_600_000 });
    const [slow, a, b] = permits(limiter, 3);
    a?.success(undefined, hour(4_000, 3_000_000, 900));
    clock.advance(50);
    b?.success(undefined, hour(3_999, 2_999_950, 900));
    // Granted before both, answered with more left: what it read is older than what they did.
    // Read as the last reading, it was a refill: a bucket paced at the hour's average.
    slow?.success(undefined, hour(4_001, 2_999_900, 900));
    expect(limiter.snapshot().announcedRate).toBe(900);
  });

  it('an answer granted before the last one read but with less left reached the API after it: read', () => {
    const { clock, limiter } = setup({ maxPause: 3_600_000 });
    const [early, a, b] = permits(limiter, 3);
    a?.success(undefined, hour(2, 3_000_000, 900));
    clock.advance(50);
    b?.success(undefined, hour(1, 2_999_950, 900));
    // Sent on another connection, it arrived last and took the last unit: the window is spent.
    early?.success(undefined, hour(0, 2_999_900, 900));
    expect(limiter.snapshot().pausedUntil).toBe(clock.now() + 2_999_900);
  });

  it('its 429s, which the API did not count, are not counted as its part of the drain', () => {
    const { clock, limiter } = setup({ slowStart: false });
    const ps = permits(limiter, 60);
    // Per pair of its calls: one throttled (not counted), one answered; another client takes one
    // unit between: the remaining falls by 2, 1 of them this process's (a part of 1/2).
    let remaining = 4_880;
    for (let i = 0; i < 60; i += 2) {
      clock.advance(10);
      ps[i]?.throttled(undefined, hour(remaining, 3_000_000 - 10 * i, 900));
      remaining -= 2;
      ps[i + 1]?.success(undefined, hour(remaining, 3_000_000 - 10 * i, 900));
    }
    expect(limiter.snapshot().announcedRate).toBeLessThan(900);
  });

  it('a quota its reader gives as announced (an LLM budget) keeps remaining over its reset', () => {
    const { clock, limiter } = setup();
    const [a, b] = permits(limiter, 2);
    const llm = (remaining: number) =>
      [{ limit: 6_000, windowMs: 60_000, remaining, resetMs: 100, asAnnounced: true }] as ReadQuota[];
    a?.success(undefined, llm(1));
    clock.advance(50);
    b?.success(undefined, llm(2));
    expect(limiter.snapshot().announcedRate).toBe(1_200);
  });
});
