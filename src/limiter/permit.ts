import { InvalidArgumentError, unknownKeyMessage } from '../errors.js';
import {
  kFailed,
  kNoAnswer,
  kNotSent,
  kPauseOnly,
  kQuiet,
  kQuotaWait,
  kSuccess,
  kThrottled,
} from '../internal.js';
import type { AcquireOptions, AnnouncedQuota, Permit } from './types.js';

type Quota = readonly AnnouncedQuota[] | undefined;

/** @internal What a permit reports to: its limiter. */
export interface PermitSink {
  [kSuccess](permit: LimiterPermit, unitsUsed: number | undefined, quota: Quota): void;
  /**
   * `quotaWait`: `retryAfterMs` is only an exhausted policy's reset (see `throttledByQuota`);
   * `noCut`: a throttle that pauses and cuts nothing (see `throttledWithoutCut`).
   */
  [kThrottled](
    permit: LimiterPermit,
    retryAfterMs: number | undefined,
    quota: Quota,
    quotaWait?: boolean,
    noCut?: boolean,
  ): void;
  /**
   * `counted` false: a quiet end ({@link LimiterPermit[kQuiet]}), no `failed` event; `answered`
   * false: no HTTP answer came ({@link LimiterPermit[kNoAnswer]}, a request not sent), so none
   * left a policy out.
   */
  [kFailed](
    permit: LimiterPermit,
    retryAfterMs: number | undefined,
    quota: Quota,
    counted?: boolean,
    answered?: boolean,
  ): void;
}

/** The permit an `AdaptiveRateLimiter` grants. The first call settles it; later calls do nothing. */
export class LimiterPermit implements Permit {
  #sink: PermitSink | undefined;

  /** @internal */
  constructor(
    sink: PermitSink,
    readonly units: number,
    /** The cut count when it was granted: a throttle cuts only for requests sent after the last cut. */
    readonly epoch: number,
    /** ms it waited in the queue. */
    readonly waitedMs = 0,
    /** When it was granted (clock ms). */
    readonly grantedAt = Number.NEGATIVE_INFINITY,
    /** The units its limiter had granted when it was granted, its own included (grant order). */
    readonly grantSeq = 0,
  ) {
    this.#sink = sink;
  }

  /** @internal Whether no answer settled it yet. */
  get unsettled(): boolean {
    return this.#sink !== undefined;
  }

  success(unitsUsed?: number, quota?: Quota): void {
    checkUnitsUsed(unitsUsed);
    checkQuota('success', quota);
    const sink = this.#sink;
    this.#sink = undefined;
    sink?.[kSuccess](this, unitsUsed, quota);
  }

  throttled(retryAfterMs?: number, quota?: Quota): void {
    checkWait('throttled', retryAfterMs);
    checkQuota('throttled', quota);
    const sink = this.#sink;
    this.#sink = undefined;
    sink?.[kThrottled](this, retryAfterMs, quota);
  }

  /** @internal Settles it as `throttled()` does, its wait an exhausted policy's reset (see `throttledByQuota`). */
  [kQuotaWait](retryAfterMs: number | undefined, quota: Quota): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?.[kThrottled](this, retryAfterMs, quota, true);
  }

  /** @internal Settles it as `throttled()` does, without a cut (see `throttledWithoutCut`). */
  [kPauseOnly](retryAfterMs: number | undefined, quota: Quota): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?.[kThrottled](this, retryAfterMs, quota, false, true);
  }

  failed(retryAfterMs?: number, quota?: Quota): void {
    checkWait('failed', retryAfterMs);
    checkQuota('failed', quota);
    const sink = this.#sink;
    this.#sink = undefined;
    sink?.[kFailed](this, retryAfterMs, quota);
  }

  /**
   * @internal Settles it as `failed` does (its slot is freed, neither cut nor raised, `quota`
   * read), but tells no outcome: no `failed` event, so metrics and listeners count no failed
   * answer. For a budget that did not run out, in a request another budget answered for.
   */
  [kQuiet](quota?: Quota, answered = true): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?.[kFailed](this, undefined, quota, false, answered);
  }

  /** @internal Settles it as `failed()` does, for a request that got no HTTP answer (see `noAnswer`). */
  [kNoAnswer](): void {
    const sink = this.#sink;
    this.#sink = undefined;
    sink?.[kFailed](this, undefined, undefined, true, false);
  }
}

