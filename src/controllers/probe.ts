import type { DecreaseRecord, RateController, RateControllerState } from './types.js';
import { isPositiveFinite, validateNumbers } from './validate.js';

/** Options of the probe controller. Rates are units/min, times ms. */
export interface ProbeOptions {
  /** Cruise this fraction below the ceiling (0.03: at 97 % of it). In [0, 0.5). @default 0.03 */
  cruiseMargin?: number;
  /** After its own overshoot the rate drains at the ceiling times this, in (0, 1]. @default 0.9 */
  drainFactor?: number;
  /** How long the drain lasts after the cut (ms, >= 0, finite); a Retry-After pause since the cut counts toward it. @default 1_000 */
  drainTime?: number;
  /**
   * The shortest hold at the cruise rate before probing (ms, > 0, finite). The hold is
   * `holdTime × (1 + random)` (random in [0, 1)), doubled for each cut in a row that found
   * the same ceiling (within `stableTolerance`), up to `maxHold`; not doubled at a ceiling below
   * 1 − 3 × `stableTolerance` (70 %) of the highest the kept cuts found past the start (once a
   * ceiling was found twice in a row); 4 times as long at about that highest ceiling (see
   * `PEAK_HOLD_FACTOR`). @default 4_000
   */
  holdTime?: number;
  /**
   * The longest hold below the highest ceiling found (ms, >= holdTime, finite). At about that
   * ceiling, 4 times this (`PEAK_HOLD_FACTOR`, as the hold itself: 120 s by default), and with
   * `instanceCount` n above 2, n/2 times that again. @default 30_000
   */
  maxHold?: number;
  /** Two ceilings within this fraction of each other are "the same" (>= 0, < 1). @default 0.1 */
  stableTolerance?: number;
  /**
   * The first probe step for the WHOLE budget (units/min, > 0, finite); each process adds
   * `probeStep / instanceCount`. The step doubles each round: +1, +2, +4 … steps above the
   * cruise rate, the same for every client, so competing clients converge to fair shares. At
   * 6,000 requests/min and more (measured now, or at a kept cut) the first step is at least 5 % of
   * the ceiling (then proportional to each client's own ceiling); a shared budget's state does not
   * count requests, so it keeps this step at every rate. At about the highest ceiling found the
   * probe creeps half a `cruiseMargin` of it a round for 4 rounds first (see `creepAbove`).
   * @default 60
   */
  probeStep?: number;
  /** Each probe step is this times the one before (> 1, finite). @default 2 */
  probeGrowth?: number;
  /** One round of probing, and of the start-up growth before the first cut (ms, > 0, finite). @default 2_000 */
  round?: number;
  /** Before the first cut the rate is multiplied by this each round while requests wait (> 1, finite). @default 2 */
  startupGrowth?: number;
  /**
   * A throttle while cruising (the quota dropped or a competitor grew) sets the ceiling to the
   * accepted rate, at most this times the last ceiling, in (0, 1]. @default 0.9
   */
  externalFactor?: number;
  /**
   * The rate is app-limited, and never raised, while the measured send rate is below this
   * fraction of it, in (0, 1]. @default 0.8
   */
  appLimitedRatio?: number;
  /**
   * A cut never goes below this times the current rate, in (0, 1]: an accepted rate read over a
   * window that a pause or a quiet spell emptied does not take the rate to the minimum. @default 0.5
   */
  minCutFactor?: number;
}

/** The probe controller's options when none are given (the simulator and the playground show them). */
export const PROBE_DEFAULTS: Readonly<Required<ProbeOptions>> = {
  cruiseMargin: 0.03,
  drainFactor: 0.9,
  drainTime: 1_000,
  holdTime: 4_000,
  maxHold: 30_000,
  stableTolerance: 0.1,
  probeStep: 60,
  probeGrowth: 2,
  round: 2_000,
  startupGrowth: 2,
  externalFactor: 0.9,
  appLimitedRatio: 0.8,
  minCutFactor: 0.5,
};

/** A rate within this fraction above the cruise rate still counts as cruising. */
const CRUISE_SLACK = 1e-3;
/** While the ceiling is only the start's estimate, the first probe step is at least this fraction of it. */
const UNSURE_STEP = 0.1;
/**
 * A ceiling below the highest the kept cuts found by more than this many `stableTolerance`s
 * (70 % of it by default) is a dropped quota's: the hold does not double there.
 */
