import type { RateController, RateControllerState } from '../controllers/types.js';

/** What a member's controller needs to know of the shared budget, read at each call. */
export interface ShareView {
  /** This member's part of the whole rate (its share divided by the whole rate), in (0, 1]. */
  readonly fraction: number;
  /** The whole budget's minimum, units/min. */
  readonly minRate: number;
  /** The whole budget's maximum, units/min (`Infinity`: none). */
  readonly maxRate: number;
  /** The last cut of the whole rate made by another member, as this member learned of it. */
  readonly sharedCut: SharedCut | undefined;
}

/** A cut of the whole rate, seen from this member. */
export interface SharedCut {
  /** ms since this member learned of it. */
  readonly since: number;
  /** ms of that time this member was paused. */
  readonly paused: number;
  /** The whole rate before it, units/min. */
  readonly rateBefore: number;
}

/** A part below this is taken as this: a controller's steps are divided by it. */
const LEAST_FRACTION = 1e-6;

/**
 * A member's controller of a shared budget: the budget's controller, shown the state of a
 * process that carries `fraction` of the whole budget (static shares show it `1 / instanceCount`):
 *
 * - `instanceCount` is `1 / fraction` (not a whole number): AIMD adds `fraction` of its step,
 *   CUBIC uses `fraction` of its constant, a custom controller divides its steps the same way;
 * - `minRate` and `maxRate` are `fraction` of the whole budget's: a member never raises its rate
 *   above its part of the maximum (its share plus its part of the headroom), so the members
 *   together stay within the maximum;
 * - the last cut is the later of this member's own cut and the last shared cut it learned of:
 *   after another member's cut every member's CUBIC curve starts again from the whole rate
 *   before that cut, as one limiter's would. The rate before its own cut is rescaled from the part
 *   the member had then to the part it has now;
 * - the measured rate is the whole budget's as far as this member knows it, in its part: its own
 *   sends, and the others' shares (so a member that sends less than its share does not take the
 *   whole budget down to what it sends).
 *
 * So a member's rate divided by its `fraction` is the whole rate its controller proposes, a step
 * or a level alike, and members with the same history propose the same. The changes a member
 * makes to its own rate between two heartbeats add up to the whole rate's change; a member whose
 * share was set back below its controller's level proposes only the rest: a level is reached,
 * not passed.
 *
 * `quiet`: the controller raises only after a wait (AIMD, CUBIC), so a success without one is
 * answered at once.
 */
export function shareController(inner: RateController, view: () => ShareView, quiet = false): RateController {
  /** The member's part at its last own cut: the scale of the engine's `rateBeforeLastDecrease`. */
  let fractionAtCut = partOf(view());

  const scaled = (s: RateControllerState): { state: RateControllerState; max: number } => {
    const v = view();
    const part = partOf(v);
    const max = v.maxRate * part;
    const shared = v.sharedCut;
    let cut: Pick<
      RateControllerState,
      'rateBeforeLastDecrease' | 'measuredRateAtLastDecrease' | 'sinceLastDecrease' | 'pauseSinceLastDecrease'
    >;
    if (shared !== undefined && shared.since < s.sinceLastDecrease) {
      cut = {
        rateBeforeLastDecrease: shared.rateBefore * part,
        measuredRateAtLastDecrease: undefined,
        sinceLastDecrease: shared.since,
        pauseSinceLastDecrease: shared.paused,
      };
    } else {
      const k = part / fractionAtCut;
      const before = s.measuredRateAtLastDecrease;
      cut = {
        rateBeforeLastDecrease: s.rateBeforeLastDecrease * k,
        measuredRateAtLastDecrease:
          before === undefined
            ? undefined
            : wholeMeasured(before, s.rateBeforeLastDecrease, fractionAtCut) * k,
        sinceLastDecrease: s.sinceLastDecrease,
        pauseSinceLastDecrease: s.pauseSinceLastDecrease,
      };
    }
    return {
      max,
      state: {
        ...s,
        ...cut,
        minRate: Math.min(v.minRate * part, max),
        maxRate: max,
        measuredRate: s.measuredRate === undefined ? undefined : wholeMeasured(s.measuredRate, s.rate, part),
        instanceCount: s.instanceCount / part,
      },
    };
  };

  return {
    onThrottled(s) {
      const { state } = scaled(s);
      // The engine records this cut's rates in the member's current part.
      fractionAtCut = partOf(view());
      return inner.onThrottled(state);
    },
    onSuccess(s) {
      if (quiet && !s.waited) return undefined;
      const { state, max } = scaled(s);
      const next = inner.onSuccess(state);
      if (next === undefined || !(next > max)) return next;
      // Never above this member's part of the maximum; never down because of it.
      return max > s.rate ? max : undefined;
    },
  };
}

/**
 * The whole budget's measured rate in a member's part, when the member measured `measured` at
 * `rate` and carries `part` of the budget: the others are taken to send their shares.
 */
export function wholeMeasured(measured: number, rate: number, part: number): number {
  if (measured >= rate || !Number.isFinite(rate)) return measured;
  return (1 - part) * rate + part * measured;
}

function partOf(view: ShareView): number {
  const f = view.fraction;
  if (!(f > LEAST_FRACTION)) return LEAST_FRACTION;
  return Math.min(f, 1);
}
