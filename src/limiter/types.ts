import type { Clock } from '../clock.js';
import type { RateLimitRejectedError } from '../errors.js';

/**
 * One quota an answer announced (the IETF `RateLimit` fields, a vendor's `x-ratelimit-*`, your
 * `quotaFromHeaders`), in the limiter's units, for this process's whole budget. It gives the
 * limiter a ceiling: the lower of `remaining` over `resetMs` and `limit` over `windowMs`, in
 * units/min, scaled to this process's part when other clients drain the same quota. With
 * `remaining: 0` the limiter pauses for `resetMs` (capped by `maxPause`), unless the answer
 * carried a `Retry-After`, which wins. Give at least `remaining` and `resetMs`, or `limit` and
 * `windowMs`; a field that is not a finite number >= 0 is ignored.
 */
export interface AnnouncedQuota {
  /** Names the policy: the next announcement of the same name replaces this one. @default 'default' */
  readonly policy?: string | undefined;
  /**
   * The budget of the limiter it describes, in that budget's units (`'requests'`, `'tokens'`; see
   * `AdaptiveLimiterOptions.budgets`). A limiter without a budget of that name ignores it.
   * @default the limiter's first budget
   */
  readonly budget?: string | undefined;
  /** Units left now (>= 0). */
  readonly remaining?: number | undefined;
  /** ms from the answer until `remaining` is restored (the window's reset; >= 0). */
  readonly resetMs?: number | undefined;
  /** Units allowed per window (> 0). */
  readonly limit?: number | undefined;
  /** The window `limit` is counted over (ms, > 0). */
  readonly windowMs?: number | undefined;
}

/**
 * The feedback channel of one granted request. The first call settles it; later calls do nothing.
 * Each call takes, last, the quotas the answer announced (`quota`): adapters that read response
 * headers pass them (see the README, "Quota headers"); a custom adapter or a `wrap` classifier
 * may pass its own. A limiter that does not adapt ignores them. A `quota` that is not an array
 * of objects (one quota object where the list belongs, a hole: `[undefined]`), a `retryAfterMs` that is not a number >= 0 (`NaN`
 * from `Number()` of an HTTP-date: read it with `parseRetryAfter`), or a `unitsUsed` that is not a
 * finite number >= 0 (`NaN` from `Number()` of a missing usage field), throws
 * `InvalidArgumentError` naming the argument and the value, and leaves the permit open, so a
 * corrected call still settles it. The adapters' own calls never throw here: they pass only
 * checked values, after the server answered.
 */
export interface Permit {
  /** The units this permit was granted. */
  readonly units: number;
  /**
   * How long its request waited in the limiter for it (ms, 0 when granted at once); absent when
   * the limiter does not tell. The attempt loop sums it across attempts (`AcquireOptions.waitedMs`).
   */
  readonly waitedMs?: number;
  /**
   * The request succeeded; `unitsUsed` (a finite number >= 0) corrects its cost when the answer
   * reports it, else the units granted count.
   */
  success(unitsUsed?: number, quota?: readonly AnnouncedQuota[]): void;
  /**
   * The request was throttled; `retryAfterMs` pauses the limiter (capped by `maxPause`). `budgets`
   * names the budgets that ran out, when the answer tells (a limiter of several budgets cuts only
   * those; see `AdaptiveLimiterOptions.budgets`).
   */
  throttled(retryAfterMs?: number, quota?: readonly AnnouncedQuota[], budgets?: readonly string[]): void;
  /**
   * The request failed without an answer about the rate (transport error, 5xx): neither raises nor
   * cuts. `retryAfterMs` (a 503 with `Retry-After` when 503 is not a throttle status) pauses the
   * limiter (capped by `maxPause`) without cutting. Without `quota` it counts as an answer that
   * announced none (a policy past its reset and missing from 4 answers in a row stops capping); the HTTP adapters
   * count no answer for a transport error.
   */
  failed(retryAfterMs?: number, quota?: readonly AnnouncedQuota[]): void;
}

