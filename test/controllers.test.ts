import { describe, expect, it } from 'vitest';
import {
  aimd,
  cubic,
  cubicCurve,
  cubicK,
  probe,
  type RateController,
  type RateControllerState,
  resolveController,
} from '../src/controllers/index.js';
import { ConfigError } from '../src/errors.js';
import { controllerStateOf } from './helpers/controller-state.js';

/** A frozen controller state: 1,000 units/min, no cut yet, nothing waited, one instance. */
const state = controllerStateOf({ waited: false, random: 0.5 });

/** The seed's example custom controller: halve on a throttle, a step every 30 s of waiting. */
class StepController implements RateController {
  constructor(private readonly step: number) {}

  onThrottled(s: RateControllerState): number {
    return Math.max(s.rate / 2, s.minRate);
  }

  onSuccess(s: RateControllerState): number | undefined {
    if (!s.waited || s.sinceLastIncrease < 30_000) return undefined;
    return s.rate + this.step / s.instanceCount;
  }
}

const PER_MIN = 60; // the AWS vectors are in units/s; our states are in units/min

describe('aimd', () => {
  it.each([
    ['cuts by 30% on a throttle', state({ rate: 1000 }), 700],
    ['cuts the per-instance share the same way', state({ rate: 1406.25, instanceCount: 2 }), 984.375],
  ])('%s', (_name, s, expected) => {
    expect(aimd().onThrottled(s)).toBeCloseTo(expected, 9);
  });

  it.each([
    ['steps 60 units/min per instance of 2 after 10 s of waiting', { instanceCount: 2 }, 1060],
    ['steps the whole 120 units/min for one instance', { instanceCount: 1 }, 1120],
    ['steps after more than the interval too', { instanceCount: 2, sinceLastIncrease: 25_000 }, 1060],
    ['does not step before the interval', { instanceCount: 2, sinceLastIncrease: 9_999 }, undefined],
    ['does not step when nothing waited', { instanceCount: 2, waited: false }, undefined],
    ['stops at the maximum', { instanceCount: 2, maxRate: 1030 }, 1030],
  ])('%s', (_name, overrides: Partial<RateControllerState>, expected) => {
    const s = state({ rate: 1000, waited: true, sinceLastIncrease: 10_000, ...overrides });
    expect(aimd().onSuccess(s)).toBe(expected);
  });

  it('climbs by at most 720 units/min per minute for the whole budget of 2 instances', () => {
    const controller = aimd();
    let rate = 1000;
    let lastChange = 0;
    for (let t = 1_000; t <= 60_000; t += 1_000) {
      const next = controller.onSuccess(
        state({ rate, waited: true, sinceLastIncrease: t - lastChange, instanceCount: 2 }),
      );
      if (next !== undefined) {
        rate = next;
        lastChange = t;
      }
    }
    expect(rate).toBe(1360); // 6 steps of 60
    expect((rate - 1000) * 2).toBe(720);
  });

  it('applies its options', () => {
    const controller = aimd({ decreaseFactor: 0.5, increaseInterval: 1_000, increaseStep: 600 });
    expect(controller.onThrottled(state({ rate: 1000 }))).toBe(500);
    expect(controller.onSuccess(state({ waited: true, sinceLastIncrease: 1_000, instanceCount: 2 }))).toBe(
      1300,
    );
  });

  it.each([
    ['decreaseFactor', 0],
    ['decreaseFactor', 1],
    ['decreaseFactor', Number.NaN],
    ['increaseInterval', 0],
    ['increaseInterval', Number.POSITIVE_INFINITY],
    ['increaseStep', -1],
    ['increaseStep', '120'],
  ])('rejects %s = %s with a ConfigError naming the field', (field, value) => {
    const build = () => aimd({ [field]: value } as never);
    expect(build).toThrow(ConfigError);
    expect(build).toThrow(`aimd.${field}`);
  });

  it('lists every bad option at once', () => {
    try {
      aimd({ decreaseFactor: 2, increaseStep: 0 });
      expect.unreachable();
    } catch (error) {
      expect((error as ConfigError).issues.map((i) => [i.path, i.received])).toEqual([
        ['aimd.decreaseFactor', 2],
        ['aimd.increaseStep', 0],
      ]);
    }
  });
});

