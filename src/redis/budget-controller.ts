import type { DecreaseRecord, RateController, RateControllerState } from '../controllers/types.js';
import { clampRate, cutTarget, drawFrom } from '../limiter/rate-book.js';
import type { ControllerBooks, Proposal } from './store.js';

/**
 * The state the budget's controller sees: a single limiter's, for the whole budget, plus the
 * members' accepted rates added up (units/min; `undefined` before any report). Once the
 * limiter's own state carries `acceptedRate` (issue 10), this is that state.
 */
export type BudgetControllerState = RateControllerState & { readonly acceptedRate: number | undefined };

/** A cut of the whole rate, computed by a member from the books it knows (see {@link BudgetController.cut}). */
export interface CutPlan {
  /** The whole rate after the cut, units/min. */
  readonly rate: number;
  /** The whole rate it started from. */
  readonly rateBefore: number;
  /** The measured (accepted) whole rate the controller saw. */
  readonly measured: number | undefined;
  /** The books it was computed from; `undefined`: none known yet (the store answers `stale`). */
  readonly from: { generation: string; version: number } | undefined;
  /** The cut as the books keep it (the controller's `decreases` from then on). */
  readonly record: DecreaseRecord;
  /** The books' random number from then on, in [0, 1). */
  readonly random: number;
}

/** What a member learned of the shared state in one answer of the store. */
export interface Learned {
  readonly generation: string;
  readonly rate: number | undefined;
  readonly books: ControllerBooks;
  /** ms left of the shared pause then. */
  readonly pauseRemaining: number;
  /** The members' sums (units/min) and this member's own part of them, when the answer had them. */
  readonly sums?: { accepted: number; measured: number; ownAccepted: number } | undefined;
}

/** The last answer's state, received at `at` (ms, this member's clock). */
type Known = Omit<Learned, 'sums'> & { readonly at: number };

/** Whole-budget rates the controller works within, units/min. */
export interface BudgetLimits {
  /** `undefined`: none (unlimited until a throttle). */
  readonly initialRate: number | undefined;
  readonly minRate: number;
  /** `Infinity`: no maximum. */
  readonly maxRate: number;
  /** Draws the books' random number at each cut (the limiter's `random` option). */
  readonly random: () => number;
}

/** The shortest span an accepted rate is read over (ms), as a single limiter reads it. */
const MIN_SPAN_MS = 1_000;
/** The random number of books that have none yet (before the first cut). */
const NO_DRAW = 0.5;

/** A proposed rate this close (relative) to the current one is no change. */
const NO_CHANGE = 1e-9;

/**
 * The budget's controller, run by a member on the state kept once for the budget in the store:
 * the books (last cut, rate before it, pause since, last change, whether requests waited) as of
 * the store's last answer, aged by the time since on this member's clock, and the members'
 * accepted and measured rates added up. Any {@link RateController} (AIMD, CUBIC, the probe
 * controller, your own) decides on it as a single limiter's controller would for the whole
 * budget (`instanceCount` 1, the whole min and max):
 *
 * - a throttle: {@link cut} computes the whole cut from the current rate, with the accepted sum
 *   as the measured rate it starts from (while throttled, what the members got accepted is the
 *   quota); the store makes it only from the books it was computed from (compare-and-set);
 * - a success: {@link proposal} computes the change the controller makes now; the next heartbeat
 *   carries it and the store sets it only when the books are still at that version. So a cut,
 *   a ceiling and a probe are decided once for the budget, whichever member computes them.
 *
 * Pure bookkeeping: no timer, no I/O; `now` is the member's clock, used only for the time since
 * the store's answer.
 */
export class BudgetController {
  readonly #inner: RateController;
  readonly #limits: BudgetLimits;
  #known: Known | undefined;
  #accepted: number | undefined;
  #measured = 0;
  /** This member's accepted rate as counted in `#accepted`. */
  #ownAccepted = 0;

  constructor(inner: RateController, limits: BudgetLimits) {
    this.#inner = inner;
    this.#limits = limits;
  }

  /** The state of the store's answer received at `at` (ms, this member's clock). */
  learn(learned: Learned, at: number): void {
    const { generation, rate, books, pauseRemaining } = learned;
    this.#known = { generation, rate, books, pauseRemaining, at };
    if (learned.sums !== undefined)
      this.learnSums(learned.sums.accepted, learned.sums.measured, learned.sums.ownAccepted);
  }

  /** The members' sums of a heartbeat's answer (units/min), and this member's accepted rate in it. */
  learnSums(accepted: number, measured: number, ownAccepted: number): void {
    this.#accepted = accepted;
    this.#measured = measured;
    this.#ownAccepted = ownAccepted;
  }

  /** Cuts in the books known (at most the books' 8). */
  get cuts(): number {
    return this.#known?.books.decreases.length ?? 0;
  }