const LOW_CEILING_TOLERANCES = 3;
/** Probe rounds beyond this add no more (2^40 steps is past any maximum). */
const MAX_ROUNDS = 40;

/**
 * The probe controller: it learns a ceiling from the accepted rate at a throttle (the server's
 * rate for this process while it throttles) and cruises a few percent below it. After its own
 * overshoot it drains briefly below the ceiling, holds at the cruise rate for a randomized while
 * that grows while the ceiling stays the same (longer at the highest ceiling found), then probes
 * above it: there by creeping first, then with steps that double each round. A throttle while cruising means the quota dropped or a competitor grew: a smaller
 * ceiling, a short hold, quick probing again. Before the first cut it doubles each round while
 * requests wait. It never raises the rate while the process sends less than its rate.
 *
 * Where the API announces its quota (`announcedRate`), the probe starts from it instead of
 * probing for it: before the first cut the rate goes to the announced rate at once; after a cut
 * (the announcement overstated what this process gets, or others drain the quota) it learns and
 * probes as without one, never above the announced rate (the limiter sends no faster anyway).
 *
 * Pure and stateless: the ceiling, the phase and the randomness all come from the state (the
 * accepted rates at the last cuts, the time since the last cut, `random`).
 */
export function probe(options: ProbeOptions = {}): RateController {
  return probeController(options);
}

/**
 * At a ceiling within `stableTolerance` of the highest the kept cuts found (or before any was
 * found twice), the hold is this many times `holdTime` (16-32 s by default), and the probe creeps
 * before its steps double ({@link creepAbove}). A probe's 429 pauses the process (every member of
 * a shared budget) for its Retry-After, and on a strict server each pause costs a second of the
 * process's share: two processes probing every 4-8 s at one quota spent 10-14 such seconds a
 * minute. The hold after a ceiling found again still doubles, up to this many times `maxHold`
 * (120 s by default): in the simulator's `leaky-bucket` (seeds 1-18 and 42) two processes drew 68
 * 429s in 15 min where they drew 104 capped at `maxHold`, and took 93.4 % of the quota, not 91.2 %.
 * Below that highest ceiling (a ceiling read low, or a quota that dropped and may come back) the
 * hold is `holdTime`'s, so a quota that comes back is probed for within seconds.
 */
const PEAK_HOLD_FACTOR = 4;