describe('cubic curve (RFC 8312 / AWS vectors, units/s)', () => {
  const aws = { beta: 0.7, C: 0.4 };

  it.each([
    [10, 1.9574338205844317],
    [8, 1.8171205928321397],
  ])('K for W = %s is %s (botocore test_throttling)', (W, K) => {
    expect(cubicK({ W, ...aws })).toBeCloseTo(K, 12);
  });

  it('gives K ≈ 4.13 s for a per-instance share of 2,812.5 units/min with 2 instances', () => {
    expect(cubicK({ W: 46.875, beta: 0.7, C: 0.2 })).toBeCloseTo(4.127409061118284, 12);
  });

  it('starts at beta × W and reaches W at t = K', () => {
    const p = { W: 46.875, beta: 0.7, C: 0.2 };
    expect(cubicCurve({ ...p, t: 0 })).toBeCloseTo(0.7 * 46.875, 12);
    expect(cubicCurve({ ...p, t: cubicK(p) })).toBeCloseTo(46.875, 12);
  });

  it('stays at or below W before K and at or above W after it (botocore)', () => {
    const K = cubicK({ W: 10, ...aws });
    for (const t of [K / 3, K / 2, K / 1.1]) expect(cubicCurve({ W: 10, ...aws, t })).toBeLessThanOrEqual(10);
    for (const t of [K * 1.1, K * 2]) expect(cubicCurve({ W: 10, ...aws, t })).toBeGreaterThanOrEqual(10);
  });

  it.each([
    [0, 7],
    [1, 9.64893600966],
    [2, 10.000030849917364],
    [3, 10.453284520772092],
    [4, 13.408697022224185],
    [5, 21.26626835427364],
    [6, 36.425998516920465],
  ])('W = 10, t = %s s gives %s (aws-sdk-go-v2 TestAdaptiveRateLimit_cubic)', (t, expected) => {
    expect(cubicCurve({ W: 10, ...aws, t })).toBeCloseTo(expected, 10);
  });
});

