import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';

/**
 * The probe controller (the default) on a manual clock, fed as a saturated sender is: every
 * 10 ms it takes every slot the pacer gives and each answer comes back at once.
 */
function setup() {
  const clock = new ManualClock(0);
  const limiter = new AdaptiveRateLimiter({
    clock,
    controller: 'probe',
    initialUnitsPerMinute: 3_000,
    random: () => 0,
  });
  /** Sends for `ms`; each answer is a success, or what `answer` says for the n-th request. */
  const send = (ms: number, answer: (p: Permit) => void = (p) => p.success()) => {
    for (let t = 0; t < ms; t += 10) {
      clock.advance(10);
      for (let p = limiter.tryAcquire(); p !== undefined; p = limiter.tryAcquire()) answer(p);
    }
  };
  return { clock, limiter, send };
}

describe('probe on a limiter: the Retry-After pause after its own overshoot', () => {
  it('counts toward the drain: the rate is back at the cruise rate as the pause ends, not a drain later', () => {
    const { limiter, send } = setup();
    send(3_000);
    // The first cut: its own overshoot at the rate it sends, 1 s of Retry-After.
    let throttled = false;
    send(10, (p) => {
      if (throttled) return p.success();
      throttled = true;
      p.throttled(1_000);
    });
    const drained = limiter.rate;
    const cruise = (drained / 0.9) * 0.97; // 0.9 and 0.97 x the ceiling
    send(990); // the pause: nothing goes, and the rate stays drained
    expect(limiter.snapshot().pausedUntil).toBeDefined();
    expect(limiter.rate).toBe(drained);
    send(100);
    // At the cruise rate (or probing above it) as soon as the pause is over.
    expect(limiter.snapshot().pausedUntil).toBeUndefined();
    expect(limiter.rate).toBeGreaterThanOrEqual(cruise - 1e-6);
  });

  it('drains for the drain time when there was no pause', () => {
    const { limiter, send } = setup();
    send(3_000);
    let throttled = false;
    send(10, (p) => {
      if (throttled) return p.success();
      throttled = true;
      p.throttled();
    });
    const drained = limiter.rate;
    send(900);
    expect(limiter.rate).toBe(drained);
    send(200);
    expect(limiter.rate).toBeGreaterThanOrEqual((drained / 0.9) * 0.97 - 1e-6);
  });
});

describe('probe on a limiter: a start estimate the next cut read low', () => {
  it('climbs half the way back to the first estimate in the first probe round and all of it in the next', () => {
    const clock = new ManualClock(0);
    const limiter = new AdaptiveRateLimiter({
      clock,
      controller: 'probe',
      initialUnitsPerMinute: 3_000,
      maxUnitsPerMinute: 3_000,
      random: () => 0,
    });
    /** Sends for `ms`; the n-th request of the run is answered by `answer(n)`. */
    const send = (ms: number, answer: (n: number) => 'ok' | 'throttled' = () => 'ok') => {
      let n = 0;
      for (let t = 0; t < ms; t += 10) {
        clock.advance(10);
        for (let p = limiter.tryAcquire(); p !== undefined; p = limiter.tryAcquire()) {
          if (answer(n++) === 'ok') p.success();
          else p.throttled();
        }
      }
    };
    send(3_000);
    // The first cut: about 3,000 got through, the start's estimate (drain at 0.9 x it).
    send(20, (n) => (n === 0 ? 'throttled' : 'ok'));
    const first = limiter.rate / 0.9;
    expect(first).toBeGreaterThan(2_900);
    const cruise = first * 0.97;
    // Another process, still unlimited, takes most of the quota: most answers are 429s, and the
    // next cut finds less than the first.
    send(2_000, (n) => (n % 4 === 0 ? 'ok' : 'throttled'));
    expect(limiter.snapshot().cuts).toBe(2);
    const drained = limiter.rate;
    expect(drained).toBeLessThan(0.8 * cruise);
    // It found its rate: every answer is a success again. The drain over (no hold on the
    // start's estimate), half the way back to the first estimate, then all of it a round (2 s)
    // later; the probe steps alone (a tenth of the estimate: +10 %, +30 %) would not be.
    const rates: number[] = [];
    for (let t = 0; t < 6_000; t += 10) {
      send(10);
      rates.push(limiter.rate);
    }
    const up = rates.findIndex((r) => r > drained);
    expect(up).toBeGreaterThanOrEqual(0);
    expect(rates[up]).toBeGreaterThan(drained + 0.3 * (cruise - drained));
    expect(rates[up]).toBeLessThan(cruise);
    expect(rates[up + 200]).toBeCloseTo(cruise, 6);
  });
});

