import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { type DecreaseRecord, probe, type RateControllerState } from '../src/controllers/index.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';
import { controllerStateOf } from './helpers/controller-state.js';

/** A frozen state at 60,000 units/min after a cut, a request waited, one instance, random 0. */
const state = controllerStateOf({ rate: 60_000, rateBeforeLastDecrease: 60_000 });

/** A cut from 66,000 units/min where 60,000 got through over the cycle too: a sure ceiling of 60,000. */
const SURE: DecreaseRecord = { rateBefore: 66_000, acceptedRate: 60_000, acceptedRateSincePrevious: 60_000 };

/** A cut from 22,000 where 20,000 got through, at 20,000 requests/min: a sure ceiling of 20,000. */
const SURE_20K: DecreaseRecord = {
  rateBefore: 22_000,
  acceptedRate: 20_000,
  acceptedRateSincePrevious: 20_000,
  requestRate: 20_000,
};

describe('probe: a first cut while the cold start capped what was in flight', () => {
  const controller = probe();
  const capped: DecreaseRecord = {
    rateBefore: 3_000,
    acceptedRate: 3_000,
    acceptedRateSincePrevious: undefined,
    startCapped: true,
  };

  it('goes on with the start-up after the drain: the rate doubles each half second while requests wait', () => {
    const s = (over: Partial<RateControllerState>) =>
      state({ rate: 2_700, decreases: [capped], measuredRate: 2_700, ...over });
    // Still draining (1 s, no pause): no change.
    expect(controller.onSuccess(s({ sinceLastDecrease: 900, sinceLastIncrease: 900 }))).toBeUndefined();
    // After the drain, a half-second round since the last change: twice the rate.
    expect(controller.onSuccess(s({ sinceLastDecrease: 1_000, sinceLastIncrease: 1_000 }))).toBe(5_400);
    expect(controller.onSuccess(s({ sinceLastDecrease: 1_400, sinceLastIncrease: 400 }))).toBeUndefined();
    // A Retry-After pause counts toward the drain.
    expect(
      controller.onSuccess(
        s({ sinceLastDecrease: 1_000, pauseSinceLastDecrease: 1_000, sinceLastIncrease: 500 }),
      ),
    ).toBe(5_400);
    // Never more than twice what is sent.
    expect(
      controller.onSuccess(s({ sinceLastDecrease: 1_000, sinceLastIncrease: 1_000, measuredRate: 2_200 })),
    ).toBe(4_400);
  });

  it('climbs as before from a first cut the cap did not hold back, and after a second cut', () => {
    const free: DecreaseRecord = { ...capped, startCapped: false };
    const s = (decreases: DecreaseRecord[]) =>
      state({
        rate: 2_700,
        decreases,
        measuredRate: 2_700,
        sinceLastDecrease: 1_000,
        sinceLastIncrease: 1_000,
      });
    // Unsure ceiling of 3,000: probe steps of a tenth of it (300), from the cruise rate.
    expect(controller.onSuccess(s([free]))).toBeCloseTo(3_000 * 0.97 + 300, 6);
    // After a second cut the first one's cap no longer counts: the ceiling it found (drain first).
    expect(controller.onSuccess({ ...s([capped, SURE]), sinceLastDecrease: 900 })).toBeUndefined();
  });
});

describe('probe: the cut that ends the start of a burst of calls', () => {
  const controller = probe();
  // 60 calls at once: the first cut, unlimited while the cold start's cap held the sends, read the
  // bucket's 20 over 100 ms (12,000 a minute); after its pause the rate book reads 1,200 since it.
  const burst: DecreaseRecord = {
    rateBefore: 12_000,
    acceptedRate: 12_000,
    acceptedRateSincePrevious: undefined,
    startCapped: true,
    unlimited: true,
  };
  const second = (over: Partial<RateControllerState> = {}) =>
    state({
      rate: 10_800,
      decreases: [burst],
      acceptedRate: 1_200,
      acceptedRateSinceLastDecrease: 13_000,
      measuredRate: 3_000,
      sinceLastDecrease: 1_100,
      pauseSinceLastDecrease: 1_000,
      acceptedRateIsRefill: true,
      ...over,
    });

  it('drains below what got through since the first cut: no floor of half the rate', () => {
    // 0.9 x 1,200 (the old floor: 5,400, 4.5 times the quota).
    expect(controller.onThrottled(second())).toBeCloseTo(1_080, 6);
  });

  it('keeps that reading as the ceiling, not the burst read over ms to climb back to', () => {
    const after = (cut: DecreaseRecord) =>
      state({
        rate: 1_080,
        decreases: [burst, cut],
        // A line of callers: twice what is sent is no cap here.
        measuredRate: 10_000,
        sinceLastDecrease: 4_000,
        sinceLastIncrease: 4_000,
      });
    const cut: DecreaseRecord = {
      rateBefore: 10_800,
      acceptedRate: 1_200,
      acceptedRateSincePrevious: 13_000,
      refill: true,
    };
    // An estimate (no hold, steps of a tenth of it): 1,200 a few tenths up, not back to 12,000.
    expect(controller.onSuccess(after(cut))).toBeLessThan(2_000);
  });

  it('a cut whose accepted rate is no refill (the rate book did not read one) keeps the floor of half the rate', () => {
    expect(controller.onThrottled(second({ acceptedRateIsRefill: undefined }))).toBe(5_400);
  });
});