export interface AcquireOptions {
  /**
   * Aborting removes the waiter from the queue, returns its units and rejects with the signal's
   * reason. Anything but an `AbortSignal` (or `null`) is refused with `InvalidArgumentError`.
   */
  signal?: AbortSignal | undefined;
  /**
   * How long this request already waited for earlier attempts (ms, >= 0): it counts against
   * `maxWait` (`timeoutDuration`), so that a request retried after a 429 never waits `maxWait`
   * once per attempt. @default 0
   */
  waitedMs?: number | undefined;
  /**
   * Units drawn from the limiter's other budgets, by name (see `AdaptiveLimiterOptions.budgets`);
   * `units` is what the first budget draws, and a budget left out draws nothing. A limiter
   * without budgets ignores it. @default {}
   */
  costs?: Readonly<Record<string, number>> | undefined;
}

/**
 * How a call's outcome feeds the limiter. `quota`: what the answer announced about the quota,
 * passed to the permit (see {@link AnnouncedQuota}).
 */
export type Outcome =
  | {
      kind: 'success';
      units?: number;
      quota?: readonly AnnouncedQuota[];
      /**
       * @internal The API refused the request without doing it (an LLM API's 4xx other than a
       * throttle): a permit of several budgets gives back the other budgets' draws.
       */
      refused?: true;
    }
  | {
      kind: 'throttled';
      retryAfterMs?: number;
      quota?: readonly AnnouncedQuota[];
      /** The budgets that ran out, when the answer says (its headers, its error body). */
      budgets?: readonly string[];
      /**
       * @internal `retryAfterMs` is only the reset of an exhausted policy in `quota` (an IETF
       * `RateLimit` with `r=0`, no `Retry-After`): the limiter pauses as the policy's learned
       * shape says (see `throttledByQuota`).
       */
      quotaWait?: true;
      /**
       * @internal The answer asks for `retryAfterMs` and is no budget's throttle (OpenAI's limit
       * per day): the budgets the call drew from count a throttle and pause for it, without a cut
       * (`throttledWithoutCut`), and the request is sent again as a throttled one is (see
       * `rateLimitOutcome`).
       */
      pauseOnly?: true;
    }
  | {
      kind: 'failed';
      retryAfterMs?: number;
      quota?: readonly AnnouncedQuota[];
      /**
       * @internal The request never reached the API (its connection refused): a permit of several
       * budgets gives back the other budgets' draws.
       */
      notSent?: true;
      /**
       * @internal No HTTP answer came (a connection reset, a socket error): no answer left an
       * announced policy out (see `noAnswer`).
       */
      noAnswer?: true;
    };

/**
 * @internal What bounds a wait an adapter makes for a limiter outside the limiter's own line (a
 * `maxConcurrent` slot), so that no request waits longer than the limiter's `maxWait`
 * (`timeoutDuration`) in all: asked under `kWaitBound`. A limiter without it bounds no such wait.
 * A limiter that cannot tell it yet (a shared budget whose code still loads) answers a promise of
 * it (never rejected: `undefined` when it will have none); the wait starts once it is known.
 */
export interface WaitBound {
  /** The limiter's clock: the wait's deadline is on it. */
  readonly clock: Clock;
  /** The longest wait of a request (ms), earlier attempts' waits included. */
  readonly maxWait: number;
  /**
   * The error that refuses `units` whose wait for `what` reached what `waitedMs` (the earlier
   * waits) left of `maxWait`: the rate wait's own (its reason and code); tells the listeners.
   */
  refuse(units: number, what: string, waitedMs: number): RateLimitRejectedError;
  /**
   * Counts a request that waits outside the line (for a slot) among the limiter's waiting
   * requests, which its `queueLimit` bounds: returns the function that stops counting it (call it
   * when it stops waiting), or, when the requests already waiting (in the line and outside it)
   * reach `queueLimit`, the limiter's own refusal (`queue-full`; tells the listeners) and counts
   * nothing. Absent: a limiter with no such limit.
   */
  wait?(units: number): (() => void) | RateLimitRejectedError;
  /**
   * The limiter's refusal of `units` once it is closed (reason `closed`, as its line's; tells the
   * listeners), or `undefined` while it is open. Absent: a limiter that does not say.
   */
  closed?(units: number): RateLimitRejectedError | undefined;
  /**
   * Calls `listener` when the limiter closes (a function given again is kept once; none once it
   * is closed): a wait outside the line is then refused with {@link closed}.
   */
  onClose?(listener: () => void): void;
  /**
   * Whether an acquire of `units` now, after `waitedMs` of earlier waits, would be refused at
   * once (closed, its line full, a predicted wait past what is left of `maxWait`), telling
   * nobody: a retry that will be refused reads no held body first (see `AttemptPlan.heldBodyRead`).
   * Absent: a limiter that does not say (taken as `false`).
   */
  refusesNow?(units: number, waitedMs: number): boolean;
}