describe('cubic', () => {
  it.each([
    ['cuts the rate by 30%', { rate: 2812.5 }, 1968.75],
    ['cuts from the measured send rate when it is lower', { rate: 2812.5, measuredRate: 2000 }, 1400],
    ['ignores a measured send rate above the rate', { rate: 1000, measuredRate: 5000 }, 700],
    ['gives 8 × 0.7 for 8 u/s (botocore)', { rate: 8 * PER_MIN }, 5.6 * PER_MIN],
  ])('%s', (_name, overrides: Partial<RateControllerState>, expected) => {
    expect(cubic().onThrottled(state(overrides))).toBeCloseTo(expected, 9);
  });

  // 2 instances, the share's maximum 2,812.5 units/min, just cut to 1,968.75: W = 46.875 u/s, C = 0.2.
  const afterCut = { rate: 1968.75, rateBeforeLastDecrease: 2812.5, waited: true, instanceCount: 2 };
  it.each([
    [0, undefined], // the curve starts at the cut rate: no change
    [1_000, 2445.441473880589],
    [2_000, 2696.9594953606615],
    [4_000, 2812.4751811192573],
    [4_127.409061118284, 2812.5],
    [6_000, 2891.297057275787],
    [8_000, 3509.4251238302522],
  ])('follows the curve %s ms after a cut (2 instances)', (sinceLastDecrease, expected) => {
    const next = cubic().onSuccess(state({ ...afterCut, sinceLastDecrease }));
    if (expected === undefined) expect(next).toBeUndefined();
    else expect(next).toBeCloseTo(expected, 8);
  });

  it('clamps to the maximum share', () => {
    expect(cubic().onSuccess(state({ ...afterCut, maxRate: 2812.5, sinceLastDecrease: 8_000 }))).toBe(2812.5);
    expect(
      cubic().onSuccess(state({ ...afterCut, rate: 2812.5, maxRate: 2812.5, sinceLastDecrease: 8_000 })),
    ).toBeUndefined();
  });

  it('excludes the Retry-After pause from t', () => {
    const paused = cubic().onSuccess(
      state({ ...afterCut, sinceLastDecrease: 15_000, pauseSinceLastDecrease: 13_000 }),
    );
    expect(paused).toBeCloseTo(2696.9594953606615, 8);
    expect(
      cubic().onSuccess(state({ ...afterCut, sinceLastDecrease: 1_000, pauseSinceLastDecrease: 5_000 })),
    ).toBe(undefined); // t is never negative: the curve stays at the cut rate
  });

  it('never goes above 2× the measured send rate', () => {
    expect(
      cubic().onSuccess(state({ ...afterCut, sinceLastDecrease: 8_000, measuredRate: 1300 })),
    ).toBeCloseTo(2600, 9);
  });

  it('takes W as the lower of the rate before the cut and the measured send rate then', () => {
    const s = state({ ...afterCut, rate: 1000, measuredRateAtLastDecrease: 1500, sinceLastDecrease: 60_000 });
    const W = 25;
    const expected = cubicCurve({ W, beta: 0.7, C: 0.2, t: 60 }) * PER_MIN;
    expect(cubic().onSuccess(s)).toBeCloseTo(expected, 8);
  });

  it('never goes down on a success', () => {
    expect(cubic().onSuccess(state({ ...afterCut, rate: 2800, sinceLastDecrease: 2_000 }))).toBeUndefined();
  });

  it('does nothing when no request waited', () => {
    expect(
      cubic().onSuccess(state({ ...afterCut, waited: false, sinceLastDecrease: 8_000 })),
    ).toBeUndefined();
  });

  it('before any cut, climbs from the initial rate (W = rateBeforeLastDecrease)', () => {
    const initial = { rate: 1500, rateBeforeLastDecrease: 1500, waited: true, instanceCount: 2 };
    const K = cubicK({ W: 25, beta: 0.7, C: 0.2 }) * 1000;
    expect(cubic().onSuccess(state({ ...initial, sinceLastDecrease: K - 100 }))).toBeUndefined();
    expect(cubic().onSuccess(state({ ...initial, sinceLastDecrease: K + 1_000 }))).toBeGreaterThan(1500);
  });

  it('does nothing before any cut when the initial rate is unlimited', () => {
    const unlimited = { rate: Number.POSITIVE_INFINITY, rateBeforeLastDecrease: Number.POSITIVE_INFINITY };
    expect(
      cubic().onSuccess(state({ ...unlimited, waited: true, sinceLastDecrease: 5_000 })),
    ).toBeUndefined();
  });

  it('replays beta = 0.6 from botocore: a cut of 10 u/s gives 6, and the curve starts there', () => {
    const controller = cubic({ beta: 0.6 });
    expect(controller.onThrottled(state({ rate: 10 * PER_MIN }))).toBeCloseTo(6 * PER_MIN, 9);
    const next = controller.onSuccess(state({ rate: 1, rateBeforeLastDecrease: 10 * PER_MIN, waited: true }));
    expect(next).toBeCloseTo(6 * PER_MIN, 9);
  });

  // aws-sdk-go-v2 TestAdaptiveRateLimit_cubic "mixed": throttles at t = 7 and 8 s, successes after.
  it('replays the AWS mixed sequence of throttles and successes', () => {
    const controller = cubic();
    const success = (W: number, t: number) =>
      controller.onSuccess(
        state({ rate: 1, rateBeforeLastDecrease: W * PER_MIN, sinceLastDecrease: t * 1000, waited: true }),
      );
    expect(success(10, 1)).toBeCloseTo(9.64893600966 * PER_MIN, 8);
    const first = controller.onThrottled(state({ rate: 9.64893600966 * PER_MIN })) / PER_MIN;
    expect(first).toBeCloseTo(6.754255206761999, 9);
    const second = controller.onThrottled(state({ rate: first * PER_MIN })) / PER_MIN;
    expect(second).toBeCloseTo(4.727978644733399, 9);
    // Go keeps W = the rate after the cut, so feed it as the "rate before".
    expect(success(second, 1)).toBeCloseTo(4.670125557970046 * PER_MIN, 7);
    expect(success(second, 2)).toBeCloseTo(4.770870456867401 * PER_MIN, 7);
    expect(success(second, 3)).toBeCloseTo(6.011819748005445 * PER_MIN, 7);
    expect(success(second, 4)).toBeCloseTo(10.792973431384178 * PER_MIN, 7);
  });

  // The cross-SDK vector (Go, Java, JS) from its first throttle on; each row is one response.
  it.each([
    // t (s), throttle, measured (u/s), rate before the response (u/s), expected rate (u/s)
    [2.0, true, 4.3264, Number.POSITIVE_INFINITY, 3.02848],
    [2.2, false, 4.3264, 3.02848, 3.4866391734702598],
    [2.4, false, 4.3264, 3.4866391734702598, 3.8218744160402554],
    [2.6, false, 5.66528, 3.8218744160402554, 4.053385727709987],
    [2.8, false, 5.66528, 4.053385727709987, 4.200373108479455],
    [3.0, false, 4.333056, 4.200373108479455, 4.282036558348658],
    [3.2, true, 4.333056, 4.282036558348658, 2.99742559084406],
  ])('replays the cross-SDK vector at t = %s s (throttle: %s)', (t, throttle, measured, rate, expected) => {
    const s = state({ rate: rate * PER_MIN, measuredRate: measured * PER_MIN, waited: true });
    if (throttle) {
      expect(cubic().onThrottled(s) / PER_MIN).toBeCloseTo(expected, 9);
      return;
    }
    // After the cut at 2.0 s from W = the measured 4.3264 u/s (the limiter was unlimited before it).
    const after = state({
      ...s,
      rateBeforeLastDecrease: Number.POSITIVE_INFINITY,
      measuredRateAtLastDecrease: 4.3264 * PER_MIN,
      sinceLastDecrease: Math.round((t - 2) * 1000),
    });
    expect(cubic().onSuccess(after)! / PER_MIN).toBeCloseTo(expected, 9);
  });

  it.each([
    ['beta', 0],
    ['beta', 1.5],
    ['scaleConstant', 0],
    ['scaleConstant', Number.POSITIVE_INFINITY],
    ['scaleConstant', null],
  ])('rejects %s = %s with a ConfigError naming the field', (field, value) => {
    const build = () => cubic({ [field]: value } as never);
    expect(build).toThrow(ConfigError);
    expect(build).toThrow(`cubic.${field}`);
  });
});

