import type { RateGate } from './bucket.js';
import type { LimitFloors } from './limit-floor.js';
import type { AnnouncedQuota, ReadQuota } from './types.js';

/**
 * A policy left out of this many answers in a row, its reading over (see `Policy.keptUntil`), is
 * forgotten.
 */
const STALE_AFTER_ANSWERS = 4;
/** The least part of a shared quota this process keeps: it must send to measure its part. */
const MIN_PART = 0.05;
/** Units the announced `remaining` must drop by before this process's part is measured again. */
const PART_SAMPLE_UNITS = 20;
/** Two resets this close (ms) are the same window: epoch seconds and `t` are whole seconds. */
const SAME_RESET_MS = 1_500;
/**
 * The least relative change of the ceiling the bucket takes: remaining over the time to reset
 * moves a little with every answer, and each change may re-arm the limiter's timer.
 */
const CEILING_STEP = 0.005;
/**
 * A time to reset this short (ms), or two units' refill if longer, reads as "the next unit" of a
 * refilling bucket (whole seconds, rounded up), not as the end of a window.
 */
const SHORT_RESET_MS = 2_000;
/** A part at least this large is "alone on the quota": a fixed window is spent at its burst. */
const ALONE_PART = 0.95;
/** The calls ended unanswered a fixed window keeps apart (see {@link Ceilings.unanswered}). */
const MAX_RELEASED = 64;

/**
 * What the answers so far say the policy is: `window` (a fixed window: the same reset across
 * answers while `remaining` only falls), `bucket` (a continuously refilling bucket: `remaining`
 * rises with no reset passed, or the time to reset stays about one unit's refill), or not known yet.
 */
type Shape = 'unknown' | 'window' | 'bucket';

/** One announced policy, as last read. Times are ms on the limiter's clock. */
interface Policy {
  /** The ceiling from `remaining` and `resetMs` (units/min), until `resetAt`; `Infinity`: none. */
  byRemaining: number;
  /** The ceiling from `limit` and `windowMs` (units/min); `Infinity`: none. */
  byQuota: number;
  remaining: number | undefined;
  resetAt: number | undefined;
  /**
   * Until when (ms) what the last reading said is kept through answers that do not announce the
   * policy: its reset, or without one the reading's time plus its window (or `maxPause`).
   */
  keptUntil: number;
  /** Answers in a row that did not announce it. */
  missed: number;
  /** The number of the last answer that announced it. */
  seenIn: number;
  /**
   * The grant order (`LimiterPermit.grantSeq`: units granted up to and with it) of the request
   * whose answer was last read.
   */
  granted: number;
  /** This process's part of what drains the quota, in (0, 1]. */
  part: number;
  /**
   * What the answers since the last reading counted other than their calls were granted (a 429's
   * units, which the API did not count, below 0; a call that used more than it was granted,
   * above); the units granted between two readings are added when the second is read.
   */
  own: number;
  /** The drop of `remaining` and this process's units over the readings of the current sample. */
  dropSum: number;
  ownSum: number;
  /** What the answers say the policy is; `asAnnounced` policies stay `unknown` (today's rule). */
  shape: Shape;
  asAnnounced: boolean;
  /**
   * The reset of the first reading in the current run of short ones (see {@link SHORT_RESET_MS});
   * `undefined` when the last reading's reset was not short.
   */
  shortResetAt: number | undefined;
  /** ms one unit takes to refill at `limit` over `windowMs`; `undefined` when not announced. */
  unitMs: number | undefined;
  /** The burst the API documents (units/min; see `ReadQuota.burstPerMinute`); `Infinity`: none. */
  burst: number;
  /**
   * The calls granted after the request last read (grant order above `granted`) that ended with
   * no answer, or whose answer announced other policies and not this one, as flat [grant order,
   * units] pairs: this policy never counted them (see {@link Ceilings.unanswered}); `undefined`
   * when none. Cleared by a newer reading and by the reset.
   */
  released: number[] | undefined;
  /** The reading's time plus `maxPause` (ms): a used-up credit holds no longer, as a pause. */
  holdEnd: number;
  /** The window's whole quota as last announced (units); `undefined` when not announced. */
  limit: number | undefined;
}

