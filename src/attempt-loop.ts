import { isLimiterRefusal } from './errors.js';
import { kRefused, kWaitCancel } from './internal.js';
import {
  noAnswer,
  notSent,
  throttledByQuota,
  throttledWithoutCut,
  usedOrUndefined,
} from './limiter/permit.js';
import type { AcquireOptions, Outcome, Permit, RateLimiter } from './limiter/types.js';
import type { CancellableAcquireOptions, WaitCancel } from './limiter/waiting-line.js';

/**
 * @internal What cancels the waits of a plan instead of its `signal` (an `AdaptiveRateLimiter`'s
 * waits only): see `WaitCancel`. Once `abortReason` is set, an acquire rejects with it at once,
 * as with an aborted signal.
 */
export interface LoopCancel extends WaitCancel {
  readonly abortReason: unknown;
}

/** Attempts in all for a throttled request or call, the first included, unless told otherwise. */
export const DEFAULT_MAX_ATTEMPTS = 4;

/** One transport's way of making and judging an attempt; see {@link runAttempts}. */
export interface AttemptPlan<T> {
  limiter: RateLimiter;
  /** Units charged for each attempt. */
  units: number;
  /** Units drawn from the limiter's other budgets for each attempt (`AcquireOptions.costs`). */
  costs?: Readonly<Record<string, number>> | undefined;
  /** Attempts in all, the first included (>= 1). */
  maxAttempts: number;
  signal?: AbortSignal | undefined;
  /**
   * @internal Cancels the limiter's waits instead of `signal`, which is then not given to the
   * limiter (the interceptor's requests: no `AbortController` per waiting request).
   */
  waitCancel?: LoopCancel | undefined;
  /**
   * @internal Why nothing more is sent now (an adapter closed with its own registry, which tells
   * no wait: the close may come between a grant and the send), or `undefined`.
   */
  closed?: (() => unknown) | undefined;
  /**
   * @internal ms the request waited for attempt 1's units before the loop (an adapter that waited
   * for them itself, then sent `throttledFirst`): it counts against `maxWait` for the retries.
   */
  waitedMs?: number | undefined;
  /**
   * Sends attempt `attempt` (1-based). A rejection is classified by `classifyError`. `started`,
   * when given, frees the attempt's `slot` (once): a send that reads an answer's body before it
   * resolves (an LLM API's 429) calls it when the response starts, as the slot is documented to be
   * freed then; its permit stays open until the result is judged.
   */
  send(attempt: number, started?: () => void): Promise<T>;
  /** How a result feeds the limiter. */
  classify(result: T): Outcome;
  /**
   * The quotas a result announces, for its permit when `classify` threw on it (the call was
   * answered: the API counted it). @default none
   */
  thrownQuota?(result: T): Outcome['quota'];
  /** How a thrown error feeds the limiter. @default failed */
  classifyError?(error: unknown): Outcome;
  /**
   * The quotas a thrown error's answer announces, for its permit when `classifyError` threw on it
   * (an SDK's 4xx: the API counted the call). @default none
   */
  thrownErrorQuota?(error: unknown): Outcome['quota'];
  /**
   * Whether a throttled result may be sent again (its body can be replayed). Asked when the
   * result arrives, and again once its retry has its slot and units: a request body that could
   * no longer be replayed meanwhile (a one-shot body read past its cap) is not sent again, and
   * the caller gets the held result. @default true
   */
  canRetry?(result: T): boolean;
  /**
   * Called once for a throttled result that will be sent again, before the wait for its retry:
   * returns what is held in its place while the retry waits. A transport result holds no
   * connection while it waits: the fetch wrapper reads the body into memory (up to a cap) here,
   * so that the connection is free. @default the result itself
   */
  hold?(result: T): T;
  /**
   * Drops a held result once its retry has its units (drain its body). Until then the
   * result is held: if the limiter refuses the retry, the caller gets it.
   */
  discard?(result: T): void;
  /**
   * Whether a held result can stay held while its retry is sent: it holds no connection (its
   * body has ended, kept in memory). It is then the answer if the retry's transport turns out
   * closed ({@link transportClosed}), and dropped once the retry is answered. @default false
   */
  keepable?(result: T): boolean;
  /**
   * Whether an attempt's error says its transport was closed before the attempt could go (an
   * undici Agent closed or destroyed while the retry waited in the limiter): the retry ends as
   * one the limiter refuses, with the answer held, which is the server's last. Also an attempt
   * whose body failed before any of its bytes went (the HTTP adapters: a one-shot body that passed
   * its replay cap as the retry went out). @default false
   */
  transportClosed?(error: unknown): boolean;
  /**
   * Waited for before every retry goes out, once its units are granted: a grant may resolve in a
   * microtask of the turn in which the answer it replaces ended (granted at once, or by another
   * answer that freed room in that turn), and the transport may not have settled that answer yet.
   * The HTTP adapters wait one turn of the event loop here, as undici gives a keep-alive socket
   * back to its pool only on the next turn: sent at once, the retry found the socket busy and
   * opened a second connection. `held` is the throttled result the retry replaces (`undefined`
   * after a thrown error): the HTTP adapters first read the rest of its body (see
   * `HELD_BODY_DRAIN_MS`), as dropping a body still coming closes its connection. The abort,
   * close and replay checks run after it. @default none
   */
  beforeRetry?(held: T | undefined): Promise<void>;
  /**
   * With a `slot` only: what a retry waits for before it waits for its slot and its units, while
   * the held result's body is still coming (`undefined` when it is not: no wait at all). The HTTP
   * adapters resolve it once the body has ended, or `HELD_BODY_DRAIN_MS` after this call, or when
   * the adapter closes or the caller aborts, and cut nothing: a retry the limiter then refuses
   * gives the caller that body whole, as before; `beforeRetry` cuts one still coming once the
   * retry has its units (at once: its time is counted from this call). Read in `beforeRetry`
   * alone, the body held the slot taken before it (a body that trickles: its 1 s). Read before the
   * slot, the retry joins the slot's line once it is ready to go: the requests that came
   * meanwhile go first, using the slot it could not use, and its units are still taken after its
   * slot, next to its send. `waitedMs`: what the request waited so far; a retry the limiter
   * would refuse at once (a `Retry-After` or a pause past what it leaves of `maxWait`, a queue
   * full, a closed limiter) reads nothing first (`undefined`): it is refused, and its caller given
   * the held result, at once. @default none
   */
  heldBodyRead?(held: T, waitedMs: number): Promise<void> | undefined;
  /** Whether a throttled error may be sent again. @default true */
  canRetryError?(error: unknown): boolean;
  /**
   * Waits for a slot of a concurrency cap before each attempt's units, and resolves with its
   * release, called when the attempt's `send` settles, and the ms it waited. Taking the slot first
   * keeps the units taken close to the send: units taken while waiting for a slot would go out in
   * a burst. `waitedMs`: what the request waited so far; the slot's wait is bounded by what it
   * leaves of `maxWait` (refused with the limiter's `RateLimitRejectedError`), and counts against
   * `maxWait` for the units after it.
   */
  slot?(
    signal: AbortSignal | undefined,
    waitedMs: number,
  ): Promise<{ readonly release: () => void; readonly waitedMs: number }>;
  /**
   * Take each attempt's units before its slot: the slots are shared by limiters that pause and
   * wait apart (`maxConcurrentPer: 'origin'` over partitions), and a request waiting for its
   * partition's units (a `Retry-After` pause, a spent token budget) would hold a slot the other
   * partitions' requests wait for. A slot refused after the units ends the attempt as failed.
   */
  unitsFirst?: boolean;
  /**
   * The result of attempt 1 when the adapter made that attempt itself (a synchronous fast path:
   * units taken with `tryAcquire`), fed its permit, found it throttled and decided, by the rule
   * this loop applies, to send it again. The loop then starts at attempt 2, holding it.
   */
  throttledFirst?: T | undefined;
}