/**
 * The lists of announced quotas the library made and checked where it read them (the HTTP
 * adapters' quota reader, see `quotaReader`; a budget's part of such a list): {@link checkQuota}
 * passes them as they are. Checked again at the permit, each answer's quotas were checked twice
 * (every field of every quota: about 0.1 µs an answer for two quotas). A list you pass is never
 * in it (you may change it between calls): it is checked at every call.
 */
const checkedLists = new WeakSet<readonly unknown[]>();

/**
 * `list`, marked as checked (see {@link checkedLists}): every item passes {@link quotaProblem}.
 * Only for a list the library made and no code of yours can change. @internal
 */
export function checkedQuotas<L extends readonly unknown[]>(list: L): L {
  checkedLists.add(list);
  return list;
}

/** Whether `list` was marked by {@link checkedQuotas}. @internal */
export function quotasChecked(list: readonly unknown[] | undefined): boolean {
  return list !== undefined && checkedLists.has(list);
}

/**
 * Throws when a permit's `quota` argument is given but is not an array of announced quotas (one
 * object passed where the list belongs, or a list with a hole: `[undefined]`, `[null]`), before
 * the permit settles, so a corrected call still settles it. A list the library checked where it
 * read it ({@link checkedQuotas}) is not checked again.
 * @internal
 */
export function checkQuota(method: string, quota: unknown): void {
  if (quota === undefined || checkedLists.has(quota as readonly unknown[])) return;
  if (!Array.isArray(quota))
    throw new InvalidArgumentError(
      method,
      'quota',
      'must be an array of announced quotas, or undefined',
      quota,
    );
  for (let at = 0; at < quota.length; at++) {
    const problem = quotaProblem(quota[at]);
    if (problem !== undefined)
      throw new InvalidArgumentError(
        method,
        `quota[${at}]`,
        `must be an announced quota { policy, remaining, resetMs, limit, windowMs }: ${problem}`,
        quota[at],
      );
  }
}

/** Fields of an announced quota: the least each may be (`> 0` when `positive`). */
const QUOTA_FIELDS = [
  ['remaining', false],
  ['resetMs', false],
  ['limit', true],
  ['windowMs', true],
] as const;

/**
 * What is wrong with one announced quota (not an object; `policy` not a string; `remaining` or
 * `resetMs` not a finite number >= 0; `limit` or `windowMs` not one > 0); `undefined`: nothing.
 * @internal
 */
export function quotaProblem(q: unknown): string | undefined {
  if (typeof q !== 'object' || q === null || Array.isArray(q)) return `${describeValue(q)} is not an object`;
  const quota = q as Record<string, unknown>;
  if (quota.policy !== undefined && typeof quota.policy !== 'string') return 'policy is not a string';
  for (const [field, positive] of QUOTA_FIELDS) {
    const x = quota[field];
    if (x === undefined) continue;
    if (!validQuotaField(x, positive)) {
      return `${field} ${describeValue(x)} is not a finite number ${positive ? '> 0' : '>= 0'}`;
    }
  }
  return undefined;
}

/**
 * `q` (an object) with only its valid fields (see {@link quotaProblem}), or `q` itself when all
 * are: what a server announced, without the numbers no announced quota has. @internal
 */
export function validQuotaFields<Q extends object>(q: Q): Q {
  const quota = q as Record<string, unknown>;
  let out: Record<string, unknown> | undefined;
  if (quota.policy !== undefined && typeof quota.policy !== 'string') out = { ...quota, policy: undefined };
  for (const [field, positive] of QUOTA_FIELDS) {
    const x = quota[field];
    if (x === undefined || validQuotaField(x, positive)) continue;
    out ??= { ...quota };
    out[field] = undefined;
  }
  return (out ?? q) as Q;
}