describe('probe: the climb at many requests a second', () => {
  const controller = probe();
  // After the sure cut at 60,000: 1 s of drain (its own overshoot), a hold of 16 s at the highest
  // ceiling found (random 0), and four rounds of creep (half a margin, 900, each).
  const s = (sinceLastDecrease: number, requests: number | undefined) =>
    state({
      rate: 58_200,
      decreases: [SURE],
      measuredRate: 58_200,
      measuredRequestRate: requests,
      sinceLastDecrease,
      sinceLastIncrease: 2_000,
    });

  it('steps a twentieth of the ceiling at 6,000 requests/min and more, doubling each round', () => {
    // The first round after the creep: the cruise rate (97 % of 60,000), the creep, 5 % of the ceiling.
    expect(controller.onSuccess(s(25_000, 150_000))).toBeCloseTo(58_200 + 3_600 + 3_000, 6);
    // The third: 1 + 2 + 4 steps.
    expect(controller.onSuccess(s(29_000, 6_000))).toBeCloseTo(58_200 + 3_600 + 7 * 3_000, 6);
  });

  it('keeps the default step (60 a minute for the budget) below that, or where requests are not counted', () => {
    // Requests of 20 units: 60,000 units/min is 3,000 requests/min.
    expect(controller.onSuccess(s(25_000, 3_000))).toBeCloseTo(58_200 + 3_600 + 60, 6);
    expect(controller.onSuccess(s(29_000, undefined))).toBeCloseTo(58_200 + 3_600 + 7 * 60, 6);
  });
});

describe('probe: a window a pause emptied, at many requests a second', () => {
  const controller = probe();
  // A sure ceiling of 20,000 found at 20,000 requests/min, cruising at 97 % of it (19,400); a 429
  // 30 ms after a Retry-After pause ended: those ms read over a slot of 250 ms, a third of the rate.
  const cruising = (scale: number, requests: number) => {
    const first: DecreaseRecord = {
      rateBefore: 22_000 * scale,
      acceptedRate: 20_000 * scale,
      acceptedRateSincePrevious: 20_000 * scale,
      requestRate: requests,
    };
    const cut: DecreaseRecord = {
      rateBefore: 19_400 * scale,
      acceptedRate: 6_500 * scale,
      acceptedRateSincePrevious: 6_500 * scale,
      // The pause emptied the measured rate's buckets: under 6,000 at the cut itself.
      requestRate: requests / 4,
    };
    // After the cut: to the floor (half of 19,400), then the hold (4 s, random 0) and one round.
    return state({
      rate: 9_700 * scale,
      decreases: [first, cut],
      measuredRate: 9_700 * scale,
      measuredRequestRate: requests / 2,
      sinceLastDecrease: 4_000,
      sinceLastIncrease: 4_000,
    });
  };

  it('reads at least half the rate the cut started from: an estimate the climb goes on from at once, by tenths of it', () => {
    // The ceiling is 9,700 (not 6,500), only an estimate: no hold; 4 s after the cut (a throttle
    // while cruising: no drain) the third round, steps of 970 x (1 + 2 + 4) above the cruise rate.
    expect(controller.onSuccess(cruising(1, 20_000))).toBeCloseTo(9_700 * 0.97 + 7 * 970, 6);
  });

  it('keeps reading what got through below 6,000 requests/min', () => {
    // A ceiling of 650 with the budget's step of 60: under the 970 the floor left, no change yet.
    expect(controller.onSuccess(cruising(0.1, 2_000))).toBeUndefined();
  });
});