/** The interface both limiter kinds share. */
export interface RateLimiter {
  readonly name: string;
  /** Waits for `units` (default 1), FIFO; rejects with `RateLimitRejectedError` or the abort reason. */
  acquire(units?: number, options?: AcquireOptions): Promise<Permit>;
  /** Takes `units` now if they are free and nobody waits, else returns `undefined`. `costs`: as `AcquireOptions.costs`. */
  tryAcquire(units?: number, costs?: Readonly<Record<string, number>>): Permit | undefined;
}

/** What `AdaptiveRateLimiter.snapshot()` reports. Rates in units/min, times on the limiter's clock (ms). */
export interface LimiterSnapshot {
  /** The limiter's name, its secrets masked (`redactText`) as in its events and errors. */
  name: string;
  /** Current rate of this process; `Infinity` before the first throttle when no initial rate is set. */
  rate: number;
  /**
   * The lowest fresh ceiling the API announced for this process (units/min; see
   * {@link AnnouncedQuota}), or `undefined` when none is fresh. The limiter never sends faster.
   */
  announcedRate: number | undefined;
  minRate: number;
  maxRate: number;
  measuredRate: number | undefined;
  /**
   * Units/min of successful responses over the last 3 s, less the time a Retry-After pause took of
   * them; `undefined` before the first success.
   */
  acceptedRate: number | undefined;
  /** Units in the bucket now (negative: owed by a request larger than the burst). */
  tokens: number;
  /** Burst capacity in units: one second of the rate, at least one unit. */
  capacity: number;
  queued: number;
  queuedUnits: number;
  /** The cold start's cap on units in flight; `undefined` once dropped (or with a rate). */
  inFlightCap: number | undefined;
  /** End of the current Retry-After pause, or `undefined` when not paused. */
  pausedUntil: number | undefined;
  /**
   * Until when nothing is granted because a fixed window's calls in flight took what its last
   * `remaining` left, or left less than the waiting request's units (its reset, or `maxPause`
   * after that reading; a newer answer may end it sooner); absent when no window holds grants.
   */
  heldUntil?: number;
  waited: boolean;
  instanceCount: number;
  throttles: number;
  cuts: number;
  closed: boolean;
  /** This budget's name, when the limiter has several (see `AdaptiveLimiterOptions.budgets`). */
  budget?: string;
  /**
   * Every budget's snapshot by name, the first one's being these fields, when the limiter has
   * several; another budget's `queued` and `queuedUnits` are the waiters that draw from it and
   * the units they draw.
   */
  budgets?: Readonly<Record<string, LimiterSnapshot>>;
}

/**
 * An announced quota as a header reader gives it: what the reader knows of the API beyond the
 * fields (see `Ceilings` in ceiling.ts).
 */
export interface ReadQuota extends AnnouncedQuota {
  /**
   * The most the API documents a client may send in a minute within its window (GitHub's
   * secondary limit for REST: 900): a fixed window with budget left is spent at up to this rate.
   */
  readonly burstPerMinute?: number | undefined;
  /** The reader already gives the ceiling the API means (a refilling LLM budget): not told apart. */
  readonly asAnnounced?: true | undefined;
  /**
   * The API sent `remaining` but no limit (Azure OpenAI): `limit` is that `remaining`, a lower
   * bound, and the limiter reads the highest of the policy so far as its limit (see limit-floor.ts).
   */
  readonly limitIsLowerBound?: true | undefined;
}
