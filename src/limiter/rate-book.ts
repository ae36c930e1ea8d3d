import { cutReadingsOf, FAST_REQUESTS, mayReuseState } from '../controllers/index.js';
import type { DecreaseRecord, RateController, RateControllerState } from '../controllers/types.js';
import { AcceptedRate, type PausedIn } from './accepted-rate.js';
import { MeasuredRate } from './measured-rate.js';
import type { ResolvedLimiterOptions } from './options.js';
import type { Pause } from './pause.js';
import type { LimiterPermit } from './permit.js';

/**
 * A limiter's controller and the books that make its state: the measured send rate, whether a
 * request waited, the last cut and the last increase, the rate and the measured rate before the
 * last decrease, the cut epoch permits are granted in, and what was sent while unlimited. It
 * applies the cut rules (README, "How the limiter works": a throttle cuts only for a permit granted since the last
 * cut, and not within `decreaseCooldown` of it) and clamps the controller's answers to this
 * process's share of [min, max]. Rates are units/min of this process; times are ms on the
 * limiter's clock. It owns no clock and no timer: the limiter passes `now`.
 */
export class RateBook {
  readonly #pause: Pause;
  /** The send rate the responses make: the limiter records each into it. */
  readonly measured = new MeasuredRate();
  /** The rate the server accepts: the limiter records each success into it. */
  readonly accepted = new AcceptedRate();
  #opts: ResolvedLimiterOptions;
  #controller: RateController;
  /** A request waited (or was turned away) since the last change of rate. */
  waited = false;
  /** Cuts and throttled responses so far. */
  cuts = 0;
  throttles = 0;
  /** The last cut (ms); the creation before any. */
  lastCutAt: number;
  #lastIncreaseAt: number;
  /** The last success that raised the rate (ms). */
  #raisedAt: number | undefined;
  #rateBeforeLastDecrease: number;
  #measuredAtLastDecrease: number | undefined;
  /** Units granted while unlimited, and when the first was (made at the first): the send rate a first cut starts from. */
  #unlimitedSent: { units: number; since: number } | undefined;
  /** The last cuts, oldest first. */
  #decreases: readonly DecreaseRecord[] = NO_CUTS;
  /** The random number of the state: drawn at creation and at each cut. */
  #random: number;
  /** What the book asks a controller with, made at the first question or announced rate (an idle limiter has neither). */
  #asking: Asking | undefined;

  constructor(
    opts: ResolvedLimiterOptions,
    controller: RateController,
    pause: Pause,
    now: number,
    rate: number,
  ) {
    this.#pause = pause;
    this.#opts = opts;
    this.#controller = controller;
    this.lastCutAt = now;
    this.#lastIncreaseAt = now;
    this.#rateBeforeLastDecrease = rate;
    this.#random = drawFrom(opts.random);
    this.configure(opts, controller);
  }