describe('probe: a 429 right after a Retry-After pause, at many requests a second', () => {
  const controller = probe();
  // A sure ceiling of 20,000 found at 20,000 requests/min; cruising at 97 % of it (19,400).
  const first = SURE_20K;
  // A 429 40 ms after the 1 s pause of that cut ended; the window, less the pause, reads 18,000.
  const quick = (over: Partial<RateControllerState> = {}, scale = 1) =>
    state({
      rate: 19_400 * scale,
      decreases: [
        {
          ...first,
          rateBefore: 22_000 * scale,
          acceptedRate: 20_000 * scale,
          acceptedRateSincePrevious: 20_000 * scale,
          requestRate: 20_000 * scale,
        },
      ],
      acceptedRate: 18_000 * scale,
      acceptedRateSinceLastDecrease: 18_000 * scale,
      measuredRate: 12_000 * scale,
      measuredRequestRate: 12_000 * scale,
      sinceLastDecrease: 1_040,
      pauseSinceLastDecrease: 1_000,
      ...over,
    });

  it('goes to half the rate it started from', () => {
    expect(controller.onThrottled(quick())).toBe(9_700);
  });

  it('keeps the usual cut when the 429 came later after the pause, or below 6,000 requests/min', () => {
    // Read as a cruise's throttle at the same ceiling: a margin lower (18,800), cruising at 97 % of it.
    expect(controller.onThrottled(quick({ sinceLastDecrease: 1_300 }))).toBeCloseTo(18_800 * 0.97, 6);
    expect(controller.onThrottled(quick({}, 0.1))).toBeCloseTo(1_880 * 0.97, 6);
  });

  it('then climbs from that half at once, by tenths of it', () => {
    const cut: DecreaseRecord = {
      rateBefore: 19_400,
      acceptedRate: 18_000,
      acceptedRateSincePrevious: 18_000,
      requestRate: 12_000,
      sentAfterPause: 40,
    };
    const sending = (sent: number) => afterPause(9_700, [first, cut], sent, { measuredRequestRate: 9_700 });
    // An estimate: no hold (the pause counted as the drain), steps of a tenth of it from its cruise rate.
    expect(controller.onSuccess(sending(0))).toBeCloseTo(9_700 * 0.97 + 970, 6);
    expect(controller.onSuccess(sending(2_000))).toBeCloseTo(9_700 * 0.97 + 3 * 970, 6);
  });

  it("after a start's estimate too: half is the ceiling, not the estimate to climb back to", () => {
    // The first cut, unlimited, read the process's own demand (20,000) while the other was paused.
    const start: DecreaseRecord = { ...first, acceptedRateSincePrevious: undefined, unlimited: true };
    const cut: DecreaseRecord = {
      rateBefore: 21_400,
      acceptedRate: 19_000,
      acceptedRateSincePrevious: 19_000,
      requestRate: 12_000,
      sentAfterPause: 40,
    };
    expect(
      controller.onThrottled(
        state({
          rate: 21_400,
          decreases: [start],
          acceptedRate: 19_000,
          acceptedRateSinceLastDecrease: 19_000,
          measuredRequestRate: 12_000,
          sinceLastDecrease: 1_040,
          pauseSinceLastDecrease: 1_000,
        }),
      ),
    ).toBe(10_700);
    const sending = (sent: number) => afterPause(10_700, [start, cut], sent);
    // Steps of a tenth of 10,700 from its cruise rate; not back to the estimate of 20,000 in two rounds.
    expect(controller.onSuccess(sending(0))).toBeCloseTo(10_700 * 0.97 + 1_070, 6);
    expect(controller.onSuccess(sending(2_000))).toBeCloseTo(10_700 * 0.97 + 3 * 1_070, 6);
  });
});