function probeController(options: ProbeOptions): RateController {
  const o = validate(options);
  const same = (a: number, b: number) => Math.abs(a - b) <= o.stableTolerance * b;
  /**
   * The ceiling (units/min) the cuts learned, replayed from the oldest kept: whether the last was
   * our own overshoot, and how many cuts in a row, ending with it, found the same ceiling.
   */
  const learn = (
    cuts: readonly DecreaseRecord[],
  ): {
    E: number;
    own: boolean;
    stable: number;
    unsure: boolean;
    floored: boolean;
    recall: number;
    peak: number;
  } => {
    let E: number | undefined;
    /**
     * While the ceiling is only the start's estimate: the higher estimate an earlier cut of the
     * start made, when the cut after it found less (on windows a pause emptied, or while another
     * process was still unlimited). Otherwise the ceiling itself.
     */
    let recall = 0;
    /** The highest (sure) ceiling the kept cuts found once past the start (see `settled`). */
    let peak = 0;
    let own = true;
    let stable = 0;
    /**
     * The ceiling so far is only an estimate of the start: the very first cut read windows that
     * were not full yet (a slow start, a server's burst, the heartbeats of a shared budget), unless
     * it read them at full speed (see `readAtFullSpeed`).
     */
    let unsure = false;
    /**
     * Past the start: a cut found the same ceiling as the one before it, or the kept cuts begin
     * after the limiter's first. The start's ceilings are not a quota that may come back: each
     * process reads its share while another is paused by a Retry-After or still unlimited, and
     * the next cuts find less. Counted in `peak`, such a ceiling kept the hold from doubling for
     * as long as it was kept, and a process cruising at its real share probed every few seconds.
     */
    let settled = false;
    /** The ceiling is a very first cut's read at full speed (see `readAtFullSpeed`), not yet replaced. */
    let fullSpeed = false;
    let previous: DecreaseRecord | undefined;
    /** The last cut's reading was its floor, at many requests a second (see `fastReading`, `quickAfterPause`). */
    let floored = false;
    /** The cut before was a 429 right after a Retry-After pause (see `quickAfterPause`). */
    let afterQuick = false;
    for (const cut of cuts) {
      const quick = quickAfterPause(cut, previous);
      const read = quick
        ? quickReading(cut, afterQuick ? previous : undefined, o.minCutFactor)
        : fastReading(cut, previous, o.minCutFactor);
      // A cut that read a bucket's refill after a burst of calls (`acceptedRateIsRefill`): that
      // reading when lower than the floors here.
      const A = cut.refill === true ? Math.min(read, cut.acceptedRate) : read;
      afterQuick = quick;
      floored = quick || A > cut.acceptedRate;
      previous = cut;
      if (unsure && E !== undefined) {
        // What got through sets the ceiling. Found higher, after a climb: it is sure. Found lower
        // (the first estimate was high, and this cut came soon after it, on windows a pause
        // emptied): still unsure, the next cut sets it again.
        unsure = A < E;
        own = true;
        // Found the same ceiling as the first estimate: as any second find of it, a longer hold.
        stable = same(A, E) ? stable + 1 : 0;
        // After a bucket's refill read (`acceptedRateIsRefill`), the first estimate (the bucket's burst
        // read over ms) is no ceiling to come back to.
        recall = unsure && cut.refill !== true ? Math.max(recall, E) : A;
        E = A;
        if (stable > 0) settled = true;
        if (!unsure && settled) peak = Math.max(peak, E);
        continue;
      }
      const before = E;
      const first = E === undefined && cut.acceptedRateSincePrevious === undefined;
      const afterFullSpeed = fullSpeed;
      fullSpeed = first && readAtFullSpeed(cut);
      unsure = first && !fullSpeed;
      own = E === undefined || cut.rateBefore > E * (1 - o.cruiseMargin) * (1 + CRUISE_SLACK);
      if (E === undefined) E = A;
      else if (own) {
        // Our probe overshot. Less got through than the ceiling: the quota dropped meanwhile.
        // Else the ceiling rises to what got through over the whole cycle, or by at most the
        // cruise margin to what got through lately: a server's burst, drained by the probe,
        // inflates the last seconds, while over the cycle it counts once.
        // After a first cut read at full speed, found well higher: that first cut read what the
        // process sent (it had less to send then), not the server; what got through is the ceiling.
        const cycle = Math.min(cut.acceptedRateSincePrevious ?? A, A);
        if (afterFullSpeed && A > E && !same(A, E)) E = A;
        else E = A < E ? A : Math.max(cycle, Math.min(A, E * (1 + o.cruiseMargin)));
      } else if (same(A, E)) {
        // Cruising, and the same got through (a competitor's probe, a cruise a bit high): a margin lower.
        // What got through over the whole cycle, sent above the ceiling for a while, is the
        // ceiling without the server's burst (which inflates the last seconds): at most two
        // margins lower.
        const m = o.cruiseMargin;
        const cycle = cut.acceptedRateSincePrevious ?? E * (1 - m);
        E = Math.max(E * (1 - 2 * m), Math.min(E * (1 - m), cycle));
      } else {
        // Cruising, and less got through (the quota dropped, a competitor grew).
        E = Math.min(A, o.externalFactor * E);
      }
      recall = E;
      stable = before !== undefined && same(E, before) ? stable + 1 : 0;
      if (stable > 0 || (before === undefined && cut.acceptedRateSincePrevious !== undefined)) settled = true;
      if (settled) peak = Math.max(peak, E);
    }
    // A ceiling that is the last cut's floor is an estimate, not a reading to climb back from.
    const back = floored ? (E ?? 0) : Math.max(recall, E ?? 0);
    return { E: E ?? 0, own, stable, unsure, floored, recall: back, peak };
  };
  return {
    onThrottled(s: RateControllerState): number {
      const accepted = s.acceptedRate ?? s.rate;
      // A cut that reads a bucket's refill after a burst of calls (`acceptedRateIsRefill`): no floor of
      // half the rate, which held a bucket that refills 1,200/min at 6,000 (its 20 read over
      // 100 ms as 12,000).
      const floor = s.acceptedRateIsRefill === true ? 0 : o.minCutFactor * s.rate;
      // The cut the limiter is about to record; the next state shows it.
      const cut: DecreaseRecord = {
        rateBefore: s.rate,
        acceptedRate: accepted,
        acceptedRateSincePrevious: s.acceptedRateSinceLastDecrease,
        ...cutReadingsOf(s),
      };
      const { E, own } = learn([...s.decreases, cut]);
      // Our own overshoot drains below the ceiling; a throttle while cruising cruises below the new one.
      return Math.min(s.rate, Math.max(floor, E * (own ? o.drainFactor : 1 - o.cruiseMargin)));
    },
    onSuccess(s: RateControllerState): number | undefined {
      if (!s.waited) return undefined;
      const measured = sendRate(s);
      if (measured !== undefined && measured < o.appLimitedRatio * s.rate) return undefined;
      const announced = s.announcedRate;
      let target: number;
      if (s.decreases.length === 0 && announced !== undefined) {
        // The API said its quota: go there at once (fresh, so no doubling, no cap by what is sent).
        target = Math.min(announced, s.maxRate);
        return target > s.rate ? target : undefined;
      }
      if (s.decreases.length === 0) {
        // Start-up: grow each round until the first throttle.
        if (s.sinceLastIncrease < o.round) return undefined;
        target = s.rate * o.startupGrowth;
      } else if (cappedStart(s.decreases)) {
        // The one cut so far read the cold start's cap, not the server: after the drain, the
        // start-up goes on from it, growing each short round until the next throttle.
        const t = Math.max(0, s.sinceLastDecrease - s.pauseSinceLastDecrease);
        if (t < drainLeft(o.drainTime, s.pauseSinceLastDecrease)) return undefined;
        if (s.sinceLastIncrease < Math.min(o.round, CAPPED_ROUND)) return undefined;
        target = s.rate * o.startupGrowth;
      } else {
        const { E, own, stable, unsure, floored, recall, peak } = learn(s.decreases);
        // A ceiling that is only an estimate (the start's, or a cut's floor at many requests a
        // second): no hold, steps of a tenth of it at least, until the next cut reads it again.
        const estimate = unsure || floored;
        const drain = own ? drainLeft(o.drainTime, s.pauseSinceLastDecrease) : 0;
        // Randomized; doubles for each cut in a row at the same ceiling (a new ceiling resets it),
        // but not well below the highest ceiling the kept cuts found past the start (the quota dropped, or a
        // competitor came: it may come back). No hold while the ceiling is only the start's
        // estimate: the next cut sets it. Longer with more than two instances probing on their
        // own (see holdScale).
        const doubled = E < peak * (1 - LOW_CEILING_TOLERANCES * o.stableTolerance) ? 0 : stable;
        const atPeak = E >= peak * (1 - o.stableTolerance);
        const base = o.holdTime * holdScale(s.instanceCount) * (atPeak ? PEAK_HOLD_FACTOR : 1);
        // At about the highest ceiling found, maxHold grows as the hold does (PEAK_HOLD_FACTOR,
        // holdScale). Capped at 30 s there, the hold at 16-32 s could not double: each process
        // probed every 16-30 s however often it had found that ceiling, and on a strict server each
        // probe's 429 costs a pause; 10 processes each held 20-30 s whatever the ceiling's
        // history. Below it (a newcomer took part of the share) the cap stays, so the share is
        // probed for again sooner.
        const cap = o.maxHold * (atPeak ? PEAK_HOLD_FACTOR * holdScale(s.instanceCount) : 1);
        const hold = estimate ? 0 : Math.min(cap, base * (1 + s.random) * 2 ** doubled);
        const t = Math.max(0, s.sinceLastDecrease - s.pauseSinceLastDecrease);
        if (t < drain) return undefined;
        target = E * (1 - o.cruiseMargin);
        if (t >= drain + hold) {
          // Steps of probeStep × probeGrowth^i for the rounds i = 0..k so far: the same for every client.
          const k = Math.min(MAX_ROUNDS, Math.floor((t - drain - hold) / o.round));
          const g = o.probeGrowth;
          // The kept cuts' requests count from the first of the last run at one ceiling on.
          const kept = stable > 0 ? s.decreases.slice(-(stable + 1)) : s.decreases;
          const requests = fastRequestRate(s.measuredRequestRate, kept);
          const base = climbStep(o.probeStep / s.instanceCount, E, requests);
          // While the ceiling is only the start's estimate, steps of a tenth of it at least.
          const step = estimate ? Math.max(base, E * UNSURE_STEP) : base;
          if (!estimate && atPeak) target += creepAbove(E, o.cruiseMargin, k, step, g);
          else target += ((g ** (k + 1) - 1) / (g - 1)) * step;
          target = Math.max(target, climbBack(E, recall, k) * (1 - o.cruiseMargin));
        }
      }
      // Never more than twice what is sent (a stale curve after a quiet spell).
      if (measured !== undefined) target = Math.min(target, 2 * measured);
      // Never probe past what the API announced.
      if (announced !== undefined) target = Math.min(target, announced);
      target = Math.min(target, s.maxRate);
      return target > s.rate ? target : undefined;
    },
  };
}