function validQuotaField(x: unknown, positive: boolean): boolean {
  return typeof x === 'number' && Number.isFinite(x) && x >= 0 && !(positive && x === 0);
}

/** A value as a message shows it: strings and objects as JSON. @internal */
export function describeValue(x: unknown): string {
  if (typeof x === 'string') return JSON.stringify(x);
  if (typeof x === 'object' && x !== null) {
    try {
      return JSON.stringify(x);
    } catch {
      return String(x);
    }
  }
  return String(x);
}

/**
 * Throws when a permit's `unitsUsed` is given but is not a finite number >= 0 (`NaN` from
 * `Number()` of a missing usage field, a negative, a string), before the permit settles: such a
 * count fell back to the permit's units, so its caller's correction was lost and it never knew.
 * The adapters' own paths pass only checked counts (`responseUnits` and `classify` are checked
 * where they answer; {@link usedOrUndefined} in the attempt loop), so a throw here never ends a
 * request the server answered.
 * @internal
 */
export function checkUnitsUsed(unitsUsed: unknown): void {
  if (unitsUsed !== undefined && !isUnitsUsed(unitsUsed))
    throw new InvalidArgumentError(
      'success',
      'unitsUsed',
      'must be a finite number of units >= 0, or undefined (the units granted)',
      unitsUsed,
    );
}

/** Whether `unitsUsed` is a count a success takes: a finite number >= 0. */
function isUnitsUsed(unitsUsed: unknown): unitsUsed is number {
  return typeof unitsUsed === 'number' && unitsUsed >= 0 && Number.isFinite(unitsUsed);
}

/**
 * `unitsUsed` when a success may take it, else `undefined` (the permit's units): for the internal
 * paths, which must not throw after the server answered.
 * @internal
 */
export function usedOrUndefined(unitsUsed: number | undefined): number | undefined {
  return isUnitsUsed(unitsUsed) ? unitsUsed : undefined;
}

/**
 * Throws when a permit's `retryAfterMs` is given but is not a number >= 0 (`NaN` from
 * `Number()` of an HTTP-date `Retry-After`, a negative, a string), before the permit settles: such
 * a wait was ignored, so its caller got no pause and never knew. `Infinity` is taken (capped by
 * `maxPause`, as `pauseFor` takes it).
 * @internal
 */
export function checkWait(method: string, retryAfterMs: unknown): void {
  if (retryAfterMs !== undefined && !(typeof retryAfterMs === 'number' && retryAfterMs >= 0))
    throw new InvalidArgumentError(
      method,
      'retryAfterMs',
      'must be a number of ms >= 0, or undefined (parseRetryAfter reads a Retry-After header)',
      retryAfterMs,
    );
}

/**
 * The refusal of an acquire whose `signal` is not an `AbortSignal` (the controller itself, a
 * string), or `undefined` when it is one or absent (`null` too, as fetch takes it). Checked before
 * anything is queued: such a waiter would sit in the line for good, ahead of every later one.
 * @internal
 */
function badSignal(method: string, options: AcquireOptions | undefined): InvalidArgumentError | undefined {
  const signal: unknown = options?.signal;
  if (signal == null) return undefined;
  if (typeof signal === 'object' && typeof (signal as AbortSignal).addEventListener === 'function')
    return undefined;
  return new InvalidArgumentError(
    method,
    'signal',
    "must be an AbortSignal (an AbortController's .signal)",
    signal,
  );
}

const ACQUIRE_KEYS: readonly string[] = ['signal', 'waitedMs', 'costs'];

/**
 * The refusal of acquire options that are not what {@link AcquireOptions} says, or `undefined`:
 * not an object, an unknown key (`signl`, or `maxWait`, which is the limiter's), a `signal` that
 * is no `AbortSignal` (see {@link badSignal}), a `waitedMs` that is no finite number >= 0. Each
 * would be ignored otherwise: an abort that never ends the wait, a wait longer than asked.
 * @internal
 */