  /** Takes new options (and controller); `share` rescales what was learned to a new instance count. */
  configure(opts: ResolvedLimiterOptions, controller = this.#controller, share = 1): void {
    this.#opts = opts;
    this.#controller = controller;
    // The controller may have changed.
    if (this.#asking !== undefined) this.#asking.reuse = mayReuseState(controller);
    this.#rateBeforeLastDecrease *= share;
    if (share !== 1) {
      // Every field a cut was booked with (a start-capped first cut stays one), its rates rescaled.
      this.#decreases = this.#decreases.map((d) => ({
        ...d,
        rateBefore: d.rateBefore * share,
        acceptedRate: d.acceptedRate * share,
        acceptedRateSincePrevious:
          d.acceptedRateSincePrevious === undefined ? undefined : d.acceptedRateSincePrevious * share,
      }));
    }
  }

  /** The cut epoch a permit is granted in (the cuts so far): a throttle cuts only for a permit of the current one. */
  get epoch(): number {
    return this.cuts;
  }

  /** The lowest fresh ceiling the API announced (units/min), for the controllers. */
  get announcedRate(): number | undefined {
    return this.#asking?.announced;
  }

  set announcedRate(rate: number | undefined) {
    if (rate !== undefined || this.#asking !== undefined) this.#asked().announced = rate;
  }

  /**
   * The lowest ceiling the API's quotas set over their windows (units/min; see
   * `Ceilings.longRun`): at or above {@link announcedRate}, which a window that others drained
   * holds lower until its reset.
   */
  get announcedQuotaRate(): number | undefined {
    return this.#asking?.announcedQuota;
  }

  set announcedQuotaRate(rate: number | undefined) {
    if (rate !== undefined || this.#asking !== undefined) this.#asked().announcedQuota = rate;
  }

  /** AIMD, CUBIC or probe by name, which answer `undefined` to a success when nothing waited. */
  get builtIn(): boolean {
    return typeof this.#opts.controller === 'string';
  }

  /** This process's share of `minUnitsPerMinute` (read from the options: an idle limiter keeps no copy). */
  get minRate(): number {
    return this.#opts.minUnitsPerMinute / this.#opts.instanceCount;
  }

  /** This process's share of `maxUnitsPerMinute`. */
  get maxRate(): number {
    return this.#opts.maxUnitsPerMinute / this.#opts.instanceCount;
  }

  clamp(rate: number): number {
    return clampRate(rate, this.minRate, this.maxRate);
  }

  /** `units` were granted at `now` while unlimited. */
  grantedUnlimited(units: number, now: number): void {
    const sent = this.#unlimitedSent;
    if (sent === undefined) this.#unlimitedSent = { units, since: now };
    else sent.units += units;
  }

  /**
   * Asks the controller after a success at `rate`; `undefined` for no change. An answer restarts
   * the increase clock and clears `waited`; it is clamped.
   */
  success(now: number, rate: number): number | undefined {
    const accepted = this.acceptedRate(now);
    const next = this.#controller.onSuccess(
      this.#asked().reuse ? this.#fill(now, rate, accepted) : this.#state(now, rate, accepted),
    );
    if (next === undefined || !Number.isFinite(next)) return undefined;
    if (next > rate) this.#raisedAt = now;
    this.#lastIncreaseAt = now;
    this.waited = false;
    return this.clamp(next);
  }

  /** Books a throttled response to `permit` at `now`; whether it cuts the rate. */
  throttled(permit: LimiterPermit, now: number): boolean {
    this.measured.record(permit.units, now);
    this.throttles++;
    this.#lastIncreaseAt = now;
    return (
      permit.epoch === this.epoch && (this.cuts === 0 || now - this.lastCutAt >= this.#opts.decreaseCooldown)
    );
  }

  /**
   * Cuts at `now` from `rate`: asks the controller, books the cut and returns the new rate
   * (clamped, never above the old). A controller that throws leaves the books as they were.
   * `capped`: the cold start's cap on units in flight still held the sends back. Such a first cut,
   * or one read over the first second's floor (few answers), is booked `startCapped`.
   */
  cut(now: number, rate: number, capped = false, units = 1): number {
    let base = rate;
    let measured = this.measured.value;
    // At many requests a second, the window less every pause in it: a 429 soon after a
    // Retry-After pause starts a pause of its own, and the window must not read the first one as
    // a second the server let nothing through (a cut to half the rate).
    let accepted = this.acceptedRate(now, manyRequests(this.measured.requests));
    if ((this.cuts === 0 || this.#afterCappedStart()) && accepted !== undefined) {
      // The first cut: the 3 s window may still average in the slow start; the last second read
      // at the top of the ramp is the better estimate (a server's burst may inflate it: the
      // next cut corrects an estimate too high at once, while one too low takes cycles). So for
      // the cut that ends a start-up the probe went on with after a first cut the cold start's
      // cap held back (the rate doubled each half second: the 3 s hold a quarter of it).
      accepted = Math.max(accepted, this.recentAcceptedRate(now) ?? 0);
    }
    // At many requests a second (6,000/min), a window that holds a rise of the rate: at least what
    // got through since it (a cut after a climb read the lower rates before it).
    accepted = this.#sinceRise(now, accepted);
    // The cut after a burst of calls at once (`#burstStart`): the server's bucket was empty at the
    // first 429 and refilled during the Retry-After pause, so the window less the pause read the
    // tokens stored during it as if they came in the ms after it (a bucket of 20 that refills
    // 1,200/min read as 9,500). What got through since that cut, read as a refill
    // (`refillSinceMark`), is a lower bound of the server's rate: the reading when lower.
    let refill = false;
    const paused = this.#pause.sinceCut(now, this.lastCutAt);
    if (accepted !== undefined && this.#burstStart(rate, paused)) {
      const since = this.accepted.refillSinceMark(now, paused);
      if (since !== undefined && since < accepted) {
        accepted = since;
        refill = true;
      }
    }
    if (rate === Number.POSITIVE_INFINITY) {
      // Unlimited until now: start from what the server accepted (this process's share of the
      // quota while it throttles). Without any success yet, or none in the window (a quiet spell:
      // the window read what this process sent, nothing, not what the server lets through), from
      // what was sent: the units sent since the first grant (over at least a second), or the
      // smoothed rate if higher. A cut to the empty window's 0 went to the minimum, 1 a minute:
      // a token budget's next call of 500 tokens then waited 500 minutes.
      if (accepted !== undefined && accepted > 0) base = this.clamp(accepted);
      else {
        const sent = this.#unlimitedSent;
        const average = ((sent?.units ?? 0) * 60_000) / Math.max(now - (sent?.since ?? now), 1_000);
        // After a few answers only, at least the throttled call itself over the window: the
        // average since the first grant counts a quiet hour in it (one call of 500 tokens before
        // it: 8 tokens a minute, and the next call of 500 held for most of an hour). Not after
        // many: a busy process's call of thousands of tokens read that way is far above its share.
        const call = this.accepted.fewAnswers ? (units * 60_000) / ACCEPTED_WINDOW_MS : 0;
        base = this.clamp(Math.max(measured ?? 0, average, call));
      }
      // Nothing measured (fewer than 16 successes) and the API announced a higher rate (its
      // headers, the 429's own included): a few small calls on a token budget that others drained
      // are no reading of the quota, so the cut starts from the announced rate, as the probe goes
      // to it before any cut. A fresh token budget cut from one small call went to 100-1,000 of
      // 10,000/min. After more answers the reading stands: two processes that each sent their
      // demand read their part, where the announced rate is the whole quota.
      const announced = this.announcedRate;
      if (announced !== undefined && announced > base && this.accepted.fewAnswers) {
        base = this.clamp(announced);
        if (accepted !== undefined) accepted = base;
      }
      // That estimate stands as the measured rate too, so CUBIC's W is not cut twice.
      measured = base;
    }
    // Never from above what the API announces it allows: a reading above it is the API's stored
    // bucket spent at once (a minute of an LLM budget, taken in a second, read as 390,000 tokens
    // a minute of 20,000), and a cut to 70 % of that left the ceiling sending at the whole quota:
    // two processes on one key at twice it, their retries into 429s, for nine cuts. What the
    // quota allows over its window, not what a window others drained has left until its reset:
    // that ceiling holds the sends back until the reset by itself, and a cut from it (1,000
    // tokens left for 40 minutes: 25 a minute) stayed the rate after the reset, each next call
    // refused at maxWait, no success to raise it, for an hour.
    const ceiling = this.announcedQuotaRate ?? this.announcedRate;
    if (ceiling !== undefined && base > ceiling) {
      base = this.clamp(ceiling);
      if (accepted !== undefined && accepted > base) accepted = base;
      if (measured !== undefined && measured > base) measured = base;
    }
    const read = this.#state(now, base, accepted);
    const state: RateControllerState = refill ? { ...read, acceptedRateIsRefill: true } : read;
    const proposed = this.#controller.onThrottled(
      measured === state.measuredRate ? state : { ...state, measuredRate: measured },
    );
    const target = cutTarget(proposed, base);
    this.#rateBeforeLastDecrease = base;
    this.#measuredAtLastDecrease = measured;
    // A new array each time: a state handed out earlier keeps what it showed.
    const record: DecreaseRecord = {
      rateBefore: base,
      acceptedRate: accepted ?? base,
      acceptedRateSincePrevious: state.acceptedRateSinceLastDecrease,
      ...((capped || this.accepted.floored(now)) && this.cuts === 0 ? { startCapped: true } : {}),
      ...(rate === Number.POSITIVE_INFINITY && this.cuts === 0 ? { unlimited: true } : {}),
      ...cutReadingsOf(state),
    };
    this.#decreases = [...this.#decreases.slice(1 - CUTS_KEPT), record];
    this.#random = drawFrom(this.#opts.random);
    this.#pause.cut();
    this.accepted.mark(now);
    this.lastCutAt = now;
    this.cuts++; // the epoch too
    return this.clamp(target);
  }

  /**
   * The accepted rate a cut at `now` reads: `accepted` (the 3 s window), or, at
   * {@link FAST_REQUESTS} (measured) and more, what got through since the last rise of the rate when that is
   * higher, the rise at least {@link RISE_SPAN_MS} ago and since the last cut. After a probe's
   * climb (steps of a tenth, or a climb back to an earlier estimate) the window holds the lower
   * rates before it: at 30,000 a minute a cut read 12,200 with some 15,500 of room, then held there
   * for 4-8 s and climbed by 5 % steps, both processes together at 85-90 % of the quota for 5-10 s.
   */
  #sinceRise(now: number, accepted: number | undefined): number | undefined {
    const from = this.#raisedAt;
    if (accepted === undefined || from === undefined || from <= this.lastCutAt) return accepted;
    if ((this.measured.requests ?? 0) < FAST_REQUESTS || now - from < RISE_SPAN_MS) return accepted;
    const since = this.accepted.since(from, now, (start) => this.#pause.within(start, now));
    return since === undefined ? accepted : Math.max(accepted, since);
  }

  /**
   * Whether a cut from `rate`, `pausedMs` paused since the one cut so far, ends a burst of calls
   * at once: that cut was made unlimited while the cold start's cap held the sends back
   * (`unlimited`, `startCapped`: callers came together, more than the cap let through, so what got
   * through before it was the server's stored bucket, read over a few ms: 20 answers in 100 ms
   * read as 12,000 a minute from a bucket that refills 1,200); a Retry-After pause of at most
   * {@link REFILL_PAUSE_MS} since; the rate did not climb above that cut's estimate (the start-up
   * going on from a cap's estimate at thousands a second reads as any other cut).
   */
  #burstStart(rate: number, pausedMs: number): boolean {
    const first = this.#decreases[0];
    return (
      this.#decreases.length === 1 &&
      first!.unlimited === true &&
      first!.startCapped === true &&
      rate <= first!.rateBefore &&
      pausedMs > 0 &&
      pausedMs <= REFILL_PAUSE_MS
    );
  }

  /** Whether the one cut so far was a first cut the cold start's cap held back (see `startCapped`). */
  #afterCappedStart(): boolean {
    return this.#decreases.length === 1 && this.#decreases[0]!.startCapped === true;
  }

  /**
   * The accepted rate at `now` (the 3 s window), less the time paused in it: the current or last
   * pause, and with `earlier` the few before it too.
   */
  acceptedRate(now: number, earlier = false): number | undefined {
    const asking = this.#asked();
    asking.at = now;
    return this.accepted.value(now, earlier ? asking.pausedWithEarlier : asking.pausedInLast);
  }

  #asked(): Asking {
    this.#asking ??= new Asking(this.#pause, mayReuseState(this.#controller));
    return this.#asking;
  }

  /** The accepted rate over the last second at `now`, less the time paused in it. */
  recentAcceptedRate(now: number): number | undefined {
    return this.accepted.recent(now, (from) => this.#pause.within(from, now));
  }

  /** A new state at `now`, the controller's to keep (a cut's, or a success's for a custom controller). */
  #state(now: number, rate: number, accepted = this.acceptedRate(now)): RateControllerState {
    return { ...this.#fill(now, rate, accepted) };
  }

  /** The state at `now`, written into the book's one state object (every field). */
  #fill(now: number, rate: number, accepted: number | undefined): RateControllerState {
    const asking = this.#asked();
    const state = asking.state;
    const paused = this.#pause.sinceCut(now, this.lastCutAt);
    state.rate = rate;
    state.minRate = this.minRate;
    state.maxRate = this.maxRate;
    state.rateBeforeLastDecrease = this.#rateBeforeLastDecrease;
    state.measuredRateAtLastDecrease = this.#measuredAtLastDecrease;
    state.sinceLastDecrease = now - this.lastCutAt;
    state.pauseSinceLastDecrease = paused;
    state.sinceLastIncrease = now - this.#pause.increaseClockFrom(now, this.#lastIncreaseAt);
    state.waited = this.waited;
    state.instanceCount = this.#opts.instanceCount;
    state.measuredRate = this.measured.value;
    state.measuredRequestRate = this.measured.requests;
    state.acceptedRate = accepted;
    state.acceptedRateSinceLastDecrease = this.cuts === 0 ? undefined : this.accepted.sinceMark(now, paused);
    state.decreases = this.#decreases;
    state.random = this.#random;
    state.announcedRate = asking.announced;
    return state;
  }
}