/**
 * Rounds of the probe at about the highest ceiling found that creep by half a cruise
 * margin each (from the cruise rate to one margin above the ceiling) before its steps double.
 */
const CREEP_ROUNDS = 4;

/**
 * What the probe adds to its cruise rate in round `k` at about the highest ceiling
 * `E` its kept cuts found (units/min): half a cruise margin of `E` a round for
 * {@link CREEP_ROUNDS} rounds (to the ceiling, then a margin above it), then the usual steps
 * doubling from `step`. The probe's 429 pauses the process (every member of a shared budget); a
 * ceiling held 16-32 s is most often the same quota, and a strict server (nginx's limit_req)
 * answers 429 once its small burst is spent: creeping, it sends at about the quota for several
 * rounds before that 429,
 * and the overshoot its cut reads is a margin, not the 6-14 % of doubled steps. A raised quota
 * is still found by the doubling after those rounds.
 */
function creepAbove(E: number, margin: number, k: number, step: number, g: number): number {
  const creep = Math.min(k + 1, CREEP_ROUNDS) * (margin / 2) * E;
  const past = k - CREEP_ROUNDS;
  return past < 0 ? creep : creep + ((g ** (past + 1) - 1) / (g - 1)) * step;
}

/**
 * Requests/min from which the probe's steps scale with the ceiling: 100 a second, twice a whole
 * quota of 3,000 a minute, which the default step was sized for. A slower process keeps its steps.
 * The band of every rule for many requests a second (the rate book's reading since a rise too).
 */
