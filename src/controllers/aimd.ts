import type { RateController, RateControllerState } from './types.js';
import { isPositiveFinite, validateNumbers } from './validate.js';

/** Options of the AIMD controller (additive increase, multiplicative decrease). */
export interface AimdOptions {
  /**
   * On a throttle the rate is multiplied by this factor (a 30% cut by default).
   * A plain number, greater than 0 and less than 1.
   * @default 0.7
   */
  decreaseFactor?: number;
  /**
   * The least time between two increases, in ms. The rate goes up only after this much time
   * since the last change (from `onSuccess` or a throttle) and only if requests had to wait in it.
   * Greater than 0 and finite.
   * @default 10_000
   */
  increaseInterval?: number;
  /**
   * The increase in units per minute for the WHOLE budget; each process adds its share,
   * `increaseStep / instanceCount`. Greater than 0 and finite.
   * @default 120
   */
  increaseStep?: number;
}

const DEFAULTS = { decreaseFactor: 0.7, increaseInterval: 10_000, increaseStep: 120 } as const;

/**
 * The AIMD controller, RateLimiting.Adaptive's default (`controller: 'aimd'`). Climbs in equal steps while requests wait and cuts by
 * `decreaseFactor` on a throttle: a saw tooth that spends most of its time below the limit.
 * With the defaults the whole budget climbs by at most 720 units/min per minute
 * (6 steps of 120 units/min). Throws `ConfigError` at once for a bad option.
 */
export function aimd(options: AimdOptions = {}): RateController {
  const { decreaseFactor, increaseInterval, increaseStep } = validateNumbers('aimd', options, DEFAULTS, {
    decreaseFactor: ['must be a number > 0 and < 1', (v) => v > 0 && v < 1],
    increaseInterval: ['must be a finite number of ms > 0', isPositiveFinite],
    increaseStep: ['must be a finite number of units/min > 0', isPositiveFinite],
  });
  return {
    onThrottled(state: RateControllerState): number {
      return state.rate * decreaseFactor;
    },
    onSuccess(state: RateControllerState): number | undefined {
      if (!state.waited || state.sinceLastIncrease < increaseInterval) return undefined;
      return Math.min(state.rate + increaseStep / state.instanceCount, state.maxRate);
    },
  };
}