/** `T` without `readonly`: the state the book writes into. */
type Writable<T> = { -readonly [K in keyof T]: T[K] };

/** The last cuts of a book that has cut none (shared: a cut makes a new array). */
const NO_CUTS: readonly DecreaseRecord[] = Object.freeze([]);

/**
 * What a book asks its controller with: one state object, rewritten for each question, and the
 * accepted rate's questions to the pause (the time paused from a time until `at`, in the last
 * pause, or in the few kept too), made once. `reuse`: the controller keeps nothing of a state
 * (`keepsNoState`: the built-ins), so it is asked with the one object itself, not a new one per
 * success; any other controller gets a copy, its own to keep.
 */
class Asking {
  readonly state = blankState();
  at = 0;
  /** The lowest fresh ceiling the API announced (`RateBook.announcedRate`): kept here, as an idle limiter has none. */
  announced: number | undefined;
  /** `RateBook.announcedQuotaRate`, kept here for the same reason. */
  announcedQuota: number | undefined;
  readonly pausedInLast: PausedIn;
  readonly pausedWithEarlier: PausedIn;

  constructor(
    pause: Pause,
    public reuse: boolean,
  ) {
    this.pausedInLast = (from) => pause.within(from, this.at, false);
    this.pausedWithEarlier = (from) => pause.within(from, this.at, true);
  }
}