describe('probe on a limiter: the start estimate', () => {
  it('probes above the very first cut by steps of a tenth of it, not of the probe step', () => {
    const clock = new ManualClock(0);
    // From 2,400 a minute: the first 429 comes after a second or so, when 16 answers and more
    // came, so the first cut's estimate is read over their time. (Unlimited, the first 429 came
    // after a handful of answers: an estimate read over a floor of time, which is only a floor
    // and goes on with the start-up instead, test/probe-scale.test.ts.)
    const limiter = new AdaptiveRateLimiter({
      clock,
      controller: 'probe',
      initialUnitsPerMinute: 2_400,
      random: () => 0,
    });
    /** The server lets 2,000 units/min through at most (a strict leaky bucket, burst 5). */
    let tat = 0;
    const send = (ms: number) => {
      for (let t = 0; t < ms; t += 10) {
        clock.advance(10);
        for (let p = limiter.tryAcquire(); p !== undefined; p = limiter.tryAcquire()) {
          const now = clock.now();
          if (tat - now > 5 * 30) p.throttled();
          else {
            tat = Math.max(tat, now) + 30;
            p.success();
          }
        }
      }
    };
    for (let t = 0; t < 10_000 && limiter.snapshot().cuts === 0; t += 10) send(10);
    expect(limiter.snapshot().cuts).toBe(1);
    const drained = limiter.rate;
    const estimate = drained / 0.9;
    const rates: number[] = [];
    for (let t = 0; t < 3_000; t += 10) {
      send(10);
      rates.push(limiter.rate);
    }
    const first = rates.find((r) => r > drained);
    // The drain over: cruise below the estimate plus a first step of a tenth of it (60 without).
    expect(first).toBeCloseTo(estimate * 0.97 + estimate * 0.1, 6);
  });
});

/**
 * A strict leaky bucket letting `quota` units/min through (burst 5), 429 with Retry-After: 1, fed
 * by a saturated sender: every 10 ms `send` takes every slot the limiter gives.
 */
function strictBucket(limiter: AdaptiveRateLimiter, clock: ManualClock) {
  let tat = 0;
  const bucket = {
    quota: 3_000,
    send(ms: number) {
      for (let t = 0; t < ms; t += 10) {
        clock.advance(10);
        for (let p = limiter.tryAcquire(); p !== undefined; p = limiter.tryAcquire()) {
          const now = clock.now();
          const gap = 60_000 / bucket.quota;
          if (tat - now > 5 * gap) p.throttled(1_000);
          else {
            tat = Math.max(tat, now) + gap;
            p.success();
          }
        }
      }
    },
  };
  return bucket;
}

/** A probe limiter at 1,000 units/min (random draws 0) saturating a fresh `strictBucket`. */
function probeOnStrictBucket() {
  const clock = new ManualClock(0);
  const limiter = new AdaptiveRateLimiter({
    clock,
    controller: 'probe',
    initialUnitsPerMinute: 1_000,
    random: () => 0,
  });
  return { limiter, bucket: strictBucket(limiter, clock) };
}

describe('probe on a limiter: a quota that dropped and came back', () => {
  it('does not double its hold at a ceiling well below the highest it found: it probes for the quota within seconds of its return', () => {
    const { limiter, bucket } = probeOnStrictBucket();
    const send = bucket.send;
    send(30_000);
    expect(limiter.rate).toBeGreaterThan(2_700);
    // Another client takes half of the quota for a minute: cut after cut at the same low ceiling.
    bucket.quota = 1_500;
    send(60_000);
    expect(limiter.rate).toBeLessThan(1_600);
    bucket.quota = 3_000;
    let back: number | undefined;
    for (let t = 0; t < 40_000 && back === undefined; t += 100) {
      send(100);
      if (limiter.rate > 2_600) back = t;
    }
    // Its hold (4 s here) does not double at that ceiling: 12 s to probe back up (18 s when it doubled).
    expect(back).toBeDefined();
    expect(back).toBeLessThan(15_000);
  });
});