export const FAST_REQUESTS = 6_000;
/**
 * At {@link FAST_REQUESTS} and more, the first probe step is at least this fraction of the
 * ceiling. The default step (60 a minute) is 2 % of a quota of 3,000 a minute; at 150,000 a
 * minute it is 0.04 %, and a cut well below the quota (a 429 from a server that fell behind for
 * a few milliseconds) would hold the process there for the rest of the minute.
 */
const FAST_STEP = 0.05;

/**
 * The first probe step (units/min): `base`, or at many requests a second a fraction of the
 * ceiling `E` when that is more, so the climb takes as many rounds at any rate. Each answer of a
 * probe round at such rates is a fraction of a millisecond: overshooting by a larger step costs
 * about the same 429s, since the first one ends the probe.
 */
function climbStep(base: number, E: number, requestsPerMinute: number | undefined): number {
  return requestsPerMinute !== undefined && requestsPerMinute >= FAST_REQUESTS
    ? Math.max(base, E * FAST_STEP)
    : base;
}

/**
 * Whether a very first cut read the server at full speed: made unlimited (no rate, the cold
 * start's cap not holding the sends back), below {@link FAST_REQUESTS}, both what got through and
 * what was sent (the request rate measured at the cut, 429s included). Its windows were filled
 * by the process's own sends, so what got through is what the server let it have (with other
 * processes on the quota, its share while they sent too; or its whole demand), not a ramp read
 * low: a sure ceiling, held and probed by the probe step. Treated as an estimate, two processes
 * on one strict quota each climbed by tenths of their whole demand with no hold, both above the
 * quota together for the next 10 s. At thousands of requests a second a first cut still reads
 * the first windows of a burst (scale's rules), and a shared budget's reads heartbeats: estimates.
 * So does one that sent far more than it read: two processes each sending 20,000 a minute against
 * 15,000 read 2,255 and 4,930 at a first cut over a second of 429s; held there as sure ceilings and
 * climbed 60 a minute at a time, they stayed at a fifth of their share for 15 s.
 */