/** A state for `RateBook.#fill` to write: every field, in the order a controller has always seen them. */
function blankState(): Writable<RateControllerState> {
  return {
    rate: 0,
    minRate: 0,
    maxRate: 0,
    rateBeforeLastDecrease: 0,
    measuredRateAtLastDecrease: undefined,
    sinceLastDecrease: 0,
    pauseSinceLastDecrease: 0,
    sinceLastIncrease: 0,
    waited: false,
    instanceCount: 1,
    measuredRate: undefined,
    measuredRequestRate: undefined,
    acceptedRate: undefined,
    acceptedRateSinceLastDecrease: undefined,
    decreases: NO_CUTS,
    random: 0,
    announcedRate: undefined,
  };
}

/**
 * Requests/min from which a limiter counts as fast: 50 a second, where a probe round of 2 s holds
 * 100 answers and more (see the probe's round). A process at a few requests a second keeps the
 * rules it had.
 */
const MANY_REQUESTS = 3_000;
/** The accepted rate's window (12 slots of 250 ms, accepted-rate.ts): a throttled call's units over it (see `cut`). */
const ACCEPTED_WINDOW_MS = 3_000;

/**
 * The longest time paused since a burst's first cut (ms) over which the cut after it reads the
 * bucket's refill: a Retry-After of a second or two, about the time the bucket takes to refill.
 * After a longer pause (a crowd that others were served before, a window's reset) the refill
 * overflowed the bucket, or others took it: what got through is no reading of it.
 */