/** What an announcement asks of the limiter. */
export interface Announced {
  /** ms to pause: a policy with nothing remaining, until its reset (capped); 0 for none. */
  pauseMs: number;
  /** The unclamped pause, as announced (ms). */
  requestedMs: number;
}

const NOTHING: Announced = { pauseMs: 0, requestedMs: 0 };

/**
 * The ceilings an API announced, per policy, and the lowest fresh one: the rate (units/min) this
 * process may send now. Pure bookkeeping: the limiter passes `now` and applies the result.
 *
 * Per policy the ceiling is the lower of `remaining` over the time to its reset (until that
 * reset passes) and `limit` over `windowMs`, so a pair that overstates the rate (`q=10000;w=1000`
 * with `r=10000;t=10`) is held to the quota. A reset longer than the policy's window is read as
 * the window, and, without a window, as `maxPause`. When `remaining` falls faster than this
 * process gets answers (other clients drain the same quota), the ceiling is scaled to this
 * process's part (measured over drops of at least 20 units in one window and one quota,
 * smoothed by halves, at least 5 %; until measured, 1/`instanceCount`).
 *
 * What a policy's last reading said is kept until its reset (without one, its window after the
 * reading), whatever the answers in between announce: an API that sends its quota headers on
 * some answers only (a proxy's error page, a cached answer, an endpoint that omits them) keeps
 * its window's ceiling and credit. Past that time, it is forgotten once {@link STALE_AFTER_ANSWERS}
 * answers in a row have left it out (the first answer past it, when as many already had).
 * Dropped after 4 answers in a row without it, a window GitHub announced on some answers only
 * was lost with most of an hour to go, and a cold start's burst went again. Forgotten at the
 * first answer past its reset, a refilling bucket (whose reset is its next unit, a second or
 * less away) was lost at a proxy's 502 with no headers, and the calls queued at its rate went at
 * once (an IETF bucket of 60 a minute, 20 queued: 15 got a 429).
 */
export class Ceilings {
  readonly #policies = new Map<string, Policy>();
  /** The lowest fresh ceiling (units/min), `Infinity` when none. */
  #lowest = Number.POSITIVE_INFINITY;
  /** The lowest fresh ceiling leaving out what `remaining` says until its reset: see {@link longRun}. */
  #longRun = Number.POSITIVE_INFINITY;
  /** The earliest reset of a `byRemaining` ceiling: past it, the ceilings are computed again. */
  #expiresAt = Number.POSITIVE_INFINITY;
  /** Answers with an announcement so far. */
  #answers = 0;
  /** Whether a policy has a credit (see `credited`): only then is there one to check. */
  #windows = false;
  /** The limiter's floors under announced limits (see limit-floor.ts), kept here for it. */
  floors: LimitFloors | undefined;
  /**
   * Whether this process's part is measured: not for the announced bucket (`burst: 'announced'`),
   * which follows `remaining` itself, and whose own units (charged at admission, answered seconds
   * later) would read as other clients' drain.
   */
  readonly #measure: boolean;

  constructor(measurePart = true) {
    this.#measure = measurePart;
  }