describe('probe: a second 429 right after a Retry-After pause, at many requests a second', () => {
  const controller = probe();
  // A sure ceiling of 20,000 found at 20,000 requests/min; a 429 40 ms after its pause took the
  // rate from 19,400 to half (9,700): the other process had taken the room.
  const first = SURE_20K;
  const halved: DecreaseRecord = {
    rateBefore: 19_400,
    acceptedRate: 18_000,
    acceptedRateSincePrevious: 18_000,
    requestRate: 12_000,
    sentAfterPause: 40,
  };
  // Another 429 40 ms after the pause of that cut, at the half (9,700).
  const again = (sentAfterPause: number, decreases: DecreaseRecord[] = [first, halved], scale = 1) =>
    state({
      rate: 9_700 * scale,
      decreases,
      acceptedRate: 9_000 * scale,
      acceptedRateSinceLastDecrease: 9_000 * scale,
      measuredRate: 6_000 * scale,
      measuredRequestRate: 6_000 * scale,
      sinceLastDecrease: 1_000 + sentAfterPause,
      pauseSinceLastDecrease: 1_000,
    });

  it('reads the half the cut before found, not a quarter: its own overshoot, drained at 0.9 of it', () => {
    expect(controller.onThrottled(again(40))).toBeCloseTo(9_700 * 0.9, 6);
  });

  it('a third one in a row goes to the half of the one before', () => {
    const second: DecreaseRecord = {
      rateBefore: 9_700,
      acceptedRate: 9_000,
      acceptedRateSincePrevious: 9_000,
      requestRate: 6_000,
      sentAfterPause: 40,
    };
    // At 8,730 after the second: the ceiling is half of 9,700 (not of 8,730), cruised 3 % below.
    const s = { ...again(40, [first, halved, second]), rate: 8_730 };
    expect(controller.onThrottled(s)).toBeCloseTo(4_850 * 0.97, 6);
  });

  it('reads as before later after the pause, and below 6,000 requests/min', () => {
    // What got through (9,000): its own overshoot, drained at 0.9 of it.
    expect(controller.onThrottled(again(300))).toBeCloseTo(9_000 * 0.9, 6);
    const slow = (d: DecreaseRecord): DecreaseRecord => ({
      ...d,
      rateBefore: d.rateBefore / 10,
      acceptedRate: d.acceptedRate / 10,
      acceptedRateSincePrevious: (d.acceptedRateSincePrevious ?? 0) / 10,
      requestRate: (d.requestRate ?? 0) / 10,
    });
    // What got through (900), below the ceiling of 1,880: a throttle while cruising, 3 % below it.
    expect(controller.onThrottled(again(40, [slow(first), slow(halved)], 0.1))).toBeCloseTo(900 * 0.97, 6);
  });
});

describe('probe: the climb of a process that fell below 6,000 requests/min', () => {
  const controller = probe();
  // A sure ceiling of 20,000 found at 20,000 requests/min, then a throttle while cruising that
  // found 5,000 (the other process took the rest): a sure ceiling of 5,000, sent at 5,600 a minute.
  const fast = SURE_20K;
  const low: DecreaseRecord = {
    rateBefore: 5_600,
    acceptedRate: 5_000,
    acceptedRateSincePrevious: 5_000,
    requestRate: 5_600,
  };
  // The first round after the hold (4 s, random 0; a throttle while cruising: no drain).
  const cruising = (decreases: DecreaseRecord[]) =>
    state({
      rate: 4_850,
      decreases,
      measuredRate: 4_850,
      measuredRequestRate: 4_850,
      sinceLastDecrease: 4_000,
      sinceLastIncrease: 4_000,
    });

  it('keeps the step of a twentieth of the ceiling while a kept cut measured 6,000 requests/min and more', () => {
    expect(controller.onSuccess(cruising([fast, low]))).toBeCloseTo(4_850 + 250, 6);
  });

  it('keeps the default step when no kept cut did (or requests were not counted)', () => {
    const slow: DecreaseRecord = { ...fast, requestRate: 5_900 };
    expect(controller.onSuccess(cruising([slow, low]))).toBeCloseTo(4_850 + 60, 6);
    const { requestRate: _a, ...uncounted } = fast;
    expect(controller.onSuccess(cruising([uncounted, low]))).toBeCloseTo(4_850 + 60, 6);
  });

  it('keeps the default step once two cuts in a row found the same ceiling below it: the quota dropped', () => {
    // The quota fell from 20,000 a minute to 5,000, found again by the probe's next overshoot
    // (5,100 got through): a ceiling of 5,100. After the drain (1 s) and the hold (4 s, random 0;
    // not doubled this far below the 20,000 found before) the first round steps 60 a minute, not
    // 5 % of the ceiling (255) for the 8 cuts it takes the fast one to age out.
    const again: DecreaseRecord = { ...low, acceptedRate: 5_100 };
    const round = (decreases: DecreaseRecord[]) => ({ ...cruising(decreases), sinceLastDecrease: 5_000 });
    expect(controller.onSuccess(round([fast, low, again]))).toBeCloseTo(5_100 * 0.97 + 60, 6);
    // A run at that ceiling that itself measured 6,000 requests/min and more keeps the larger step.
    const busy: DecreaseRecord = { ...again, requestRate: 6_500 };
    expect(controller.onSuccess(round([fast, low, busy]))).toBeCloseTo(5_100 * 0.97 + 255, 6);
  });
});

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** An answer for `send`: the first is a 429 with a Retry-After of 1 s, every later one 'ok'. */
function oneThrottle(): () => 'ok' | number {
  let throttled = false;
  return () => {
    if (throttled) return 'ok';
    throttled = true;
    return 1_000;
  };
}

