import { describe, expect, it } from 'vitest';
import { type DecreaseRecord, probe, resolveController } from '../src/controllers/index.js';
import { ConfigError } from '../src/errors.js';
import { controllerStateOf } from './helpers/controller-state.js';

/** A frozen state: 1,000 units/min, no cut yet, a request waited, one instance, random 0. */
const state = controllerStateOf();

/**
 * A cut from 4,000 units/min at which 3,000 got through (2,900 since the cut before it, which the
 * state no longer keeps): the ceiling is 3,000, cruise 2,910.
 */
const FIRST: DecreaseRecord = { rateBefore: 4000, acceptedRate: 3000, acceptedRateSincePrevious: 2900 };
/** The very first cut of the limiter (nothing before it): its estimate is only a floor. */
const VERY_FIRST: DecreaseRecord = {
  rateBefore: 4000,
  acceptedRate: 3000,
  acceptedRateSincePrevious: undefined,
};
/**
 * The very first cut of a limiter that was unlimited until then (no rate, the cold start's cap not
 * holding the sends back): read at full speed, over windows its own sends filled.
 */
const UNLIMITED_FIRST: DecreaseRecord = { ...VERY_FIRST, rateBefore: 3000, unlimited: true };
/**
 * The very first cut of a process sending 20,000 requests/min (429s included) against a share of
 * 15,000, made unlimited over a first second of 429s: only 2,000 read as got through.
 */
const TEN_X_FIRST: DecreaseRecord = {
  rateBefore: 2000,
  acceptedRate: 2000,
  acceptedRateSincePrevious: undefined,
  unlimited: true,
  requestRate: 20_000,
};
/** A second overshoot at 3,300 where 3,050 got through lately and 3,000 over the cycle: ceiling 3,050. */
const SECOND: DecreaseRecord = { rateBefore: 3300, acceptedRate: 3050, acceptedRateSincePrevious: 3000 };

/**
 * Two processes start on one quota of 3,000: the very first cut reads 2,000, the next 2,300 (the
 * other process was paused by a Retry-After meanwhile), then a throttle while cruising finds this
 * process's share, 1,200, and its own probe finds it again (1,210).
 */
const START_THEN_SHARE: DecreaseRecord[] = [
  { rateBefore: 4000, acceptedRate: 2000, acceptedRateSincePrevious: undefined },
  { rateBefore: 2600, acceptedRate: 2300, acceptedRateSincePrevious: 2200 },
  { rateBefore: 2231, acceptedRate: 1200, acceptedRateSincePrevious: 1500 },
  { rateBefore: 1300, acceptedRate: 1210, acceptedRateSincePrevious: 1190 },
];

const controller = probe();

describe('probe: onThrottled (golden table, default options)', () => {
  it.each([
    ['the start-up overshoots: drain at 0.9 x what got through', { rate: 4000, acceptedRate: 3000 }, 2700],
    ['nothing measured yet: drain at 0.9 x the rate', { rate: 1000 }, 900],
    ['a cut never goes below half the rate', { rate: 4000, acceptedRate: 1000 }, 2000],
    [
      'cruising, the same got through: the ceiling a margin lower, cruise below it',
      { rate: 2910, acceptedRate: 2950, decreases: [FIRST] },
      3000 * 0.97 * 0.97,
    ],
    [
      'cruising above the ceiling for a cycle: what got through over it, at most a margin lower',
      { rate: 2910, acceptedRate: 2950, acceptedRateSinceLastDecrease: 2950, decreases: [FIRST] },
      2910 * 0.97,
    ],
    [
      'cruising, less got through over the cycle: at most two margins lower',
      { rate: 2910, acceptedRate: 2950, acceptedRateSinceLastDecrease: 2600, decreases: [FIRST] },
      3000 * 0.94 * 0.97,
    ],
    [
      'cruising, less got through (the quota dropped): that is the ceiling',
      { rate: 2910, acceptedRate: 2000, decreases: [FIRST] },
      2000 * 0.97,
    ],
    [
      'cruising, much less got through: at most 0.9 x the last ceiling, and at least half the rate',
      { rate: 2910, acceptedRate: 1000, decreases: [FIRST] },
      1455,
    ],
    [
      'a probe overshoots: the ceiling rises to what got through over the cycle',
      { rate: 3300, acceptedRate: 3400, acceptedRateSinceLastDecrease: 3100, decreases: [FIRST] },
      3100 * 0.9,
    ],
    [
      'a probe overshoots after a burst: the ceiling rises by the margin at most',
      { rate: 3300, acceptedRate: 3400, acceptedRateSinceLastDecrease: 2950, decreases: [FIRST] },
      3090 * 0.9,
    ],
    [
      'the cut after the very first: what got through is the ceiling, whatever the cycle',
      { rate: 3300, acceptedRate: 3400, acceptedRateSinceLastDecrease: 2950, decreases: [VERY_FIRST] },
      3400 * 0.9,
    ],
    [
      'the cut after the very first, less got through: that is the ceiling',
      { rate: 2910, acceptedRate: 2000, acceptedRateSinceLastDecrease: 2500, decreases: [VERY_FIRST] },
      2000 * 0.9,
    ],
  ] as const)('%s', (_name, overrides, expected) => {
    expect(controller.onThrottled(state(overrides))).toBeCloseTo(expected, 6);
  });
});