/**
 * The attempt loop every adapter shares: acquire units, send, classify the answer, feed the
 * permit, and send a throttled attempt again through the limiter, up to `maxAttempts` in all.
 * When the attempts run out, or the limiter refuses a retry, the caller gets the last answer
 * itself (the 429 response, or the last error), never a new error of ours. A first attempt the
 * limiter refuses (queue full, max wait, closed), or an abort, rejects with that error. The
 * waits for every attempt's slot and units share one `maxWait`: each wait is told how long the
 * request has waited so far (`waitedMs`).
 */
export function runAttempts<T>(plan: AttemptPlan<T>): Promise<T> {
  if (plan.throttledFirst !== undefined || plan.slot !== undefined) return attempts(plan, undefined);
  // Attempt 1's units are waited for before the loop starts: a long queue of waiting calls holds
  // no suspended async function each (its frame, its await's closures), only the waiter's
  // promise and one reaction.
  let granted: Promise<Permit>;
  try {
    granted = acquire(plan, 0);
  } catch (error) {
    return Promise.reject(error);
  }
  return granted.then((permit) => attempts(plan, permit));
}

/** The loop of {@link runAttempts}, from attempt 1's permit (`first`) when it was granted already. */
async function attempts<T>(plan: AttemptPlan<T>, first: Permit | undefined): Promise<T> {
  let held: { result: T } | undefined =
    plan.throttledFirst === undefined
      ? undefined
      : { result: plan.hold ? plan.hold(plan.throttledFirst) : plan.throttledFirst };
  /** The last attempt threw a throttled error; a refused retry rethrows it. */
  let heldError: { error: unknown } | undefined;
  /** ms this request waited for slots and units so far: one maxWait for the whole request. */
  let waitedMs = first?.waitedMs ?? plan.waitedMs ?? 0;
  let granted = first;
  for (let attempt = held === undefined ? 1 : 2; ; attempt++) {
    let permit: Permit;
    let release: (() => void) | undefined;
    if (granted !== undefined) {
      permit = granted;
      granted = undefined;
    } else {
      try {
        // The rest of the held body is read first, holding no slot (see `heldBodyRead`).
        const reading =
          plan.slot !== undefined && held !== undefined
            ? plan.heldBodyRead?.(held.result, waitedMs)
            : undefined;
        if (reading !== undefined) {
          await reading;
          // Aborted or closed while it read: it ends as a refused or aborted wait does.
          const stopped = stopReason(plan);
          if (stopped !== undefined) throw stopped.reason;
        }
        if (plan.slot !== undefined && plan.unitsFirst !== true) {
          const held = await plan.slot(plan.signal, waitedMs);
          release = held.release;
          waitedMs += held.waitedMs;
        }
        permit = await acquire(plan, waitedMs);
        waitedMs += permit.waitedMs ?? 0;
        if (plan.slot !== undefined && plan.unitsFirst === true) {
          const granted = permit;
          const held = await plan.slot(plan.signal, waitedMs).catch((error: unknown) => {
            notSent(granted); // its units were taken; no request goes out
            throw error;
          });
          release = held.release;
          waitedMs += held.waitedMs;
        }
      } catch (error) {
        release?.();
        // A retry the limiter refuses (queue full, wait past maxWait, closed, a fail-closed
        // shared budget without Redis) ends with the server's last answer, which the caller
        // would otherwise never see.
        if (isLimiterRefusal(error)) {
          if (held !== undefined) return held.result;
          if (heldError !== undefined) throw heldError.error;
        }
        if (held !== undefined) plan.discard?.(held.result);
        throw error;
      }
    }
    // A retry waits for its transport to settle the answer it replaces.
    if (attempt > 1 && plan.beforeRetry !== undefined) {
      await plan.beforeRetry(held?.result);
    }
    // Aborted (or its adapter closed) after its units were granted, before it went: a grant
    // resolves a microtask before the send, and an abort in between must not send it. Nothing
    // went out: no answer is counted, and it ends as an abort of its wait does.
    const stopped = stopReason(plan);
    if (stopped !== undefined) {
      release?.();
      notSent(permit);
      if (isLimiterRefusal(stopped.reason)) {
        if (held !== undefined) return held.result;
        if (heldError !== undefined) throw heldError.error;
      }
      if (held !== undefined) plan.discard?.(held.result);
      throw stopped.reason;
    }
    // The body may have become one that cannot be sent again while the retry waited.
    if (held !== undefined && !(plan.canRetry?.(held.result) ?? true)) {
      release?.();
      notSent(permit);
      return held.result;
    }
    // Kept while the retry goes when it holds nothing (see `keepable`), else dropped now.
    let kept: { result: T } | undefined;
    if (held !== undefined) {
      if (plan.keepable?.(held.result) === true) kept = held;
      else plan.discard?.(held.result);
    }
    held = undefined;
    heldError = undefined;
    let result: T;
    try {
      result = await plan.send(attempt, release);
    } catch (error) {
      release?.();
      if (kept !== undefined) {
        if (plan.transportClosed?.(error) === true) {
          notSent(permit);
          return kept.result;
        }
        plan.discard?.(kept.result);
      }
      let outcome: Outcome;
      try {
        outcome = plan.classifyError ? plan.classifyError(error) : ({ kind: 'failed' } as const);
      } catch (thrown) {
        // The attempt is over: its permit is answered, or the limiter counts it in flight, with
        // the quotas its error's answer announced (see `thrownErrorQuota`).
        permit.failed(undefined, plan.thrownErrorQuota?.(error));
        throw thrown;
      }
      if (judged(permit, outcome, attempt, plan.maxAttempts, () => plan.canRetryError?.(error) ?? true)) {
        heldError = { error };
        continue;
      }
      throw error;
    }
    release?.();
    if (kept !== undefined) plan.discard?.(kept.result);
    let outcome: Outcome;
    try {
      outcome = plan.classify(result);
    } catch (error) {
      // A classify that throws fails the request; the answer came, so its permit is answered
      // (failed, no cut), or the limiter counts it in flight (a cold start's cap stays taken),
      // with the quotas the answer announced (see `thrownQuota`).
      permit.failed(undefined, plan.thrownQuota?.(result));
      throw error;
    }
    if (!judged(permit, outcome, attempt, plan.maxAttempts, () => plan.canRetry?.(result) ?? true))
      return result;
    held = { result: plan.hold ? plan.hold(result) : result };
  }
}