describe('limiter: at thousands a second', () => {
  /**
   * An unlimited limiter and a sender that keeps 30 requests waiting in its line; every 1 ms each
   * permit granted is answered at once, by `answer(now)`: 'ok' or a 429 with that Retry-After (ms).
   */
  function setup() {
    const clock = new ManualClock(0);
    const limiter = new AdaptiveRateLimiter({ clock, random: () => 0 });
    const cuts: number[] = [];
    limiter.on('decreased', (e) => cuts.push(e.to));
    let granted: Permit[] = [];
    let waiting = 0;
    const topUp = () => {
      for (; waiting < 30; waiting++) {
        void limiter.acquire().then((p) => {
          waiting--;
          granted.push(p);
        });
      }
    };
    const send = async (ms: number, answer: (now: number) => 'ok' | number = () => 'ok') => {
      for (let t = 0; t < ms; t++) {
        topUp();
        await flush();
        const now = granted;
        granted = [];
        for (const p of now) {
          const a = answer(clock.now());
          if (a === 'ok') p.success();
          else p.throttled(a);
        }
        clock.advance(1);
      }
    };
    return { limiter, cuts, send };
  }

  it("hands the controller the responses' rate in requests, whatever their units", () => {
    const clock = new ManualClock(0);
    const seen: (number | undefined)[] = [];
    const controller = {
      onThrottled: (st: RateControllerState) => st.rate,
      onSuccess: (st: RateControllerState) => {
        seen.push(st.measuredRequestRate);
        return undefined;
      },
    };
    const limiter = new AdaptiveRateLimiter({ clock, controller, initialUnitsPerMinute: 6_000_000 });
    // Two requests of 10 units a ms for 1.1 s: 120,000 requests/min, 1,200,000 units/min.
    for (let t = 0; t < 1_100; t++) {
      for (let i = 0; i < 2; i++) limiter.tryAcquire(10)?.success();
      clock.advance(1);
    }
    expect(seen[0]).toBeUndefined();
    expect(seen.at(-1)).toBeCloseTo(120_000, -3);
  });

  it('books each cut with the requests/min measured at it', () => {
    const { clock, booked, limiter } = bookingLimiter();
    // Two requests of 10 units a ms (120,000 requests/min) for 1.1 s, a 429; again after 1.1 s.
    for (let round = 0; round < 2; round++) {
      for (let t = 0; t < 1_100; t++) {
        for (let i = 0; i < 2; i++) limiter.tryAcquire(10)?.success();
        clock.advance(1);
      }
      limiter.tryAcquire(10)?.throttled();
    }
    expect(booked).toHaveLength(2);
    // The second cut is asked with the first's record: the request rate measured then.
    expect(booked[1]![0]!.requestRate).toBeCloseTo(120_000, -4);
  });

  it('books each cut with the ms sent between the pause since the cut before and it', () => {
    const { clock, booked, limiter } = bookingLimiter();
    const sendFor = (ms: number) => {
      for (let t = 0; t < ms; t++) {
        for (let i = 0; i < 2; i++) limiter.tryAcquire(10)?.success();
        clock.advance(1);
      }
    };
    // 1.1 s of sends, a 429 with Retry-After: 1 (a pause of 1 s), 40 ms of sends, a second 429;
    // after its pause 1.1 s of sends and a third.
    sendFor(1_100);
    limiter.tryAcquire(10)?.throttled(1_000);
    clock.advance(1_000);
    sendFor(40);
    limiter.tryAcquire(10)?.throttled(1_000);
    clock.advance(1_000);
    sendFor(1_100);
    limiter.tryAcquire(10)?.throttled(1_000);
    expect(booked).toHaveLength(3);
    expect(booked[2]![0]!.sentAfterPause).toBeUndefined();
    expect(booked[2]![1]!.sentAfterPause).toBe(40);
  });

  it('at 6,000 requests/min and more, a cut whose window holds a rise of the rate 1 s ago or more reads from the rise on', () => {
    // The 3 s window: 1.5 s at 10,000 a minute and 1.5 s at 20,000, about 15,000; from the rise on, 20,000.
    expect(acceptedAfterRise(10_000, 20_000, 1_500)).toBeCloseTo(20_000, -3);
    // Less than 1 s after the rise: the 3 s window (2.5 s at 10,000, 0.5 s at 20,000: 11,667).
    expect(acceptedAfterRise(10_000, 20_000, 500)).toBeCloseTo(11_667, -3);
    // Below 6,000 requests/min: the 3 s window (1.5 s at 2,000 and 1.5 s at 4,000: 3,000).
    expect(acceptedAfterRise(2_000, 4_000, 1_500)).toBeCloseTo(3_000, -3);
  });

  it('a rise before the last cut is not read again: the next cut reads its 3 s window', () => {
    // 1.2 s at 20,000 after the rise, a cut, then 1 s at 10,000 (a quota that dropped): the 3 s
    // window holds 0.8 s at 10,000, 1.2 s at 20,000 and 1 s at 10,000 (14,000); read from the rise
    // on it would be 1.2 s at 20,000 and 1 s at 10,000 (15,455), the seconds before the cut again.
    expect(acceptedAfterRise(10_000, 20_000, 1_200, 1_000)).toBeCloseTo(14_000, -3);
  });

  it('a first 429 while the in-flight cap binds: the start-up goes on from the cut, x2 a half-second round (at most twice what is sent)', async () => {
    const { limiter, cuts, send } = setup();
    // The first round of the cold start (10 in flight) is granted at 0 ms, answered at once; one 429.
    await send(1, oneThrottle());
    expect(cuts).toHaveLength(1);
    const start = limiter.rate;
    // The pause (1 s, counted toward the drain), then 2 s of rounds of 0.5 s, each at most twice
    // the measured send rate (half-second buckets, a round behind): 4 times the rate at least.
    // (The probe's steps of a tenth of the estimate would have added 10 % to it.)
    await send(3_050);
    expect(cuts).toHaveLength(1);
    expect(limiter.rate).toBeGreaterThanOrEqual(start * 4);
  });

  it('a first 429 after fewer than 16 answers in the first second: its estimate is a floor too, the start-up goes on', async () => {
    const clock = new ManualClock(0);
    const limiter = new AdaptiveRateLimiter({ clock, random: () => 0 });
    const cuts: number[] = [];
    limiter.on('decreased', (e) => cuts.push(e.to));
    // One request every 4 ms (15,000 a minute), answered at once: the in-flight cap never binds.
    // The 10th is answered 429 with a Retry-After of 1 s: 9 answers, read over a second.
    for (let n = 1; n <= 10; n++) {
      clock.advance(4);
      const p = limiter.tryAcquire();
      if (n < 10) p?.success();
      else p?.throttled(1_000);
    }
    expect(cuts).toHaveLength(1);
    const start = limiter.rate;
    // 9 answers read over a 250 ms slot at least (the last second's), drained: 1,944 a minute.
    expect(start).toBeLessThan(3_000);
    // A sender with a line of 30: after the pause, rounds of half a second, each at most twice
    // what is sent (the probe's steps of a tenth would have added 10 %).
    let granted: Permit[] = [];
    let waiting = 0;
    for (let t = 0; t < 3_050; t++) {
      for (; waiting < 30; waiting++) {
        void limiter.acquire().then((p) => {
          waiting--;
          granted.push(p);
        });
      }
      await flush();
      for (const p of granted) p.success();
      granted = [];
      clock.advance(1);
    }
    expect(cuts).toHaveLength(1);
    expect(limiter.rate).toBeGreaterThanOrEqual(start * 4);
  });

  it('the cut that ends that start-up reads the last second, not 3 s that hold a quarter of it', async () => {
    const { limiter, cuts, send } = setup();
    await send(1, oneThrottle());
    // Doublings at about 1.6, 2.5 and 3.0 s (each at most twice the measured send rate); a 429
    // 0.4 s after the last: the last second holds both rates, the 3 s window mostly lower ones.
    await send(3_400);
    const top = limiter.rate;
    await send(100, oneThrottle());
    expect(cuts).toHaveLength(2);
    // It drains at 0.9 x what got through lately (about the top of the climb), not at the 0.5 floor.
    expect(cuts[1]).toBeGreaterThan(0.6 * top);
  });

  it('a 429 soon after a Retry-After pause reads the window less both pauses, not half the rate', async () => {
    const { limiter, cuts, send } = setup();
    await send(3_000);
    const before = limiter.rate;
    // The third 300 ms after the second's pause ended (sooner than 250 ms it goes to half: see "a 429 right after a Retry-After pause").
    const throttleAt = new Set([3_000, 5_000, 6_300]);
    await send(4_000, (now) => {
      if (!throttleAt.has(now)) return 'ok';
      throttleAt.delete(now);
      return 1_000;
    });
    expect(cuts.length).toBeGreaterThanOrEqual(3);
    // Each cut drains at 0.9 x what got through (the rate it cut from), never to the 0.5 floor.
    expect(before).toBeGreaterThan(0);
    for (const [i, to] of cuts.entries())
      expect(to, `cut ${i}`).toBeGreaterThan(0.8 * (i === 0 ? to : cuts[i - 1]!));
  });
});