  /** The members' accepted rates added up, with this member's as of `ownNow` (units/min). */
  acceptedSum(ownNow: number): number | undefined {
    if (this.#accepted === undefined) return undefined;
    return Math.max(0, this.#accepted - this.#ownAccepted + ownNow);
  }

  /**
   * The controller's state for the whole budget at `now`: the last books aged by the time since
   * they were answered. `waited`: a request of this member waited since then.
   */
  state(now: number, waited: boolean, ownAccepted: number): BudgetControllerState {
    const k = this.#known;
    const { initialRate, minRate, maxRate } = this.#limits;
    const b = k?.books;
    const elapsed = k === undefined ? 0 : Math.max(0, now - k.at);
    const pause = k?.pauseRemaining ?? 0;
    const sinceLastDecrease = (b?.sinceLastDecrease ?? 0) + elapsed;
    const pauseSinceLastDecrease = (b?.pauseSinceLastDecrease ?? 0) + Math.min(elapsed, pause);
    const decreases = b?.decreases ?? [];
    return {
      rate: k?.rate ?? Number.POSITIVE_INFINITY,
      minRate,
      maxRate,
      rateBeforeLastDecrease: b?.rateBeforeLastDecrease ?? initialRate ?? Number.POSITIVE_INFINITY,
      measuredRateAtLastDecrease: b?.measuredRateAtLastDecrease,
      sinceLastDecrease,
      pauseSinceLastDecrease,
      // While paused at the answer, the increase clock starts at the pause's end.
      sinceLastIncrease: pause > 0 ? Math.max(0, elapsed - pause) : (b?.sinceLastIncrease ?? 0) + elapsed,
      waited: (b?.waited ?? false) || waited,
      instanceCount: 1,
      measuredRate: this.#measured > 0 ? this.#measured : undefined,
      acceptedRate: this.acceptedSum(ownAccepted),
      // What the members reported accepted since the last cut, over that time less its pauses.
      acceptedRateSinceLastDecrease:
        decreases.length === 0 || b === undefined
          ? undefined
          : (b.acceptedSinceLastDecrease * 60_000) /
            Math.max(MIN_SPAN_MS, sinceLastDecrease - pauseSinceLastDecrease),
      // The books' draw: every member computes the same rate from the same books.
      decreases,
      random: b?.random ?? NO_DRAW,
    };
  }

  /**
   * The change the controller makes to the whole rate after a success at `now`, to send with the
   * next heartbeat; `undefined`: none (unlimited, no answer yet, during the shared pause, as a
   * single limiter asks nothing while paused, or no change).
   */
  proposal(now: number, waited: boolean, ownAccepted: number): Proposal | undefined {
    const k = this.#known;
    if (k === undefined || k.rate === undefined) return undefined;
    if (now - k.at < k.pauseRemaining) return undefined;
    const next = this.#inner.onSuccess(this.state(now, waited, ownAccepted));
    if (next === undefined || !Number.isFinite(next)) return undefined;
    const rate = this.#clamp(next);
    if (Math.abs(rate - k.rate) <= k.rate * NO_CHANGE) return undefined;
    return { generation: k.generation, version: k.books.version, rate };
  }

  /**
   * The whole cut after a throttle at `now`, from the current whole rate. The controller sees
   * the accepted sum as the measured rate: what the server accepted of the members is the quota
   * a cut should start from. Leaving "unlimited" (no rate yet), the rate it cuts is that accepted
   * sum, as a single limiter's is what the server accepted; without any success yet, the members'
   * measured send rate (else `localBase`, this member's, scaled by its `fraction`). Never above
   * the rate it starts from. `fresh`: the budget's first cut, computed from reports every member
   * made after the throttle (coordinator.ts): the controller's estimate is half the accepted sum.
   */
  cut(now: number, ownAccepted: number, localBase: number, fraction: number, fresh = false): CutPlan {
    const k = this.#known;
    const state = this.state(now, false, ownAccepted);
    const accepted = state.acceptedRate;
    /** The accepted rate the controller reads as its estimate of the quota (the probe's ceiling). */
    let estimate = accepted;
    let base = state.rate;
    const leaving = !Number.isFinite(base);
    if (leaving) {
      // Read fresh (`fresh`: every member reported after the throttle), the accepted sum is what
      // the members sent: from a start without a rate every request before the first 429 got
      // through (the server's burst), so it bounds the quota from above and measures nothing below
      // it. The estimate is half of it, as a first response to loss; the probe climbs from there
      // and its next cut reads windows no pause took part of. The rate it cuts from and the
      // measured rate (AIMD's and CUBIC's) stay the sum: their cuts are already multiplicative.
      if (fresh && accepted !== undefined) estimate = accepted / 2;
      // Leaving "unlimited", as a single limiter does: from what the server accepted of the
      // members; with nothing accepted in the window (no success yet, or a quiet spell), from what
      // they sent (their measured sum) or this member's own base scaled by its part, whichever is
      // higher. The member's base is its book's (`RateBook.cut`: the quiet-window rule, at least
      // the throttled call over the window after few answers); the measured sum alone, closed
      // over a quiet hour (one call of 500 tokens in it: 8 a minute), cut a tokens budget to 4 a
      // minute, and its next calls were refused at maxWait.
      if (accepted !== undefined && accepted > 0) base = accepted;
      else base = Math.max(this.#measured, localBase / Math.max(fraction, 1e-6));
      base = this.#clamp(base);
    }
    // That base stands as the measured rate too when nothing was accepted, as a single limiter's
    // does, so CUBIC's W is not cut from the quiet hour's average.
    const measured = accepted !== undefined && accepted > 0 ? accepted : leaving ? base : state.measuredRate;
    const proposed = this.#inner.onThrottled({
      ...state,
      rate: base,
      measuredRate: measured,
      acceptedRate: estimate,
    });
    const rate = this.#clamp(cutTarget(proposed, base));
    return {
      rate,
      rateBefore: base,
      measured,
      from: k === undefined ? undefined : { generation: k.generation, version: k.books.version },
      // As a single limiter records its cut (rate-book.ts): what was accepted, else the rate cut from.
      record: {
        rateBefore: base,
        acceptedRate: estimate !== undefined && estimate > 0 ? estimate : base,
        acceptedRateSincePrevious: state.acceptedRateSinceLastDecrease,
      },
      random: drawFrom(this.#limits.random),
    };
  }

  #clamp(rate: number): number {
    return clampRate(rate, this.#limits.minRate, this.#limits.maxRate);
  }
}