describe('resolveController', () => {
  it('builds the named controllers with their options', () => {
    expect(resolveController('aimd', { aimd: { decreaseFactor: 0.5 } }).onThrottled(state())).toBe(500);
    expect(resolveController('cubic', { cubic: { beta: 0.5 } }).onThrottled(state())).toBe(500);
  });

  it('returns a custom controller as is', () => {
    const custom = new StepController(30);
    expect(resolveController(custom, {})).toBe(custom);
  });

  it.each([
    ['an unknown name', 'vegas'],
    ['an object without onSuccess', { onThrottled: () => 1 }],
    ['null', null],
  ])('rejects %s with a ConfigError naming controller', (_name, spec) => {
    const build = () => resolveController(spec as never, {});
    expect(build).toThrow(ConfigError);
    expect(build).toThrow('controller');
  });

  it('passes option errors through', () => {
    expect(() => resolveController('cubic', { cubic: { beta: 2 } })).toThrow('cubic.beta');
  });
});

// One suite every controller must pass.
const samples: RateControllerState[] = [
  state(),
  state({ waited: true, sinceLastIncrease: 60_000, sinceLastDecrease: 60_000 }),
  state({ rate: 1968.75, rateBeforeLastDecrease: 2812.5, maxRate: 2812.5, instanceCount: 2, waited: true }),
  state({
    rate: 500,
    measuredRate: 400,
    measuredRateAtLastDecrease: 900,
    sinceLastDecrease: 3_000,
    waited: true,
  }),
  state({ rate: 1, minRate: 1, sinceLastIncrease: 31_000, sinceLastDecrease: 31_000, waited: true }),
  state({
    rate: 300,
    sinceLastDecrease: 20_000,
    pauseSinceLastDecrease: 19_000,
    measuredRate: 0,
    waited: true,
  }),
  state({ rate: 2000, maxRate: 2000, sinceLastIncrease: 40_000, sinceLastDecrease: 40_000, waited: true }),
];

describe.each([
  ['aimd()', aimd()],
  ['cubic()', cubic()],
  ['probe()', probe()],
  ['StepController', new StepController(30)],
])('the controller contract: %s', (_name, controller: RateController) => {
  it.each(samples)('onThrottled returns a finite rate not above the current one (%#)', (s) => {
    const next = controller.onThrottled(s);
    expect(Number.isFinite(next)).toBe(true);
    expect(next).toBeLessThanOrEqual(s.rate);
  });

  it.each(samples)('onSuccess returns undefined or a finite rate not below the current one (%#)', (s) => {
    const next = controller.onSuccess(s);
    if (next === undefined) return;
    expect(Number.isFinite(next)).toBe(true);
    expect(next).toBeGreaterThanOrEqual(s.rate);
  });

  it.each(samples)('is pure: the same frozen state gives the same answers (%#)', (s) => {
    const copy = { ...s };
    expect(controller.onThrottled(s)).toBe(controller.onThrottled(s));
    expect(controller.onSuccess(s)).toBe(controller.onSuccess(s));
    expect(s).toEqual(copy);
  });

  it.each(samples)('does not raise the rate when no request waited (%#)', (s) => {
    expect(controller.onSuccess({ ...s, waited: false })).toBeUndefined();
  });
});