describe('probe on a limiter: a share found after the start', () => {
  it('doubles its hold at a share found twice, though the start read more (another process was paused meanwhile)', () => {
    const { limiter, bucket } = probeOnStrictBucket();
    const send = bucket.send;
    let cuts = 0;
    limiter.on('decreased', () => cuts++);
    // The start reads the whole quota (the other process is not sending yet) ...
    send(9_000);
    expect(cuts).toBe(2);
    // ... then the other process takes half: cut after cut down to this process's share, where
    // its own probes find the same ceiling again.
    bucket.quota = 1_500;
    while (cuts < 7) send(10);
    send(1_000); // the Retry-After pause, which counts toward the drain
    const cruise = limiter.rate;
    expect(cruise).toBeLessThan(1_500);
    // The start's 3,000 does not count as the highest ceiling found: that share is, and its hold is
    // that ceiling's (4 x 4 s), doubled for each find in a row (64 s here; at that ceiling the cap
    // is 4 x maxHold, 120 s, not maxHold's 30 s): no probe yet 63 s after the drain.
    send(63_000);
    expect(cuts).toBe(7);
    expect(limiter.rate).toBe(cruise);
    // It still probes after the doubled hold.
    send(2_000);
    expect(limiter.rate).toBeGreaterThan(cruise);
  });
});

describe('probe on a limiter: a first cut made unlimited that read the sender, not the server', () => {
  it('takes what got through at the next overshoot as the ceiling: back to the quota within a probe cycle, not cycles of averages', () => {
    const clock = new ManualClock(0);
    // Unlimited (no initial rate): the cold start's cap no longer binds once the app sends less.
    const limiter = new AdaptiveRateLimiter({ clock, controller: 'probe', random: () => 0.5 });
    /** A strict leaky bucket of 5,800 units/min (burst 5), answering 100 ms after the grant. */
    const quota = 5_800;
    const gap = 60_000 / quota;
    let tat = 0;
    const inFlight: { at: number; permit: Permit; ok: boolean }[] = [];
    let accepted: number[] = [];
    /** Runs for `ms` keeping `demand` requests in flight; `forced` answers 429 whatever the bucket. */
    const run = (ms: number, demand: number, forced = () => false) => {
      for (let t = 0; t < ms; t += 10) {
        clock.advance(10);
        const now = clock.now();
        for (const f of inFlight.filter((x) => x.at <= now)) {
          inFlight.splice(inFlight.indexOf(f), 1);
          if (f.ok) {
            accepted.push(now);
            f.permit.success();
          } else f.permit.throttled(1_000);
        }
        while (inFlight.length < demand) {
          const permit = limiter.tryAcquire();
          if (permit === undefined) break;
          const ok = !forced() && tat - now <= 5 * gap;
          if (ok) tat = Math.max(tat, now) + gap;
          inFlight.push({ at: now + 100, permit, ok });
        }
      }
    };
    // Four requests in flight (2,400 a minute), then one 429 the bucket did not cause (another
    // client's burst): the first cut, made unlimited, reads the sender's 2,400.
    run(2_500, 4);
    run(10, 4, () => true);
    run(490, 4);
    expect(limiter.snapshot().cuts).toBe(1);
    expect(limiter.rate).toBeLessThan(2_400);
    // Then the app has far more to send. Its probe finds the quota's 5,800 (the bucket's 429s);
    // what got through there is the ceiling, not the average of a cycle that cruised at 2,400.
    // (Within two probe cycles: the hold at the highest ceiling found is 16-32 s, then the creep.)
    run(50_000, 400);
    accepted = [];
    run(10_000, 400);
    expect((accepted.length * 60_000) / 10_000).toBeGreaterThan(0.8 * quota);
  });
});
