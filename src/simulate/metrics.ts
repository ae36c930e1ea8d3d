import type { RejectionReason } from '../errors.js';
import { boundaries, quotaAt, type SimParams } from './scenarios.js';

/**
 * The columns of RateLimiting.Adaptive's comparison table, with its definitions (docs/simulator.md). Rates are units/min.
 */
export interface Metrics {
  /** Units the API accepted, per minute, over the run. */
  throughput: number;
  /** Throughput divided by the mean quota of the run (0.9 is 90%). */
  share: number;
  /** Throttled (429) answers. */
  throttled: number;
  /** Requests the limiter did not send: its queue was full, or the wait was longer than maxWait. */
  rejected: number;
  /** Requests that got a 429 on each of their attempts. */
  gaveUp: number;
  /** The 95th percentile of the wait for units, seconds (nearest rank, over every acquire). */
  p95WaitSeconds: number;
  /**
   * Seconds after the quota comes back (the end of the first drop) until the units accepted in a
   * second, per minute, reach 90% of the units accepted in the minute before the drop. `null` when the
   * scenario has no drop, or when it did not recover before the end (then `recovered` is false).
   */
  recoverySeconds: number | null;
  /** Whether it recovered; `null` when the scenario has no quota drop. */
  recovered: boolean | null;
  /**
   * Requests whose caller got a 429: every attempt was throttled (gave up), or the limiter refused
   * a retry after a 429 and the attempt loop returned that 429.
   */
  callers429: number;
  /**
   * Jain's fairness index of the units each instance got accepted, (Σx)² / (n Σx²), over the
   * minute before the first instance leaves (the last minute of the run when none leaves):
   * 1 is fair, 1/n is all to one. `null` with one instance.
   */
  fairness: number | null;
  /**
   * Seconds from the start until the units accepted in a second (read per minute) first reach
   * 90 % of the quota; `null` if they never do.
   */
  secondsTo90: number | null;
  /**
   * Seconds from the start to the end of the last second in which the API accepted a unit (the
   * last success of a crowd's work); `null` if none was accepted.
   */
  lastSuccessSeconds: number | null;
}

/** Counts of one mode's run, gathered while it runs. */
export class RunCollector {
  /** Requests that arrived (a request is one call of the attempt loop). */
  requests = 0;
  /** Units of the requests that arrived. */
  demandUnits = 0;
  /** Requests that ended with an accepted answer. */
  succeeded = 0;
  /** Requests that got a 429 on each attempt. */
  gaveUp = 0;
  /** Requests the limiter refused because its queue was full (a first attempt or a retry). */
  rejectedQueueFull = 0;
  /** Requests the limiter refused because the wait was longer than maxWait. */
  rejectedMaxWait = 0;
  /** Of the rejected, those refused on a retry after a 429 (the caller got that 429). */
  retriesRefused = 0;
  /** Refusals for another reason (`closed`, `timeout`): none in a simulation. */
  rejectedOther = 0;
  /** Requests still waiting or in flight when the run ended. */
  get unfinished(): number {
    return (
      this.requests -
      this.succeeded -
      this.gaveUp -
      this.rejectedQueueFull -
      this.rejectedMaxWait -
      this.rejectedOther
    );
  }

  /** Counts a refusal by the limiter; each one ends its request. */
  recordRefusal(reason: RejectionReason): void {
    if (reason === 'queue-full') this.rejectedQueueFull++;
    else if (reason === 'max-wait') this.rejectedMaxWait++;
    else this.rejectedOther++;
  }

  #waits = new Float64Array(1 << 14);
  #waitCount = 0;