/**
 * The accepted rate a cut reads (on a ManualClock, one success every 60,000 / rate ms): `low`
 * units/min for 3 s, a first cut (the rate kept), `low` for 1.5 s more, then the controller raises
 * the rate to `high`, sent for `after` ms, and a 429. With `lowAfter`, `low` is sent for that long
 * after that cut (the rate kept at `high`), and the accepted rate a third 429 reads is returned.
 */
function acceptedAfterRise(low: number, high: number, after: number, lowAfter?: number): number | undefined {
  const clock = new ManualClock(0);
  const seen: (number | undefined)[] = [];
  let raise = false;
  const controller = {
    onThrottled: (st: RateControllerState) => {
      seen.push(st.acceptedRate);
      return st.rate;
    },
    onSuccess: (st: RateControllerState) => (raise && st.rate < high ? high : undefined),
  };
  const limiter = new AdaptiveRateLimiter({ clock, controller, initialUnitsPerMinute: low });
  const sendFor = (ms: number, rate: number) => {
    const every = 60_000 / rate;
    for (let t = 0; t < ms; t++) {
      if (t % every === 0) limiter.tryAcquire()?.success();
      clock.advance(1);
    }
  };
  sendFor(3_000, low);
  limiter.tryAcquire()?.throttled();
  sendFor(1_500, low);
  raise = true;
  sendFor(after, high);
  limiter.tryAcquire()?.throttled();
  if (lowAfter !== undefined) {
    sendFor(lowAfter, low);
    limiter.tryAcquire()?.throttled();
  }
  expect(seen).toHaveLength(lowAfter === undefined ? 2 : 3);
  return seen.at(-1);
}