export function badOptions(
  method: string,
  options: AcquireOptions | undefined,
): InvalidArgumentError | undefined {
  if (options === undefined) return undefined;
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    return new InvalidArgumentError(
      method,
      'options',
      'must be an object of { signal, waitedMs, costs }',
      options,
    );
  for (const key in options) {
    if (!ACQUIRE_KEYS.includes(key))
      return new InvalidArgumentError(
        method,
        key,
        unknownKeyMessage(key, ACQUIRE_KEYS),
        options[key as keyof AcquireOptions],
      );
  }
  const waited: unknown = options.waitedMs;
  if (waited !== undefined && !(typeof waited === 'number' && waited >= 0 && Number.isFinite(waited)))
    return new InvalidArgumentError(method, 'waitedMs', 'must be a finite number of ms >= 0', waited);
  return badSignal(method, options);
}

/** `waitedMs` of acquire options when valid (a finite number >= 0), else 0. */
export function waitedBefore(options: AcquireOptions | undefined): number {
  const waited = options?.waitedMs;
  return typeof waited === 'number' && waited >= 0 && Number.isFinite(waited) ? waited : 0;
}

/**
 * The units a success counts: the units the answer reports it used (`unitsUsed`, when a finite
 * number >= 0), else the permit's.
 */
export function unitsCounted(permit: Permit, unitsUsed: number | undefined): number {
  return isUnitsUsed(unitsUsed) ? unitsUsed : permit.units;
}

/**
 * Settles the permit of a request that never reached the API (its connection refused, its slot
 * refused, its retry not sent): as failed, but with no `failed` event (no answer came: metrics
 * and listeners count none), and a permit of several budgets gives back the draws of all but the
 * first (an LLM call's tokens; see `BudgetedPermit`). A permit of your own limiter: `failed()`.
 */
export function notSent(permit: Permit): void {
  if (kNotSent in permit) (permit as { [kNotSent](): void })[kNotSent]();
  else if (kQuiet in permit)
    (permit as { [kQuiet](quota: Quota, answered: boolean): void })[kQuiet](undefined, false);
  else permit.failed();
}

/**
 * Settles the permit of a throttled answer whose only wait is the reset of an exhausted policy it
 * announced (an IETF `RateLimit` with `r=0`, no `Retry-After`), read by the route: as
 * `throttled()`, but the limiter pauses as that policy's learned shape says (a refilling bucket:
 * one unit at most), as for the same reading on a success. A shared budget still shares the wait.
 * A permit of your own limiter: `throttled()`.
 */
export function throttledByQuota(
  permit: Permit,
  retryAfterMs: number | undefined,
  quota: Quota,
  budgets?: readonly string[],
): void {
  if (kQuotaWait in permit)
    (permit as { [kQuotaWait](ms: number | undefined, q: Quota, b?: readonly string[]): void })[kQuotaWait](
      retryAfterMs,
      quota,
      budgets,
    );
  else permit.throttled(retryAfterMs, quota, budgets);
}

/**
 * Settles the permit of a throttled answer that is no budget's throttle and asks for a wait
 * (OpenAI's limit per day): as `throttled()`, counted as a throttle (its event, its metric) and
 * paused for `retryAfterMs`, but no rate is cut, nor the announced quotas' shapes changed beyond
 * what `quota` says. A permit of your own limiter, or of a shared budget: `failed()` with the wait.
 */
export function throttledWithoutCut(permit: Permit, retryAfterMs: number | undefined, quota: Quota): void {
  if (kPauseOnly in permit)
    (permit as { [kPauseOnly](ms: number | undefined, q: Quota): void })[kPauseOnly](retryAfterMs, quota);
  else permit.failed(retryAfterMs, quota);
}

/**
 * Settles the permit of a request that reached (or may have reached) the API but got no HTTP
 * answer (a connection reset, a socket error, a timeout): as `failed()`, with its `failed` event,
 * but the limiter counts no answer that left an announced policy out (a policy past its reset
 * and missing from 4 answers in a row stops capping; a transport error is no answer). A permit of your own limiter:
 * `failed()`.
 */
export function noAnswer(permit: Permit): void {
  if (kNoAnswer in permit) (permit as { [kNoAnswer](): void })[kNoAnswer]();
  else permit.failed();
}