function readAtFullSpeed(cut: DecreaseRecord): boolean {
  return (
    cut.unlimited === true &&
    cut.startCapped !== true &&
    cut.acceptedRate < FAST_REQUESTS &&
    (cut.requestRate ?? 0) < FAST_REQUESTS
  );
}

/**
 * What got through at `cut`, as the probe reads it: at {@link FAST_REQUESTS} and more (measured
 * at the cut or at the one before; a Retry-After pause empties the measured rate's buckets), at
 * least `minCutFactor` of the rate the cut started from, the rate the cut goes to at the lowest.
 * A 429 a few ms after a pause ends reads those ms over a slot of 250 ms, a third of the rate:
 * the rate goes to half, and a ceiling of a third would then hold the process near half its
 * share for 10-25 s, its probe steps a fraction of that ceiling. Such a floor is no reading of the
 * server, only an estimate, as the start's is: no hold and steps of a tenth of it until the next
 * cut, which reads the ceiling as any cut does (past the start: at most a margin above the floor,
 * or what got through over the climb from it). Held as sure (4-8 s, then steps of 5 %), a process
 * halved twice stayed at a quarter of its demand for 10-15 s while the other could not send more
 * than its own.
 */
function fastReading(
  cut: DecreaseRecord,
  previous: DecreaseRecord | undefined,
  minCutFactor: number,
): number {
  const requests = Math.max(cut.requestRate ?? 0, previous?.requestRate ?? 0);
  return requests >= FAST_REQUESTS
    ? Math.max(cut.acceptedRate, minCutFactor * cut.rateBefore)
    : cut.acceptedRate;
}

/**
 * What a cut's record reads from its controller's state besides the rates: the requests/min
 * measured (`requestRate`) and the ms sent after a Retry-After pause (`sentAfterPause`). One
 * function for the probe's own view of the cut and the rate book's record, so the two agree.
 */
export function cutReadingsOf(
  s: Pick<
    RateControllerState,
    | 'measuredRequestRate'
    | 'decreases'
    | 'sinceLastDecrease'
    | 'pauseSinceLastDecrease'
    | 'acceptedRateIsRefill'
  >,
): Pick<DecreaseRecord, 'requestRate' | 'sentAfterPause' | 'refill'> {
  return {
    ...requestRateOf(s),
    ...sentAfterPauseOf(s),
    ...(s.acceptedRateIsRefill === true ? { refill: true } : {}),
  };
}

/** The requests/min measured at a cut, for its record (`requestRate`), from its controller's state. */
function requestRateOf(s: Pick<RateControllerState, 'measuredRequestRate'>): { requestRate?: number } {
  return s.measuredRequestRate === undefined ? {} : { requestRate: s.measuredRequestRate };
}

/**
 * A cut this soon after a Retry-After pause since the cut before it ends (ms of sending), at
 * {@link FAST_REQUESTS} and more (measured at the cut or at the one before), takes the rate to
 * `minCutFactor` of the rate it started from, and that is the ceiling. At thousands of requests a
 * second a strict server's burst lasts tens of ms: a 429 that soon after the pause says the others
 * took the room this process left, and the rate is far above what is left for it. Read as usual
 * (a few percent lower, or 0.9 of the ceiling each time), such a process was throttled again
 * right after each of its pauses, four or five times in a row, sending some 50 ms a second.
 */
const QUICK_AFTER_PAUSE = 250;

function quickAfterPause(cut: DecreaseRecord, previous: DecreaseRecord | undefined): boolean {
  const requests = Math.max(cut.requestRate ?? 0, previous?.requestRate ?? 0);
  return (
    requests >= FAST_REQUESTS && cut.sentAfterPause !== undefined && cut.sentAfterPause < QUICK_AFTER_PAUSE
  );
}

/**
 * What a cut {@link quickAfterPause} reads (units/min): `minCutFactor` (half) of the rate it
 * started from; right after another such cut (`quickBefore`), no less than what that one read,
 * half the rate it started from. A process halved because the other, above its share, had taken
 * the room was throttled again right after its next pause while the other still held it, and
 * halved again, two to four times in a row (20,000 to 10,000, 5,000, 2,500 a minute) where its
 * share was 15,000; it then stayed below half its share for 10-25 s. Cut by the drain instead
 * (0.9 of that half, its own overshoot), it gives the other the time to come down. A third such
 * cut in a row halves again, from the second: a quota that fell far is still followed.
 */