/**
 * Why the plan's waits are cancelled now (its signal aborted, or its `waitCancel` told an abort or
 * a close), as an object, so that any reason (`undefined` too, from a signal of another kind) is
 * told apart from none; `undefined` when they are not.
 */
function stopReason<T>(plan: AttemptPlan<T>): { reason: unknown } | undefined {
  const cancel = plan.waitCancel;
  if (cancel !== undefined && cancel.abortReason !== undefined) return { reason: cancel.abortReason };
  const signal = plan.signal;
  if (signal?.aborted === true) return { reason: signal.reason };
  const closed = plan.closed?.();
  return closed === undefined ? undefined : { reason: closed };
}

/** The limiter's acquire for one attempt, cancelled by the plan's signal or its `waitCancel`. */
function acquire<T>(plan: AttemptPlan<T>, waitedMs: number): Promise<Permit> {
  const cancel = plan.waitCancel;
  if (cancel === undefined) {
    return plan.limiter.acquire(plan.units, { signal: plan.signal, waitedMs, costs: plan.costs });
  }
  // As an aborted signal: rejected at once.
  if (cancel.abortReason !== undefined) return Promise.reject(cancel.abortReason);
  const options: CancellableAcquireOptions = { waitedMs, costs: plan.costs, [kWaitCancel]: cancel };
  return plan.limiter.acquire(plan.units, options as AcquireOptions);
}