describe('probe: onSuccess (golden table, default options)', () => {
  const afterFirst = { rate: 2700, decreases: [FIRST] };
  it.each([
    ['start-up: doubles after a round (2 s)', { sinceLastIncrease: 2000 }, 2000],
    ['start-up: not within a round', { sinceLastIncrease: 1999 }, undefined],
    ['start-up: at most twice the measured send rate', { sinceLastIncrease: 2000, measuredRate: 900 }, 1800],
    [
      'app-limited (sends under 0.8 x its rate): no raise',
      { sinceLastIncrease: 2000, measuredRate: 700 },
      undefined,
    ],
    ['nothing waited: no raise', { sinceLastIncrease: 2000, waited: false }, undefined],
    ['drains for 1 s after its own overshoot', { ...afterFirst, sinceLastDecrease: 999 }, undefined],
    ['then cruises 3 % below the ceiling', { ...afterFirst, sinceLastDecrease: 1000 }, 2910],
    [
      'holds there, at the highest ceiling found, for 4 x 4 s x (1 + random)',
      { ...afterFirst, rate: 2910, sinceLastDecrease: 16_999 },
      undefined,
    ],
    [
      'then creeps: half a margin of the ceiling in the first round',
      { ...afterFirst, sinceLastDecrease: 17_000 },
      2955,
    ],
    ['a margin above the ceiling after four rounds', { ...afterFirst, sinceLastDecrease: 23_000 }, 3090],
    ['then +60 in the fifth round', { ...afterFirst, sinceLastDecrease: 25_000 }, 3150],
    ['+60, +120, +240 after seven rounds', { ...afterFirst, sinceLastDecrease: 29_000 }, 3510],
    [
      'the step is shared by the instances',
      { ...afterFirst, sinceLastDecrease: 25_000, instanceCount: 2 },
      3120,
    ],
    [
      'with 10 instances probing on their own the hold is 5 times as long (80 s)',
      { ...afterFirst, rate: 2910, sinceLastDecrease: 80_999, instanceCount: 10 },
      undefined,
    ],
    [
      'then those 10 creep, each by half a margin of its own ceiling',
      { ...afterFirst, rate: 2910, sinceLastDecrease: 81_000, instanceCount: 10 },
      2955,
    ],
    [
      'and step, each by a tenth of the step',
      { ...afterFirst, rate: 2910, sinceLastDecrease: 89_000, instanceCount: 10 },
      3096,
    ],
    [
      'a random 0.5 holds 24 s',
      { ...afterFirst, rate: 2910, sinceLastDecrease: 24_999, random: 0.5 },
      undefined,
    ],
    [
      'a Retry-After pause does not count',
      { ...afterFirst, sinceLastDecrease: 18_000, pauseSinceLastDecrease: 1000 },
      2955,
    ],
    ['never above the maximum', { ...afterFirst, sinceLastDecrease: 25_000, maxRate: 2950 }, 2950],
    [
      'the same ceiling twice in a row doubles the hold (32 s; at the highest ceiling found, up to 4 x maxHold: 120 s)',
      { rate: 2958.5, decreases: [FIRST, SECOND], sinceLastDecrease: 32_999 },
      undefined,
    ],
    [
      'and creeps after it',
      { rate: 2958.5, decreases: [FIRST, SECOND], sinceLastDecrease: 33_000 },
      3050 * 0.985,
    ],
    [
      'with 10 instances at the highest ceiling found, the doubled hold passes maxHold, up to 4 x 5 times it (160 s, not 30 s)',
      { rate: 2958.5, decreases: [FIRST, SECOND], sinceLastDecrease: 160_999, instanceCount: 10 },
      undefined,
    ],
    [
      'and those 10 creep after it',
      { rate: 2958.5, decreases: [FIRST, SECOND], sinceLastDecrease: 161_000, instanceCount: 10 },
      3050 * 0.985,
    ],
    [
      'with 10 instances below the highest ceiling found, the hold stays within maxHold (30 s)',
      {
        rate: 2473.5,
        decreases: [
          FIRST,
          { rateBefore: 2910, acceptedRate: 2500, acceptedRateSincePrevious: 2800 },
          { rateBefore: 2600, acceptedRate: 2550, acceptedRateSincePrevious: 2450 },
        ],
        sinceLastDecrease: 31_000,
        instanceCount: 10,
      },
      2550 * 0.97 + 6,
    ],
    [
      'after a throttle while cruising: no drain, a short hold',
      {
        rate: 1900,
        decreases: [FIRST, { rateBefore: 2910, acceptedRate: 2000, acceptedRateSincePrevious: 2800 }],
        sinceLastDecrease: 4000,
      },
      2000 * 0.97 + 60,
    ],
    [
      'after a throttle while cruising: probe steps, no climb back to the ceiling it took (the competitor has it)',
      {
        rate: 2000,
        decreases: [FIRST, { rateBefore: 2910, acceptedRate: 2000, acceptedRateSincePrevious: 2800 }],
        sinceLastDecrease: 6000,
      },
      2000 * 0.97 + 180,
    ],
    [
      'after a throttle while cruising: still holding, no climb back',
      {
        rate: 1940,
        decreases: [FIRST, { rateBefore: 2910, acceptedRate: 2000, acceptedRateSincePrevious: 2800 }],
        sinceLastDecrease: 3999,
      },
      undefined,
    ],
    [
      'our own overshoot after a throttle while cruising: probe steps from what got through (no doubled hold that far below 3,000)',
      {
        rate: 1854,
        decreases: [
          FIRST,
          { rateBefore: 2910, acceptedRate: 2000, acceptedRateSincePrevious: 2800 },
          { rateBefore: 2600, acceptedRate: 2100, acceptedRateSincePrevious: 2050 },
        ],
        sinceLastDecrease: 9000,
      },
      2060 * 0.97 + 60 + 120 + 240,
    ],
    [
      'the same ceiling twice, but well below the highest the cuts found (a quota that dropped): no doubled hold',
      {
        rate: 1800,
        decreases: [
          FIRST,
          { rateBefore: 2910, acceptedRate: 2000, acceptedRateSincePrevious: 2800 },
          { rateBefore: 2100, acceptedRate: 2000, acceptedRateSincePrevious: 1950 },
        ],
        sinceLastDecrease: 5000,
      },
      2000 * 0.97 + 60,
    ],
    [
      'a ceiling the start found once does not count as the highest: the share found twice is, and its hold doubles (4 x 8 s: 32 s, past maxHold)',
      { rate: 1210 * 0.97, decreases: START_THEN_SHARE, sinceLastDecrease: 32_999 },
      undefined,
    ],
    [
      'and creeps after it',
      { rate: 1210 * 0.97, decreases: START_THEN_SHARE, sinceLastDecrease: 33_000 },
      1210 * 0.985,
    ],
    [
      'a Retry-After pause counts toward the drain',
      { ...afterFirst, sinceLastDecrease: 1000, pauseSinceLastDecrease: 1000 },
      2910,
    ],
    [
      'a pause counts toward the drain only as long as it lasted',
      { ...afterFirst, sinceLastDecrease: 999, pauseSinceLastDecrease: 400 },
      undefined,
    ],
    [
      'a pause and the rest of the drain: cruising',
      { ...afterFirst, sinceLastDecrease: 1000, pauseSinceLastDecrease: 400 },
      2910,
    ],
    [
      'in the second after a pause, the send rate measured at the cut: not app-limited',
      {
        ...afterFirst,
        sinceLastDecrease: 1500,
        pauseSinceLastDecrease: 1000,
        measuredRate: 1000,
        measuredRateAtLastDecrease: 3000,
      },
      2910,
    ],
    [
      'a second after a pause, the send rate measured now: app-limited',
      {
        ...afterFirst,
        sinceLastDecrease: 2000,
        pauseSinceLastDecrease: 1000,
        measuredRate: 1000,
        measuredRateAtLastDecrease: 3000,
      },
      undefined,
    ],
    [
      'after the very first cut: no hold, probes right after the drain, by a tenth of the estimate',
      { rate: 2700, decreases: [VERY_FIRST], sinceLastDecrease: 1000 },
      2910 + 300,
    ],
    [
      'after the very first cut: +300, +600 a round later',
      { rate: 3210, decreases: [VERY_FIRST], sinceLastDecrease: 3000 },
      2910 + 900,
    ],
    [
      'after the very first cut, a tenth of a small estimate is less than a probe step: the probe step',
      {
        rate: 450,
        decreases: [{ rateBefore: 1000, acceptedRate: 500, acceptedRateSincePrevious: undefined }],
        sinceLastDecrease: 1000,
      },
      485 + 60,
    ],
    [
      'after a very first cut made unlimited: a sure ceiling, it holds (not +300)',
      { rate: 2700, decreases: [UNLIMITED_FIRST], sinceLastDecrease: 1000 },
      2910,
    ],
    [
      'after a very first cut made unlimited: still holding a second before the hold ends',
      { rate: 2910, decreases: [UNLIMITED_FIRST], sinceLastDecrease: 4999 },
      undefined,
    ],
    [
      'after a very first cut made unlimited: then probes by the probe step (60), not a tenth of it',
      { rate: 2910, decreases: [UNLIMITED_FIRST], sinceLastDecrease: 25_000 },
      2910 + 180 + 60,
    ],
    [
      'a very first cut made unlimited at 6,000 units/min and more: only an estimate, a tenth of it',
      {
        rate: 13_500,
        decreases: [
          { rateBefore: 15_000, acceptedRate: 15_000, acceptedRateSincePrevious: undefined, unlimited: true },
        ],
        sinceLastDecrease: 1000,
      },
      14_550 + 1500,
    ],
    [
      'a very first cut made unlimited, sent at the rate it read (2,000 requests/min): a sure ceiling, it holds',
      { rate: 2700, decreases: [{ ...UNLIMITED_FIRST, requestRate: 2000 }], sinceLastDecrease: 1000 },
      2910,
    ],
    [
      'a very first cut made unlimited that read 2,000 of 20,000 requests/min sent (429s): an estimate, a tenth of it',
      { rate: 1800, decreases: [TEN_X_FIRST], sinceLastDecrease: 1000 },
      1940 + 200,
    ],
    [
      'a very first cut made unlimited that read 2,000 of 20,000 requests/min sent: no hold, steps doubling from a tenth (not +60)',
      { rate: 1940, decreases: [TEN_X_FIRST], sinceLastDecrease: 5000 },
      1940 + 200 * (1 + 2 + 4),
    ],
    [
      'a very first cut made unlimited but start-capped: only an estimate (the start-up goes on)',
      {
        rate: 2700,
        decreases: [{ ...UNLIMITED_FIRST, startCapped: true }],
        sinceLastDecrease: 1000,
        sinceLastIncrease: 500,
      },
      5400,
    ],
    [
      'after the very first cut: drains for 1 s first',
      { rate: 2700, decreases: [VERY_FIRST], sinceLastDecrease: 999 },
      undefined,
    ],
    [
      'a second cut found less than the very first: still unsure, no hold, half the way back to the first',
      {
        rate: 1800,
        decreases: [VERY_FIRST, { rateBefore: 2700, acceptedRate: 2000, acceptedRateSincePrevious: 1500 }],
        sinceLastDecrease: 1000,
      },
      2500 * 0.97,
    ],
    [
      'a second cut found less than the very first: all the way back a round later',
      {
        rate: 2425,
        decreases: [VERY_FIRST, { rateBefore: 2700, acceptedRate: 2000, acceptedRateSincePrevious: 1500 }],
        sinceLastDecrease: 3000,
      },
      3000 * 0.97,
    ],
    [
      'a second cut found more than the very first: sure, it holds',
      {
        rate: 3060,
        decreases: [VERY_FIRST, { rateBefore: 3300, acceptedRate: 3400, acceptedRateSincePrevious: 3000 }],
        sinceLastDecrease: 1000,
      },
      3400 * 0.97,
    ],
    [
      'a second cut that finds the first estimate again: the same ceiling twice, a doubled hold',
      {
        rate: 3007,
        decreases: [VERY_FIRST, { rateBefore: 3300, acceptedRate: 3100, acceptedRateSincePrevious: 3000 }],
        sinceLastDecrease: 5000,
      },
      undefined,
    ],
    ['start-up with an announced rate: straight to it, without a round', { announcedRate: 5000 }, 5000],
    [
      'start-up with an announced rate: not capped by twice the measured send rate',
      { announcedRate: 5000, measuredRate: 900, sinceLastIncrease: 2000 },
      5000,
    ],
    [
      'start-up with an announced rate: never above the maximum',
      { announcedRate: 5000, maxRate: 4000 },
      4000,
    ],
    ['start-up at the announced rate already: no raise', { rate: 5000, announcedRate: 5000 }, undefined],
    [
      'start-up with an announced rate but app-limited: no raise',
      { announcedRate: 5000, measuredRate: 700 },
      undefined,
    ],
    [
      'after a cut: probes no higher than the announced rate',
      { ...afterFirst, sinceLastDecrease: 29_000, announcedRate: 3100 },
      3100,
    ],
    [
      'after a cut: below the announced rate, probes as without it',
      { ...afterFirst, sinceLastDecrease: 17_000, announcedRate: 3100 },
      2955,
    ],
  ] as const)('%s', (_name, overrides, expected) => {
    const next = controller.onSuccess(state(overrides));
    if (expected === undefined) expect(next).toBeUndefined();
    else expect(next).toBeCloseTo(expected, 6);
  });
});