function quickReading(
  cut: DecreaseRecord,
  quickBefore: DecreaseRecord | undefined,
  minCutFactor: number,
): number {
  return minCutFactor * Math.max(cut.rateBefore, quickBefore?.rateBefore ?? 0);
}

/**
 * The requests/min that set the probe's step ({@link climbStep}): the rate measured now, or the
 * highest measured at one of the cuts `kept` when more. A process that sent 6,000 a minute and
 * more, then was cut below it (halved after its pause, or squeezed by another process above its
 * share), climbed by the default step, 60 a minute, for the 10-25 s its kept cuts still said it
 * sends thousands a second: about 1 % of 5,000 a round, where the other, above 6,000, stepped 5 %
 * of 20,000. The cuts read are the kept ones (8), but once two cuts in a row found the same
 * ceiling only that run of cuts: a ceiling found again is this process's quota now, and a process
 * whose quota dropped from thousands a second kept the larger step until the cuts from before the
 * drop aged out, 8 cuts, minutes at the doubled holds of a stable ceiling. A budget shared through
 * Redis counts no requests (unchanged).
 */
function fastRequestRate(
  measuredRequestRate: number | undefined,
  kept: readonly DecreaseRecord[],
): number | undefined {
  let rate = measuredRequestRate;
  for (const d of kept) {
    if (d.requestRate !== undefined && d.requestRate > (rate ?? 0)) rate = d.requestRate;
  }
  return rate;
}

/**
 * The ms a process sent between the end of its Retry-After pauses since the cut before and a cut,
 * for its record (`sentAfterPause`); none at the first cut or without a pause since the cut before.
 */
function sentAfterPauseOf(
  s: Pick<RateControllerState, 'decreases' | 'sinceLastDecrease' | 'pauseSinceLastDecrease'>,
): { sentAfterPause?: number } {
  return s.decreases.length > 0 && s.pauseSinceLastDecrease > 0
    ? { sentAfterPause: Math.max(0, s.sinceLastDecrease - s.pauseSinceLastDecrease) }
    : {};
}

/**
 * One round of the start-up the probe goes on with after a first cut the cold start's cap held
 * back (ms): a few round trips of a slow API. Each is at most twice the measured send rate, whose
 * half-second buckets make it about twice a second.
 */
const CAPPED_ROUND = 500;

/**
 * Whether the only cut so far was the first, and its estimate only a floor (`startCapped`): made
 * while the cold start's cap on requests in flight held the sends back (at thousands a second a
 * round of the cold start passes a strict server's burst before the cap lets the rate show, and
 * what got through is the cap's rate: a fiftieth of the share at 300,000 a minute), or after a
 * handful of answers in the first second (a tenth of the share at 30,000 a minute).
 */
function cappedStart(decreases: readonly DecreaseRecord[]): boolean {
  return decreases.length === 1 && decreases[0]!.startCapped === true;
}

/**
 * The ceiling to cruise below in probe round `k` (0, 1, ...) when the start made a higher
 * estimate, `recall`, than the ceiling: half the way back to it in the first round, all of it from
 * the second. The probe's steps climb a few percent a round; a first estimate that the next cut
 * read low (its windows emptied by a pause, or another process still unlimited) is found again in
 * two rounds instead. Not after a throttle while cruising: a ceiling a competitor took is its
 * share now, and climbing back to it would take it back from the competitor.
 */
function climbBack(E: number, recall: number, k: number): number {
  return recall <= E ? E : E + ((recall - E) * Math.min(2, k + 1)) / 2;
}

/** How long after a Retry-After pause the measured send rate still holds the pause (ms): two of its half-second buckets. */
const PAUSE_IN_MEASURE_MS = 1_000;

/**
 * The measured send rate the probe reads. In the first second after a Retry-After pause since
 * the cut, the measured rate spreads the last answers before the pause over it, and reads a
 * sender that waited for the server as one with little to send: there, the higher of it and the
 * rate measured at the cut.
 */
