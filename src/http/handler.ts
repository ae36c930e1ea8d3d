import type { Dispatcher } from 'undici';
import { type AttemptPlan, type LoopCancel, runAttempts } from '../attempt-loop.js';
import { headerRecord } from '../headers.js';
import { kWaitCancel } from '../internal.js';
import { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { Costs } from '../limiter/budgets.js';
import type { AcquireOptions, Outcome, Permit, RateLimiter } from '../limiter/types.js';
import {
  type CancellableAcquireOptions,
  type CancellableLine,
  QUEUED,
  type WaitCancel,
} from '../limiter/waiting-line.js';
import { Attempt, type AttemptJudge, type AttemptOwner } from './attempt.js';
import { CallerController } from './caller-controller.js';
import { FastPathJudge, type FastPathRequest } from './fast-path.js';
import { refusalJson } from './llm.js';
import { usageTap } from './llm-tap.js';
import type { OutgoingRequest } from './options.js';
import { withLazyBody } from './outgoing-body.js';
import { answerRefusal } from './refusal.js';
import { type AttemptBodies, attemptBodies } from './request-body.js';
import type { HttpRuntime, Route } from './runtime.js';

/**
 * One request through the interceptor, in three roles, each its own object:
 *
 * - the caller's controller ({@link CallerController}), handed over at once through
 *   `onRequestStart`, before any wait, and the same across every attempt (the attempts' own
 *   `onRequestStart` calls are not passed on);
 * - the owner of the attempts (this class): it sends attempt 1 at once when its units and a slot
 *   are free (the fast path), else waits for them in an adaptive limiter's line as itself (see
 *   `#waitFirst`) and sends attempt 1 as on the fast path once they are granted; behind a gate,
 *   or for another limiter, and for every retry, it runs the attempt loop (`runAttempts`), being
 *   its plan itself (no closure per waiting request), and gives the caller the answer the loop
 *   returns;
 * - the judges of the attempts: {@link FastPathJudge} for attempt 1 outside the loop, which
 *   judges its response synchronously and passes it straight through unless it is throttled and
 *   will be sent again (then the loop takes it over, holding the 429 until its retry has units),
 *   and the loop's own judge (see `#send`), which hands every response to the loop.
 *
 * Both judge an answer by one step (`judge` in src/attempt-loop.ts: feed the permit, then the retry rule).
 */
export class RateLimitedDispatch implements AttemptOwner, FastPathRequest, AttemptPlan<Attempt>, WaitCancel {
  /** The caller's handler (for an LLM API's limiter, behind a tap that reads the answer's `usage`). */
  handler: Dispatcher.DispatchHandler;
  readonly controller = new CallerController();
  readonly #dispatch: Dispatcher.Dispatch;
  readonly #opts: Dispatcher.DispatchOptions;
  readonly runtime: HttpRuntime;
  /** The origin's route, then (in `start`) the route of the request's partition, if it has one. */
  route: Route;
  /** The request as the callbacks see it, made once, on first need. */
  #outgoing: OutgoingRequest | undefined;
  readonly #origin: string;
  #units = 1;
  /** Units drawn from the limiter's other budgets (an LLM API's tokens). */
  #costs: Costs | undefined;
  #bodies: AttemptBodies | undefined;
  /** Ends the hold on a per-origin limiter (see `HttpRuntime.hold`): once the last answer is judged. */
  #release: (() => void) | undefined;
  #done = false;
  /** The plan's throttled attempt 1 (see `AttemptPlan.throttledFirst`), only while the loop starts. */
  throttledFirst: Attempt | undefined;
  /** ms attempt 1 waited for its units in the limiter's line (`AttemptPlan.waitedMs`). */
  waitedMs = 0;

  constructor(
    dispatch: Dispatcher.Dispatch,
    opts: Dispatcher.DispatchOptions,
    handler: Dispatcher.DispatchHandler,
    runtime: HttpRuntime,
    origin: string,
    route: Route,
  ) {
    this.#origin = origin;
    this.#dispatch = dispatch;
    this.#opts = opts;
    this.handler = handler;
    this.runtime = runtime;
    this.route = route;
  }

  // ---- AttemptOwner -------------------------------------------------------------------------

  get callerPaused(): boolean {
    return this.controller.paused;
  }

  bind(attempt: Attempt): void {
    const reason = this.controller.abortReason;
    if (reason !== undefined) attempt.controller?.abort(reason);
  }

  finished(): void {
    this.#done = true;
    this.judged();
    this.#bodies?.close();
  }

  // ---- the request --------------------------------------------------------------------------

  /** Hands the caller its controller, then sends at once or waits, and retries; never throws. */
  start(): void {
    try {
      this.handler.onRequestStart?.(this.controller, undefined);
      // Aborted already (fetch aborts inside onRequestStart when its signal was): nothing taken.
      if (this.controller.abortReason !== undefined) throw this.controller.abortReason;
      if (this.route.partitioner !== undefined) {
        this.route = this.runtime.partitionRoute(this.#origin, this.route, {
          headers: this.#opts.headers,
          request: () => this.#request(),
        });
      }
      this.#units = this.#requestUnits();
      if (this.route.llm !== undefined) this.#meterLlm();
      this.#release = this.runtime.hold(this.route);
      this.#bodies = attemptBodies(this.#opts.body, this.runtime.options.maxReplayBodyBytes);
      if (!this.#sendFirst()) this.#loop(undefined);
    } catch (error) {
      this.fail(error);
    }
  }

  /** An LLM API's estimate from the body (when it is in memory), and the tap that corrects it from `usage`. */
  #meterLlm(): void {
    const estimate = this.runtime.estimate(this.route, () => this.#request());
    if (estimate === undefined) return;
    this.#costs = estimate.costs;
    this.handler = usageTap(this.handler, this.route, estimate, this.runtime.options.rejection, () =>
      this.refusalBody(this.controller.attempt),
    );
  }

  /**
   * Whether the answer is judged once its body is read (see `Attempt.afterBody`): an LLM API's
   * 429, whose body tells a used-up quota from a rate limit (OpenAI's `insufficient_quota`).
   */
  readsBody(attempt: Attempt): boolean {
    return attempt.status === 429 && this.route.llm !== undefined;
  }

  /** The JSON of an attempt's held 429 body, for `LlmMeter.refusal` (`undefined` when not read). */
  refusalBody(attempt: Attempt | undefined): unknown {
    return refusalJson(attempt?.body);
  }

  #requestUnits(): number {
    if (this.runtime.options.units === undefined) return 1;
    return this.runtime.unitsFor(() => this.#request());
  }

  /** The request as `units` and `partition` see it, made once, on first need. */
  #request(): OutgoingRequest {
    if (this.#outgoing === undefined) {
      const { method, path, headers, body } = this.#opts;
      const record = headerRecord(headers);
      this.#outgoing = withLazyBody({ origin: this.#origin, method, path, headers: record }, body, record);
    }
    return this.#outgoing;
  }

  /** The fast path: attempt 1 dispatched now, if its units and a slot are free now. */
  #sendFirst(): boolean {
    const { limiter, gate } = this.route;
    if (gate !== undefined && !gate.tryEnter()) return false;
    let permit: Permit | undefined;
    try {
      permit = limiter.tryAcquire(this.#units, this.#costs);
    } finally {
      // An `acquired` listener that throws must not keep the slot.
      if (permit === undefined) gate?.leave();
    }
    if (permit === undefined) return false;
    this.#dispatchAttempt(new Attempt(this, new FastPathJudge(this, permit, gate)));
    return true;
  }

  // ---- FastPathRequest ----------------------------------------------------------------------

  get abortReason(): Error | undefined {
    return this.controller.abortReason;
  }

  get maxAttempts(): number {
    return this.runtime.options.maxAttempts;
  }

  canRetry(): boolean {
    return this.#canRetry();
  }

  retry(attempt: Attempt): void {
    this.#loop(attempt);
  }

  /** The request's last answer is judged (its outcome fed): its limiter may be dropped again. */
  judged(): void {
    this.#release?.();
    this.#release = undefined;
  }

  fail(error: unknown): void {
    if (this.#done) return;
    // A response held for judging (a classify() that threw) must not be kept.
    this.controller.attempt?.discard(false);
    this.finished();
    if (answerRefusal(error, this.runtime.options.rejection, this.handler, this.controller)) return;
    this.handler.onResponseError?.(this.controller, asError(error));
  }

  // ---- the attempt loop ---------------------------------------------------------------------

  /** Waits, sends and retries through `runAttempts`, from attempt 1 or after a throttled one. */
  #loop(throttledFirst: Attempt | undefined): void {
    // An adaptive limiter's wait is cancelled through the caller's controller (`waitCancel`):
    // no AbortController per waiting request. A slot's wait, or another limiter's, needs a signal.
    const waitsHere = this.route.gate === undefined && this.route.limiter instanceof AdaptiveRateLimiter;
    if (!waitsHere) {
      const cancel = new AbortController();
      this.controller.cancel = cancel;
      const reason = this.controller.abortReason;
      if (reason !== undefined) cancel.abort(reason);
    } else if (throttledFirst === undefined) {
      this.#waitFirst();
      return;
    }
    this.throttledFirst = throttledFirst;
    const loop = runAttempts<Attempt>(this);
    // Read once, as the loop starts.
    this.throttledFirst = undefined;
    this.#end(loop);
  }

  /**
   * Attempt 1 waits in the limiter's line as this request itself (`granted`, `refused`; see
   * `WaitCancel`): while it waits, the request holds no promise, closure or AbortController.
   */
  #waitFirst(): void {
    const reason = this.controller.abortReason;
    if (reason !== undefined) {
      this.refused(reason);
      return;
    }
    let waiting: Promise<Permit>;
    try {
      const options: CancellableAcquireOptions = { waitedMs: 0, costs: this.#costs, [kWaitCancel]: this };
      waiting = this.route.limiter.acquire(this.#units, options as AcquireOptions);
    } catch (error) {
      this.refused(error);
      return;
    }
    // Granted or refused at once, or queued behind a signal (a limiter of several budgets).
    if (waiting !== QUEUED) {
      waiting.then(
        (permit) => this.granted(permit),
        (error: unknown) => this.refused(error),
      );
    }
  }

  /**
   * Attempt 1's units are granted: it is sent as on the fast path (judged at its response start,
   * passed straight through unless it is throttled and sent again, then by the attempt loop).
   */
  granted(permit: Permit): void {
    // From a microtask, as when the grant resolved a promise: not inside the limiter's drain.
    queueMicrotask(() => {
      // One maxWait for the whole request: its retries' waits count this one.
      this.waitedMs = permit.waitedMs ?? 0;
      this.#dispatchAttempt(new Attempt(this, new FastPathJudge(this, permit, undefined)));
    });
  }

  /** Attempt 1's wait was refused (queue full, max wait, closed) or cancelled (an abort). */
  refused(error: unknown): void {
    queueMicrotask(() => this.fail(error));
  }

  /** Where a cancel of the wait finds it: kept on the caller's controller, which cancels it on abort. */
  get waitingIn(): CancellableLine | undefined {
    return this.controller.waitingIn;
  }

  set waitingIn(line: CancellableLine | undefined) {
    this.controller.waitingIn = line;
  }

  get waitSeq(): number {
    return this.controller.waitSeq;
  }

  set waitSeq(seq: number) {
    this.controller.waitSeq = seq;
  }

  #end(loop: Promise<Attempt>): void {
    loop.then(
      (attempt) => this.#deliver(attempt),
      (error: unknown) => this.fail(error),
    );
  }

  // ---- AttemptPlan --------------------------------------------------------------------------

  get limiter(): RateLimiter {
    return this.route.limiter;
  }

  get units(): number {
    return this.#units;
  }

  get costs(): Costs | undefined {
    return this.#costs;
  }

  get signal(): AbortSignal | undefined {
    return this.controller.cancel?.signal;
  }

  get waitCancel(): LoopCancel | undefined {
    return this.controller.cancel === undefined ? this.controller : undefined;
  }

  get slot(): AttemptPlan<Attempt>['slot'] {
    const gate = this.route.gate;
    return gate === undefined ? undefined : (signal) => gate.enter(signal);
  }

  classify(attempt: Attempt): Outcome {
    // Only an LLM API's 429 reads its body (parsing every held body as JSON cost ~3 µs a request).
    const body = this.route.llm === undefined ? undefined : this.refusalBody(attempt);
    return this.runtime.classify(attempt, () => attempt.headers, this.route, body);
  }

  discard(attempt: Attempt): void {
    attempt.discard((this.#bodies as AttemptBodies).complete);
  }

  send(): Promise<Attempt> {
    return new Promise<Attempt>((resolve, reject) => {
      const judge: AttemptJudge = {
        // Held for the loop to judge (an LLM API's 429 once its body is read).
        started: (attempt) => {
          if (this.readsBody(attempt)) attempt.afterBody(() => resolve(attempt));
          else resolve(attempt);
          return false;
        },
        failed: (_attempt, error) => reject(error),
      };
      this.#dispatchAttempt(new Attempt(this, judge));
    });
  }

  #dispatchAttempt(attempt: Attempt): void {
    this.controller.attempt = attempt;
    try {
      const body = (this.#bodies as AttemptBodies).next();
      // An in-memory body is the caller's own: its opts go down as they are.
      const opts =
        body === this.#opts.body
          ? this.#opts
          : { ...this.#opts, body: body as Dispatcher.DispatchOptions['body'] };
      this.#dispatch(opts, attempt);
    } catch (error) {
      attempt.onResponseError(undefined, asError(error));
    }
  }

  #canRetry(): boolean {
    return (this.#bodies as AttemptBodies).replayable && this.controller.abortReason === undefined;
  }

  #deliver(attempt: Attempt): void {
    const reason = this.controller.abortReason;
    if (reason !== undefined) {
      attempt.discard(false);
      this.fail(reason);
      return;
    }
    this.judged();
    attempt.deliver();
  }
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error), { cause: error });
}