/**
 * {@link judge} in the loop: an outcome its permit refuses (a `quota` list with a hole) fails the
 * request, and the permit, still open, is failed: left unanswered, the limiter would count it in
 * flight for good (a cold start's slot taken).
 */
function judged(
  permit: Permit,
  outcome: Outcome,
  attempt: number,
  maxAttempts: number,
  canRetry: () => boolean,
): boolean {
  try {
    return judge(permit, outcome, attempt, maxAttempts, canRetry);
  } catch (error) {
    permit.failed(); // a settled permit ignores it
    throw error;
  }
}

/**
 * The judging step, for the loop and for an adapter's fast path alike: feeds the permit (when the
 * attempt holds one) the answer's outcome, then tells whether the attempt is sent again by the
 * retry rule ({@link retries}). Throws what the limiter's controller or listeners throw.
 */
export function judge(
  permit: Permit | undefined,
  outcome: Outcome,
  attempt: number,
  maxAttempts: number,
  canRetry: () => boolean,
): boolean {
  if (permit !== undefined) feed(permit, outcome);
  return retries(outcome, attempt, maxAttempts, canRetry);
}

/**
 * The retry rule, for the loop and for an adapter's fast path alike: a throttled answer to
 * attempt `attempt` (1-based) is sent again while attempts are left and its body can be sent again
 * (`canRetry`, asked last).
 */
export function retries(
  outcome: Outcome,
  attempt: number,
  maxAttempts: number,
  canRetry: () => boolean,
): boolean {
  return outcome.kind === 'throttled' && attempt < maxAttempts && canRetry();
}

/** Settles a permit with an outcome. */
export function feed(permit: Permit, outcome: Outcome): void {
  if (outcome.kind === 'throttled') {
    if (outcome.pauseOnly === true) throttledWithoutCut(permit, outcome.retryAfterMs, outcome.quota);
    else if (outcome.quotaWait === true)
      throttledByQuota(permit, outcome.retryAfterMs, outcome.quota, outcome.budgets);
    else permit.throttled(outcome.retryAfterMs, outcome.quota, outcome.budgets);
  } else if (outcome.kind === 'failed') {
    if (outcome.notSent === true) notSent(permit);
    else if (outcome.noAnswer === true) noAnswer(permit);
    else permit.failed(outcome.retryAfterMs, outcome.quota);
  } else if (outcome.refused === true && kRefused in permit) {
    (permit as { [kRefused](quota: Outcome['quota']): void })[kRefused](outcome.quota);
  }
  // A count that is not one (only a bug upstream could pass it) counts the permit's units: the
  // server answered, and a throw here would end its request (`permit.success` refuses it).
  else permit.success(usedOrUndefined(outcome.units), outcome.quota);
}