const REFILL_PAUSE_MS = 2_000;

/** The shortest span since a rise a cut reads on its own (ms): 250 answers and more at 15,000 a minute. */
const RISE_SPAN_MS = 1_000;

/** Whether `requestsPerMinute` (measured; `undefined` before the first bucket) is many. */
function manyRequests(requestsPerMinute: number | undefined): boolean {
  return requestsPerMinute !== undefined && requestsPerMinute >= MANY_REQUESTS;
}

/** Cuts whose accepted rate the state keeps. */
export const CUTS_KEPT = 8;

/**
 * `rate` within [`minRate`, `maxRate`] (units/min; no maximum when `maxRate` is `undefined` or
 * `Infinity`); a rate that is no number (NaN) is `minRate`. The one clamp of a rate: the
 * limiter's, the budget controller's and the shared stores' (the Lua scripts mirror it).
 */
export function clampRate(rate: number, minRate: number, maxRate: number | undefined): number {
  if (!(rate >= minRate)) return minRate;
  return maxRate !== undefined && rate > maxRate ? maxRate : rate;
}

/**
 * The rate a cut from `base` goes to, before the clamp: the controller's answer (`proposed`)
 * when it is a finite number, never above `base`; else `base` (no cut).
 */
export function cutTarget(proposed: number, base: number): number {
  return Number.isFinite(proposed) ? Math.min(proposed, base) : base;
}

/** A number in [0, 1) from `random`; a source that breaks that contract is clamped into it. */
export function drawFrom(random: () => number): number {
  const value = random();
  return Number.isFinite(value) ? Math.min(Math.max(value, 0), 1 - Number.EPSILON) : 0;
}
