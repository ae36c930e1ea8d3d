import { keepsNoState } from '../controllers/index.js';
import type { RateController, RateControllerState } from '../controllers/types.js';

/** What the local limiter's controller asks of its member (member-state.ts). */
export interface MemberView {
  /** True while the store cannot be reached: the member runs on its own, as a static share. */
  readonly degraded: boolean;
  /** This member's part of the whole rate as last learned (its share / the rate), in (0, 1]. */
  readonly fraction: number;
  /** The whole budget's minimum and maximum, units/min (`Infinity`: none). */
  readonly minRate: number;
  readonly maxRate: number;
  /**
   * A throttle cut the local rate `state.rate` (a cut the local cut rules allow): the member's
   * new rate, its share of the whole cut the budget's controller computes
   * (budget-controller.ts), which the member then asks the store to make.
   */
  cutShare(state: RateControllerState): number;
}

/**
 * The controller of a member's local limiter. The budget's controller decides for the whole
 * budget, once (budget-controller.ts); the local limiter's rate is the share the heartbeat sets.
 * So this one:
 *
 * - on a throttle the local cut rules allow (a permit of the local epoch, outside the local
 *   cooldown), answers the member's share of the whole cut, applied at once; the store then
 *   makes the whole cut, or refuses it and the member's share of the unchanged rate comes back;
 * - on a success, answers nothing: increases are proposed with the heartbeat.
 *
 * While the store cannot be reached (`degraded`), the member is a process with a static share,
 * its last part of the budget: the inner controller runs on the local state with that part of
 * the whole minimum, maximum and steps (`instanceCount` = 1 / part), as a limiter with
 * `instanceCount` would.
 */
export function memberController(inner: RateController, view: MemberView): RateController {
  const alone = (s: RateControllerState): RateControllerState => {
    const part = Math.min(1, Math.max(view.fraction, 1e-6));
    return { ...s, instanceCount: 1 / part, minRate: view.minRate * part, maxRate: view.maxRate * part };
  };
  // It keeps nothing of a state: the inner controller gets a copy, the member reads the rate.
  return keepsNoState({
    onThrottled(s) {
      return view.degraded ? inner.onThrottled(alone(s)) : view.cutShare(s);
    },
    onSuccess(s) {
      return view.degraded ? inner.onSuccess(alone(s)) : undefined;
    },
  });
}
