import type { RateControllerState } from '../../src/controllers/index.js';

/**
 * A builder of frozen controller states for the controllers' pure tests: 1,000 units/min, no cut
 * yet, a request waited, one instance, random 0, unless `base` (per file) or `overrides` (per
 * test) say otherwise.
 */
export function controllerStateOf(
  base: Partial<RateControllerState> = {},
): (overrides?: Partial<RateControllerState>) => RateControllerState {
  return (overrides = {}) =>
    Object.freeze({
      rate: 1000,
      minRate: 1,
      maxRate: Number.POSITIVE_INFINITY,
      rateBeforeLastDecrease: 1000,
      measuredRateAtLastDecrease: undefined,
      sinceLastDecrease: 0,
      pauseSinceLastDecrease: 0,
      sinceLastIncrease: 0,
      waited: true,
      instanceCount: 1,
      measuredRate: undefined,
      acceptedRate: undefined,
      acceptedRateSinceLastDecrease: undefined,
      decreases: [],
      random: 0,
      ...base,
      ...overrides,
    });
}