function sendRate(s: RateControllerState): number | undefined {
  const measured = s.measuredRate;
  const sincePause = s.sinceLastDecrease - s.pauseSinceLastDecrease;
  if (measured === undefined || !(s.pauseSinceLastDecrease > 0 && sincePause < PAUSE_IN_MEASURE_MS))
    return measured;
  return Math.max(measured, s.measuredRateAtLastDecrease ?? measured);
}

/**
 * The drain (ms, not counting pauses) still due after a cut of `drainTime`: a Retry-After pause
 * since the cut sent nothing, so it drained the server's excess as the drain would have (a leaky
 * bucket empties while nobody sends): the pause counts toward it.
 */
function drainLeft(drainTime: number, pausedSinceCut: number): number {
  return Math.max(0, drainTime - pausedSinceCut);
}

/**
 * How many times `holdTime` a hold lasts with `instanceCount` processes probing one quota each on
 * its own: n/2 above two. n such processes probe n times as often as one, and a probe's 429s land
 * mostly on the others (each of which cuts); holding n/2 times longer, the processes together probe
 * as often as two do. One or two instances: 1. At about the highest ceiling found `maxHold` is
 * scaled too: capped at `maxHold` alone, n processes holding `holdTime` × n/2 × (1 + random) reach
 * the cap at once and probe together n/2 times as often as two.
 */
function holdScale(instanceCount: number): number {
  return Math.max(1, instanceCount / 2);
}

const fraction = (v: number) => v > 0 && v <= 1;
const growth = (v: number) => Number.isFinite(v) && v > 1;

function validate(options: ProbeOptions): Required<ProbeOptions> {
  return validateNumbers(
    'probe',
    options,
    PROBE_DEFAULTS,
    {
      cruiseMargin: ['must be a number >= 0 and < 0.5', (v) => v >= 0 && v < 0.5],
      drainFactor: ['must be a number > 0 and <= 1', fraction],
      drainTime: ['must be a finite number of ms >= 0', (v) => Number.isFinite(v) && v >= 0],
      holdTime: ['must be a finite number of ms > 0', isPositiveFinite],
      maxHold: ['must be a finite number of ms > 0', isPositiveFinite],
      stableTolerance: ['must be a number >= 0 and < 1', (v) => v >= 0 && v < 1],
      probeStep: ['must be a finite number of units/min > 0', isPositiveFinite],
      probeGrowth: ['must be a finite number > 1', growth],
      round: ['must be a finite number of ms > 0', isPositiveFinite],
      startupGrowth: ['must be a finite number > 1', growth],
      externalFactor: ['must be a number > 0 and <= 1', fraction],
      appLimitedRatio: ['must be a number > 0 and <= 1', fraction],
      minCutFactor: ['must be a number > 0 and <= 1', fraction],
    },
    () => {
      const issue = probeHoldIssue(options);
      return issue === undefined
        ? []
        : [{ path: `probe.${issue.key}`, message: issue.message, received: issue.received }];
    },
  );
}

/**
 * The probe's cross-field rule, `maxHold` >= `holdTime` (each left out at its default): the issue
 * of `options` (a block as the controller will get it, `given` merged over an earlier one) that
 * break it, at the field `given` sets (`maxHold`, else `holdTime`), or `undefined`. The factory
 * checks it, and so do a limiter's options and `parseConfig` on every `probe` given (a budget's
 * too), whatever the controller, so that a config that passes there does not fail when its
 * limiters are made or their controller is changed.
 */
export function probeHoldIssue(
  options: Pick<ProbeOptions, 'holdTime' | 'maxHold'>,
  given: Pick<ProbeOptions, 'holdTime' | 'maxHold'> = options,
): { key: 'holdTime' | 'maxHold'; message: string; received: number | undefined } | undefined {
  const holdTime = options.holdTime ?? PROBE_DEFAULTS.holdTime;
  const maxHold = options.maxHold ?? PROBE_DEFAULTS.maxHold;
  if (!(maxHold < holdTime)) return undefined;
  if (given.maxHold !== undefined) {
    return { key: 'maxHold', message: `must be >= holdTime (${holdTime})`, received: given.maxHold };
  }
  const which = options.maxHold === undefined ? ', its default' : '';
  return { key: 'holdTime', message: `must be <= maxHold (${maxHold}${which})`, received: given.holdTime };
}