  /** Records how long one acquire waited for its units, ms. */
  recordWait(ms: number): void {
    if (this.#waitCount === this.#waits.length) {
      const bigger = new Float64Array(this.#waits.length * 2);
      bigger.set(this.#waits);
      this.#waits = bigger;
    }
    this.#waits[this.#waitCount++] = ms;
  }

  /** The `p` quantile (0..1) of the recorded waits, ms, by nearest rank; 0 when none. */
  waitQuantile(p: number): number {
    if (this.#waitCount === 0) return 0;
    const sorted = this.#waits.slice(0, this.#waitCount).sort();
    const rank = Math.min(this.#waitCount, Math.max(1, Math.ceil(p * this.#waitCount)));
    return sorted[rank - 1]!;
  }
}

/** What the model API counted. */
export interface ApiCounts {
  acceptedUnits: number;
  throttled: number;
  /** Units accepted in each second (index: whole seconds). */
  acceptedBySecond: readonly number[];
}

export function computeMetrics(
  params: SimParams,
  run: RunCollector,
  api: ApiCounts,
  perInstance: readonly (readonly number[])[] = [],
): Metrics {
  const throughput = api.acceptedUnits / params.minutes;
  const recovery = recoveryOf(params, api.acceptedBySecond);
  return {
    callers429: run.gaveUp + run.retriesRefused,
    fairness: fairnessOf(params, perInstance),
    secondsTo90: secondsTo90Of(params, api.acceptedBySecond),
    lastSuccessSeconds: lastSuccessOf(api.acceptedBySecond),
    throughput,
    share: throughput / meanQuota(params),
    throttled: api.throttled,
    rejected: run.rejectedQueueFull + run.rejectedMaxWait,
    gaveUp: run.gaveUp,
    p95WaitSeconds: run.waitQuantile(0.95) / 1000,
    recoverySeconds: recovery.seconds,
    recovered: recovery.recovered,
  };
}

/** The quota averaged over the run, units/min. */
export function meanQuota(params: SimParams): number {
  const end = params.minutes * 60_000;
  const times = [0, ...boundaries(params.quotaEvents, end), end];
  let area = 0;
  for (let i = 0; i + 1 < times.length; i++) {
    const from = times[i]!;
    const to = times[i + 1]!;
    area += quotaAt(params, from) * (to - from);
  }
  return area / end;
}

/** Units accepted in the 60 s before second `s` (seconds [s-60, s)). */
export function unitsInLastMinute(acceptedBySecond: readonly number[], s: number): number {
  let sum = 0;
  for (let i = Math.max(0, s - 60); i < s; i++) sum += acceptedBySecond[i] ?? 0;
  return sum;
}

function recoveryOf(
  params: SimParams,
  acceptedBySecond: readonly number[],
): { seconds: number | null; recovered: boolean | null } {
  const drop = params.quotaEvents.find((e) => e.factor < 1);
  if (drop === undefined) return { seconds: null, recovered: null };
  const endS = Math.floor((params.minutes * 60_000) / 1000);
  const dropS = Math.floor(drop.atMs / 1000);
  const backS = Math.ceil((drop.atMs + drop.durationMs) / 1000);
  // A drop that lasts past the run's end has no recovery to measure.
  if (backS >= endS) return { seconds: null, recovered: null };
  // The minute before the drop; a drop in the first minute compares with what came before it.
  const span = Math.min(60, dropS);
  if (span === 0) return { seconds: null, recovered: null };
  const target = (0.9 * (unitsInLastMinute(acceptedBySecond, dropS) * 60)) / span;
  // Throughput is read per second (units of that second x 60): a 60 s window would need most
  // of a minute to forget the drop whatever the limiter does. A mode already at the target in
  // the last second of the drop recovers in 0 s.
  if ((acceptedBySecond[backS - 1] ?? 0) * 60 >= target - 1e-9) return { seconds: 0, recovered: true };
  for (let s = backS; s < endS; s++) {
    if ((acceptedBySecond[s] ?? 0) * 60 >= target - 1e-9) return { seconds: s - backS + 1, recovered: true };
  }
  return { seconds: null, recovered: false };
}

/** Jain's index over the minute before the first instance leaves (see {@link Metrics.fairness}). */
function fairnessOf(params: SimParams, perInstance: readonly (readonly number[])[]): number | null {
  if (perInstance.length < 2) return null;
  const endS = Math.floor((params.minutes * 60_000) / 1000);
  const leaves = (params.active ?? []).map((a) => Math.floor(a.toMs / 1000)).filter((s) => s < endS);
  const to = Math.min(endS, ...leaves);
  const shares = perInstance.map((seconds) => unitsInLastMinute(seconds, to));
  const sum = shares.reduce((a, b) => a + b, 0);
  const squares = shares.reduce((a, b) => a + b * b, 0);
  return squares === 0 ? null : (sum * sum) / (shares.length * squares);
}

/** The first second whose accepted units (per minute) reach 90 % of the quota then. */
function secondsTo90Of(params: SimParams, acceptedBySecond: readonly number[]): number | null {
  const endS = Math.floor((params.minutes * 60_000) / 1000);
  for (let s = 0; s < endS; s++) {
    if ((acceptedBySecond[s] ?? 0) * 60 >= 0.9 * quotaAt(params, s * 1000) - 1e-9) return s + 1;
  }
  return null;
}

/** The end of the last second with an accepted unit, s; `null` when none was. */
function lastSuccessOf(acceptedBySecond: readonly number[]): number | null {
  for (let s = acceptedBySecond.length - 1; s >= 0; s--) if ((acceptedBySecond[s] ?? 0) > 0) return s + 1;
  return null;
}
