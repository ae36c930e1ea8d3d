import type { RateController, RateControllerState } from './types.js';
import { isPositiveFinite, validateNumbers } from './validate.js';

/** Options of the CUBIC controller (the window curve of RFC 8312, AWS SDK adaptive-mode constants). */
export interface CubicOptions {
  /**
   * The multiplicative decrease: on a throttle the rate becomes `W * beta`.
   * Greater than 0 and less than 1.
   * @default 0.7
   */
  beta?: number;
  /**
   * `C` of the curve for the WHOLE budget, in units/s per s^3; each process uses
   * `scaleConstant / instanceCount`. Greater than 0 and finite.
   * @default 0.4
   */
  scaleConstant?: number;
}

/** The inputs of the RFC 8312 curve, in units per SECOND and seconds. */
export interface CubicParams {
  /** W_max: the rate at the last cut (units/s). */
  W: number;
  /** The multiplicative decrease factor (unitless, in (0, 1)). */
  beta: number;
  /** The scale constant (units/s per s^3), already divided by the instance count. */
  C: number;
}

/** K = ∛(W × (1 − β) / C): the seconds the curve takes to climb back to W after a cut. */
export function cubicK({ W, beta, C }: CubicParams): number {
  return Math.cbrt((W * (1 - beta)) / C);
}

/**
 * The RFC 8312 window curve, W_cubic(t) = C × (t − K)³ + W (units/s), at `t` seconds after the cut.
 * It gives `beta × W` at t = 0 and `W` at t = K.
 */
export function cubicCurve({ W, beta, C, t }: CubicParams & { t: number }): number {
  return C * (t - cubicK({ W, beta, C })) ** 3 + W;
}

const DEFAULTS = { beta: 0.7, scaleConstant: 0.4 } as const;
const MS_PER_S = 1000;
const S_PER_MIN = 60;

/**
 * The CUBIC controller. Pure and stateless: W, t and the measured rate all come from the state.
 * It climbs fast, slows down near the rate of the last cut, then climbs fast again; only the
 * maximum and 2x the measured send rate stop it. Throws `ConfigError` at once for a bad option.
 */
export function cubic(options: CubicOptions = {}): RateController {
  const { beta, scaleConstant } = validateNumbers('cubic', options, DEFAULTS, {
    beta: ['must be a number > 0 and < 1', (v) => v > 0 && v < 1],
    scaleConstant: ['must be a finite number > 0', isPositiveFinite],
  });
  return {
    onThrottled(state: RateControllerState): number {
      // W: the current rate, or the measured send rate if that is lower. The cut is linear,
      // so it stays in units/min (no round trip through units/s).
      const W = Math.min(state.rate, state.measuredRate ?? Number.POSITIVE_INFINITY);
      return W * beta;
    },
    onSuccess(state: RateControllerState): number | undefined {
      if (!state.waited) return undefined;
      // W (units/s): the rate before the last cut (before any cut: the initial rate), or the
      // measured send rate then if that was lower.
      const before = state.measuredRateAtLastDecrease ?? Number.POSITIVE_INFINITY;
      const W = Math.min(state.rateBeforeLastDecrease, before) / S_PER_MIN;
      // An unbounded initial rate has no curve to climb: the rate is unlimited (or at its maximum).
      if (!Number.isFinite(W)) return undefined;
      // C (units/s per s^3): this process's share of the whole budget's constant.
      const C = scaleConstant / state.instanceCount;
      // t (s): time since the last cut, without the Retry-After pause after it; never negative.
      const t = Math.max(0, state.sinceLastDecrease - state.pauseSinceLastDecrease) / MS_PER_S;
      let next = cubicCurve({ W, beta, C, t }); // units/s
      if (state.measuredRate !== undefined) next = Math.min(next, (2 * state.measuredRate) / S_PER_MIN);
      const perMinute = Math.min(next * S_PER_MIN, state.maxRate);
      // Never down on a success; no change leaves `waited` set.
      return perMinute > state.rate ? perMinute : undefined;
    },
  };
}