describe('probe: options', () => {
  it('takes its options, as the limiter does by name', () => {
    const slow = probe({ probeStep: 6, holdTime: 250, maxHold: 250 });
    // Drain 1 s, the hold (4 x 250 ms, capped at 4 x maxHold: 1 s), four rounds of creep, then a step.
    const s = state({ rate: 2700, decreases: [FIRST], sinceLastDecrease: 10_000 });
    expect(slow.onSuccess(s)).toBeCloseTo(3096);
    expect(
      resolveController('probe', { probe: { probeStep: 6, holdTime: 250, maxHold: 250 } }).onSuccess(s),
    ).toBeCloseTo(3096);
  });

  it.each([
    [{ cruiseMargin: 0.5 }, 'probe.cruiseMargin'],
    [{ drainFactor: 0 }, 'probe.drainFactor'],
    [{ holdTime: -1 }, 'probe.holdTime'],
    [{ holdTime: 10_000, maxHold: 5_000 }, 'probe.maxHold'],
    [{ probeGrowth: 1 }, 'probe.probeGrowth'],
    [{ round: Number.NaN }, 'probe.round'],
    [{ startupGrowth: 1 }, 'probe.startupGrowth'],
    [{ externalFactor: 1.5 }, 'probe.externalFactor'],
    [{ appLimitedRatio: 0 }, 'probe.appLimitedRatio'],
    [{ minCutFactor: 2 }, 'probe.minCutFactor'],
  ])('rejects %j naming the field', (options, path) => {
    expect(() => probe(options)).toThrow(ConfigError);
    expect(() => probe(options)).toThrow(new RegExp(path.replace('.', '\\.')));
  });
});