/**
 * A limiter at 6,000,000 units/min on a ManualClock whose controller halves the rate on each 429
 * and books the cuts it was asked with (`booked`: the state's `decreases` at each 429).
 */
function bookingLimiter(): {
  clock: ManualClock;
  booked: (readonly DecreaseRecord[])[];
  limiter: AdaptiveRateLimiter;
} {
  const clock = new ManualClock(0);
  const booked: (readonly DecreaseRecord[])[] = [];
  const controller = {
    onThrottled: (st: RateControllerState) => {
      booked.push(st.decreases);
      return st.rate / 2;
    },
    onSuccess: () => undefined,
  };
  return {
    clock,
    booked,
    limiter: new AdaptiveRateLimiter({ clock, controller, initialUnitsPerMinute: 6_000_000 }),
  };
}

/** The state `sent` ms after the 1 s pause of the last of `decreases`, sending at `rate`. */
function afterPause(
  rate: number,
  decreases: readonly DecreaseRecord[],
  sent: number,
  more: Partial<RateControllerState> = {},
): RateControllerState {
  return state({
    rate,
    decreases,
    measuredRate: rate,
    sinceLastDecrease: 1_000 + sent,
    pauseSinceLastDecrease: 1_000,
    sinceLastIncrease: sent,
    ...more,
  });
}