  /** The lowest fresh ceiling at `now` (units/min), `Infinity` when none. */
  lowest(now: number): number {
    if (now >= this.#expiresAt) this.#recompute(now);
    return this.#lowest;
  }

  /**
   * The lowest ceiling the quotas set over their windows at `now` (units/min), `Infinity` when
   * none: {@link lowest} without the lower "remaining over the time to its reset" of a window
   * that others drained, which holds only until that reset.
   */
  longRun(now: number): number {
    if (now >= this.#expiresAt) this.#recompute(now);
    return this.#longRun;
  }

  /**
   * Gives `bucket` (the token bucket or the pacer) the lowest fresh ceiling at `now` unless it changed by less than 0.5 %; the
   * new ceiling (units/min, `Infinity` for none), or `undefined` when the bucket kept its own.
   */
  applyTo(bucket: RateGate, now: number): number | undefined {
    const lowest = this.lowest(now);
    const current = bucket.ceiling;
    if (lowest === current) return undefined;
    const finite = Number.isFinite(lowest) && Number.isFinite(current);
    if (finite && Math.abs(lowest - current) <= current * CEILING_STEP) return undefined;
    bucket.setCeiling(lowest, now);
    return lowest;
  }

  /** Whether a ceiling expires at or before `now` (cheap: one comparison). */
  expired(now: number): boolean {
    return now >= this.#expiresAt;
  }

  /** Whether any policy is known. */
  get empty(): boolean {
    return this.#policies.size === 0;
  }

  /** `units` granted that the API never counted (a request never sent): not this process's part. */
  uncounted(units: number): void {
    for (const policy of this.#policies.values()) policy.own -= units;
  }

  /**
   * The call at `granted` in grant order, of `units`, ended with no answer (a transport error, a
   * request never sent): it is no longer in flight, and no reading will count it, so a fixed
   * window's credit (see {@link heldUntil}) no longer sets it against `remaining`.
   */
  unanswered(granted: number, units: number): void {
    if (!this.#windows) return;
    for (const policy of this.#policies.values()) release(policy, granted, units);
  }

  /**
   * Whether a fixed window's credit is too little for `units` at `now`, `granted` units having
   * been granted so far: until when a request of `units` is held (the latest reset of the windows
   * whose credit is short), or `-Infinity` when none holds it.
   *
   * A fixed window's credit is what this process may still send in it: the last `remaining` less
   * the units granted after the request whose answer gave that reading, those in flight or
   * answered later without a newer reading (not those that ended with no answer, see
   * {@link unanswered}, nor those answered with no quota headers or with other policies': see
   * {@link answer}). A window does not refill, so at 0 or below no more is granted until a
   * newer reading (each answer read computes it again) or the window's reset (or `maxPause` after
   * the reading, as the pause at 0: a later reading of 0 holds again); when every call
   * granted since the reading ended unanswered, the credit is `remaining` again: no stall. When
   * others share the window, `remaining` falls by their calls too and the credit is an upper
   * bound: holding at 0 is still right. A refilling bucket has no credit; nor has an
   * `asAnnounced` policy. A policy read once (its shape not known yet: a cold start) has one, as
   * a window has, once calls were granted after its reading, unless its reset is short (a
   * bucket's next unit): the calls a cold start sent before the first answer, still in flight,
   * may have taken what it said was left, and one more went past 0 before a second answer told
   * the window. Were it a bucket, the hold lasts only until a call in flight answers (each answer
   * is a newer reading; one with no quota headers releases its unit); with none granted since, a
   * reading of 0 pauses as its own rules say (a Retry-After wins).
   *
   * A request of more units than the credit left waits for them, as one of 1 waits at 0: sent,
   * it took the window below 0. One of more units than the window's whole `limit` could never
   * fit: it waits as one of 1 does (for any credit), and the server decides. Waiting for a full
   * window did not work: an answer counts its own call, so no reading says the whole limit is
   * left, and such a request waited for the reset (an hour on GitHub), past its `maxWait`.
   */
  heldUntil(granted: number, now: number, units = 1): number {
    if (!this.#windows) return Number.NEGATIVE_INFINITY;
    let until = Number.NEGATIVE_INFINITY;
    for (const policy of this.#policies.values()) {
      const { remaining, resetAt } = policy;
      if (!credited(policy) || remaining === undefined || resetAt === undefined) continue;
      if (resetAt <= now) {
        policy.released = undefined;
        continue;
      }
      let sent = granted - policy.granted;
      const released = policy.released;
      if (released !== undefined) for (let i = 1; i < released.length; i += 2) sent -= released[i]!;
      // Read once: held only by calls sent since (a reading of 0 alone pauses, as its Retry-After says).
      if (sent <= 0 && policy.shape !== 'window') continue;
      // No longer than `maxPause` from the reading, as the pause at 0 (a newer reading holds again).
      const end = Math.min(resetAt, policy.holdEnd);
      const credit = remaining - sent;
      const need = policy.limit !== undefined && units > policy.limit ? 1 : units;
      if ((credit <= 0 || credit < need) && end > now && end > until) until = end;
    }
    return until;
  }

  /**
   * An answer arrived at `now` for `ownUnits` units of this process (0 for one the server did not
   * count, a throttled one), announcing `quotas` (`undefined`: none).
   *
   * @param limits `maxPause`: the limiter's cap on a pause (ms), also the longest reset read
   * without a window; `instanceCount`: a new policy's part starts at 1/`instanceCount`, until
   * this process's part is measured.
   * @param granted The request's place in grant order (units granted up to and with it) and
   * `units` it was granted. An API counts a call when it arrives, so the units it
   * counted between two readings are those granted between the two requests, whichever answer
   * came first; and the answer to a request granted before the one last read with more left
   * than that reading (a slow call) is older than it: it moves nothing.
   */
  answer(
    quotas: readonly AnnouncedQuota[] | undefined,
    ownUnits: number,
    now: number,
    limits: { readonly maxPause: number; readonly instanceCount: number },
    granted: number,
    units: number,
  ): Announced {
    const own = ownUnits - units;
    for (const policy of this.#policies.values()) policy.own += own;
    if (this.#policies.size === 0 && (quotas === undefined || quotas.length === 0)) return NOTHING;
    const answer = ++this.#answers;
    let announced = NOTHING;
    for (const quota of quotas ?? []) {
      const name = typeof quota?.policy === 'string' ? quota.policy : 'default';
      // The first announcement of a name in an answer counts.
      if (this.#policies.get(name)?.seenIn === answer) continue;
      const pause = this.#read(name, quota, now, limits, answer, granted);
      if (pause !== undefined && pause.requestedMs > announced.requestedMs) announced = pause;
    }
    for (const [name, policy] of this.#policies) {
      if (policy.seenIn === answer) continue;
      // Its reading is over (see `keptUntil`), and answers keep leaving it out: forgotten.
      if (++policy.missed >= STALE_AFTER_ANSWERS && now >= policy.keptUntil) this.#policies.delete(name);
      // An answer that announces other policies, not this one (GitHub's core beside its search
      // on one origin): its call counted against those, not against this window's credit. An
      // answer that announces none (a proxy's 502, a load balancer's 500 page, a 429 with no
      // quota headers) tells nothing about the window: its unit is released as a call that
      // ended unanswered is (the request may never have reached the API; the next reading
      // counts it if it did). Kept, it held the credit until the reset with no reading to come.
      else if (this.#windows) release(policy, granted, units);
    }
    this.#recompute(now);
    return announced;
  }

  /** Reads one announcement; `undefined` when it carries nothing usable. */
  #read(
    name: string,
    quota: AnnouncedQuota,
    now: number,
    { maxPause, instanceCount }: { readonly maxPause: number; readonly instanceCount: number },
    answer: number,
    granted: number,
  ): Announced | undefined {
    const remaining = amount(quota.remaining);
    const limit = amount(quota.limit);
    const windowMs = amount(quota.windowMs);
    let resetMs = amount(quota.resetMs);
    const byQuota =
      limit !== undefined && limit > 0 && windowMs !== undefined && windowMs > 0
        ? (limit * 60_000) / windowMs
        : Number.POSITIVE_INFINITY;
    if (resetMs !== undefined) resetMs = Math.min(resetMs, windowMs ?? maxPause);
    if (remaining === undefined || resetMs === undefined) {
      if (byQuota === Number.POSITIVE_INFINITY) return undefined;
    }
    const byRemaining =
      remaining !== undefined && remaining > 0 && resetMs !== undefined && resetMs > 0
        ? (remaining * 60_000) / resetMs
        : Number.POSITIVE_INFINITY;
    const resetAt = resetMs === undefined ? undefined : now + resetMs;
    const unitMs = Number.isFinite(byQuota) ? 60_000 / byQuota : undefined;
    // A reset already past (0: a `Date` ahead of the clock that made the reset) is no unit's refill.
    const short =
      resetMs !== undefined && resetMs > 0 && resetMs <= Math.max(SHORT_RESET_MS, 2 * (unitMs ?? 0));
    const read = quota as ReadQuota;
    let policy = this.#policies.get(name);
    if (policy === undefined) {
      const burst = amount(read.burstPerMinute);
      policy = {
        byRemaining,
        byQuota,
        remaining,
        resetAt,
        keptUntil: keptUntil(resetAt, windowMs, now, maxPause),
        missed: 0,
        seenIn: answer,
        granted,
        part: 1 / instanceCount,
        own: 0,
        dropSum: 0,
        ownSum: 0,
        shape: 'unknown',
        asAnnounced: read.asAnnounced === true,
        shortResetAt: short ? resetAt : undefined,
        unitMs,
        burst: burst !== undefined && burst > 0 ? burst : Number.POSITIVE_INFINITY,
        released: undefined,
        holdEnd: now + maxPause,
        limit,
      };
      this.#policies.set(name, policy);
    } else if (granted < policy.granted && !noMoreLeft(remaining, policy.remaining)) {
      // A slow call's answer, granted before the request last read and with more left than its
      // answer said (or no `remaining`): an older reading than the one it would replace.
      policy.missed = 0;
      policy.seenIn = answer;
      return NOTHING;
    } else {
      // What the API counted of this process's calls since the last reading: the units granted
      // between the two requests, less what their answers said it did not count. A request
      // granted before the one last read, answered with no more left, reached the API after it
      // (sent on another connection): read, with no units granted since.
      policy.own = Math.max(0, policy.own + Math.max(0, granted - policy.granted));
      policy.granted = Math.max(policy.granted, granted);
      policy.released = releasedAfter(policy.released, policy.granted);
      if (!policy.asAnnounced) policy.shape = shapeOf(policy, remaining, resetAt, short, now);
      this.#measurePart(policy, remaining, resetAt, byQuota);
      policy.shortResetAt = short ? (policy.shortResetAt ?? resetAt) : undefined;
      policy.unitMs = unitMs;
      policy.byRemaining = byRemaining;
      policy.byQuota = byQuota;
      policy.remaining = remaining;
      policy.resetAt = resetAt;
      policy.holdEnd = now + maxPause;
      policy.limit = limit;
      policy.keptUntil = keptUntil(resetAt, windowMs, now, maxPause);
      policy.missed = 0;
      policy.seenIn = answer;
      policy.own = 0;
    }
    if (remaining === 0 && resetMs !== undefined && resetMs > 0) {
      // A refilling bucket with nothing left has its next unit in one unit's refill at most.
      const ms = policy.shape === 'bucket' && unitMs !== undefined ? Math.min(resetMs, unitMs) : resetMs;
      return { pauseMs: Math.min(ms, maxPause), requestedMs: ms };
    }
    return NOTHING;
  }

  /** Adds the drop since the last reading to the sample when both are in one window. */
  #measurePart(
    policy: Policy,
    remaining: number | undefined,
    resetAt: number | undefined,
    byQuota: number,
  ): void {
    if (!this.#measure) return;
    // A quota the API changed (a lowered limit takes `remaining` down with it) starts a new
    // sample: that drop is the API's, not other clients' calls.
    const sameWindow =
      byQuota === policy.byQuota &&
      remaining !== undefined &&
      policy.remaining !== undefined &&
      remaining <= policy.remaining &&
      resetAt !== undefined &&
      policy.resetAt !== undefined &&
      Math.abs(resetAt - policy.resetAt) <= SAME_RESET_MS;
    if (!sameWindow) {
      policy.dropSum = 0;
      policy.ownSum = 0;
      return;
    }
    policy.dropSum += (policy.remaining as number) - (remaining as number);
    policy.ownSum += policy.own;
    if (policy.dropSum < PART_SAMPLE_UNITS) return;
    const sample = Math.max(MIN_PART, Math.min(1, policy.ownSum / policy.dropSum));
    policy.part = (policy.part + sample) / 2;
    policy.dropSum = 0;
    policy.ownSum = 0;
  }

  #recompute(now: number): void {
    let lowest = Number.POSITIVE_INFINITY;
    let longRun = Number.POSITIVE_INFINITY;
    let expiresAt = Number.POSITIVE_INFINITY;
    let windows = false;
    for (const policy of this.#policies.values()) {
      if (credited(policy)) windows = true;
      // A refilling bucket: its quota over its window (a `remaining` near 0 is the bucket
      // refilling at that rate, not a budget to spread). A fixed window alone on its quota, whose
      // API documents a burst: what remains is spent at up to that burst (below).
      if (policy.shape === 'bucket' && Number.isFinite(policy.byQuota)) {
        const rate = policy.byQuota * policy.part;
        if (rate < lowest) lowest = rate;
        if (rate < longRun) longRun = rate;
        continue;
      }
      const alone = policy.shape === 'window' && policy.part >= ALONE_PART;
      let rate = policy.byQuota;
      if (policy.byRemaining < rate) {
        if (policy.resetAt !== undefined && policy.resetAt <= now)
          policy.byRemaining = Number.POSITIVE_INFINITY;
        else {
          rate = policy.byRemaining;
          if (policy.resetAt !== undefined && policy.resetAt < expiresAt) expiresAt = policy.resetAt;
        }
      }
      rate *= policy.part;
      // Never slower than the window's average: the burst lifts the ceiling, it never lowers it.
      if (alone && Number.isFinite(policy.burst) && policy.burst > rate) rate = policy.burst;
      if (rate < lowest) lowest = rate;
      // Over its window, without what remains until the reset; a quota with no window known has
      // only what remains.
      let overWindow = policy.byQuota * policy.part;
      if (alone && Number.isFinite(policy.burst) && policy.burst > overWindow) overWindow = policy.burst;
      const quotaRate = Number.isFinite(policy.byQuota) ? overWindow : rate;
      if (quotaRate < longRun) longRun = quotaRate;
    }
    this.#lowest = lowest;
    this.#longRun = longRun;
    this.#expiresAt = expiresAt;
    this.#windows = windows;
  }
}

/** What a reading (`remaining`, its reset at `resetAt`, `short`) and the ones before say the policy is. */
function shapeOf(
  last: Policy,
  remaining: number | undefined,
  resetAt: number | undefined,
  short: boolean,
  now: number,
): Shape {
  if (remaining === undefined || resetAt === undefined) return last.shape;
  if (last.remaining === undefined || last.resetAt === undefined) return last.shape;
  // More left with the reset no later: refilled, not a new window (whose reset moves a window on).
  if (remaining > last.remaining && resetAt <= last.resetAt + SAME_RESET_MS) return 'bucket';
  // Resets short answer after answer for longer than the first of them (and 1.5 s of rounding):
  // "the next unit" again and again, where a window's reset would have passed and moved on.
  if (short && last.shortResetAt !== undefined && now >= last.shortResetAt + SAME_RESET_MS) return 'bucket';
  if (!short && remaining <= last.remaining && Math.abs(resetAt - last.resetAt) <= SAME_RESET_MS)
    return 'window';
  return last.shape;
}

/**
 * The call at `granted` in grant order, of `units`, is not counted by `policy` (see
 * `Ceilings.unanswered`): kept apart from its credit when it is a fixed window read before the call.
 */
function release(policy: Policy, granted: number, units: number): void {
  if (!credited(policy) || granted <= policy.granted) return;
  policy.released ??= [];
  const released = policy.released;
  // Bounded: past MAX_RELEASED calls the two oldest are kept as one, at the older place in
  // grant order (a newer reading past that place drops both: the credit is never raised).
  if (released.length >= 2 * MAX_RELEASED) {
    released.splice(0, 4, Math.min(released[0]!, released[2]!), released[1]! + released[3]!);
  }
  released.push(granted, units);
}

/** The pairs of `released` (see `Policy.released`) granted after `granted`; `undefined` for none. */
function releasedAfter(released: number[] | undefined, granted: number): number[] | undefined {
  if (released === undefined) return undefined;
  const kept: number[] = [];
  for (let i = 0; i < released.length; i += 2) {
    if (released[i]! > granted) kept.push(released[i]!, released[i + 1]!);
  }
  return kept.length === 0 ? undefined : kept;
}

/**
 * Whether `policy` has a credit (see `Ceilings.heldUntil`): a fixed window, or a policy not known
 * yet whose last reset was not a bucket's next unit, unless it is `asAnnounced`.
 */
function credited(policy: Policy): boolean {
  if (policy.shape === 'window') return true;
  return policy.shape === 'unknown' && !policy.asAnnounced && policy.shortResetAt === undefined;
}

/**
 * Until when a reading at `now` is kept through answers that do not announce its policy: its
 * reset, else its window after it, else `maxPause` after it (ms).
 */
function keptUntil(
  resetAt: number | undefined,
  windowMs: number | undefined,
  now: number,
  maxPause: number,
): number {
  if (resetAt !== undefined) return resetAt;
  return now + (windowMs !== undefined && windowMs > 0 ? windowMs : maxPause);
}

/** Whether a reading of `remaining` has no more left than `last` did (both known). */
function noMoreLeft(remaining: number | undefined, last: number | undefined): boolean {
  return remaining !== undefined && last !== undefined && remaining <= last;
}

/** A finite number >= 0, or `undefined` (garbage and negative numbers are ignored). */
function amount(value: unknown): number | undefined {
  return typeof value === 'number' && value >= 0 && Number.isFinite(value) ? value : undefined;
}
