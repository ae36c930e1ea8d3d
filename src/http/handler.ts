import type { Dispatcher } from 'undici';
import { runAttempts } from '../attempt-loop.js';
import type { RateLimitRejectedError } from '../errors.js';
import { type HeaderRecord, headerRecord } from '../headers.js';
import { kWaitCancel } from '../internal.js';
import { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { Costs } from '../limiter/budgets.js';
import { notSent } from '../limiter/permit.js';
import type { AcquireOptions, Permit } from '../limiter/types.js';
import {
  type CancellableAcquireOptions,
  type CancellableLine,
  QUEUED,
  type WaitCancel,
} from '../limiter/waiting-line.js';
import { type AdapterWait, closedRefusal } from './adapter-close.js';
import { Attempt, type BodyDeadline } from './attempt.js';
import { CallerController } from './caller-controller.js';
import { FastPathJudge, type FastPathRequest } from './fast-path.js';
import { warnHandlerThrew } from './handler-threw.js';
import { MAX_REFUSAL_BYTES, REFUSAL_READ_TIMEOUT_MS, refusalJson } from './llm.js';
import { decodedBody, isEncoded } from './llm-decode.js';
import { LoopPlan, type LoopRequest } from './loop-plan.js';
import { type DecodedBody, decodedUnlessStopped, decodingOf, isBytes } from './outgoing-body.js';
import { answerRefusal } from './refusal.js';
import { type AttemptBodies, attemptBodies } from './request-body.js';
import { findDraw } from './request-draw.js';
import type { HttpRuntime, Route } from './runtime.js';

/**
 * One request through the interceptor, in four roles, each its own object:
 *
 * - the caller's controller ({@link CallerController}), handed over at once through
 *   `onRequestStart`, before any wait, and the same across every attempt (the attempts' own
 *   `onRequestStart` calls are not passed on);
 * - the owner of the attempts (this class): it finds what the request draws (`findDraw`: its
 *   partition's route, units, an LLM API's costs), sends attempt 1 at once when its units and a
 *   slot are free (the fast path), else waits for them in an adaptive limiter's line as itself
 *   (see `#waitFirst`) and sends attempt 1 as on the fast path once they are granted; behind a
 *   gate, or for another limiter, and for every retry, it runs the attempt loop (`runAttempts`)
 *   and gives the caller the answer the loop returns;
 * - the loop's plan ({@link LoopPlan}), made only when the loop runs: a request waiting in an
 *   adaptive limiter's line holds no plan, promise or closure;
 * - the judges of the attempts: {@link FastPathJudge} for attempt 1 outside the loop, which
 *   judges its response synchronously and passes it straight through unless it is throttled and
 *   will be sent again (then the loop takes it over, holding the 429 until its retry has units),
 *   and the loop's own judge (see `LoopPlan.send`), which hands every response to the loop.
 *
 * Both judge an answer by one step (`judge` in src/attempt-loop.ts: feed the permit, then the retry rule).
 */
export class RateLimitedDispatch implements LoopRequest, FastPathRequest, WaitCancel, AdapterWait {
  /** The caller's handler (for an LLM API's limiter, behind a tap that reads the answer's `usage`). */
  handler: Dispatcher.DispatchHandler;
  readonly controller = new CallerController();
  readonly #dispatch: Dispatcher.Dispatch;
  readonly #opts: Dispatcher.DispatchOptions;
  readonly runtime: HttpRuntime;
  /** The origin's route, then (in `start`, see `findDraw`) the route of the request's partition, if it has one. */
  route: Route;
  readonly #origin: string;
  /** Units charged for each attempt (see `findDraw`). */
  units = 1;
  /** Units drawn from the limiter's other budgets (an LLM API's tokens; see `findDraw`). */
  costs: Costs | undefined;
  /** The request body of each attempt (made in `start`). */
  bodies: AttemptBodies | undefined;
  /** Ends the hold on a per-origin limiter (see `HttpRuntime.hold`): once the last answer is judged. */
  #release: (() => void) | undefined;
  #done = false;
  /** ms attempt 1 waited for its units in the limiter's line (the loop's `AttemptPlan.waitedMs`). */
  waitedMs = 0;
  /** The adapter closed with the request in progress: its waits are refused with this. */
  #closedBy: RateLimitRejectedError | undefined;

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

  later(step: () => void): void {
    setImmediate(() => this.#detached(step));
  }

  bind(attempt: Attempt): void {
    const reason = this.controller.abortReason;
    if (reason !== undefined) attempt.controller?.abort(reason);
  }

  finished(): void {
    this.#done = true;
    this.runtime.untrack(this);
    this.judged();
    this.bodies?.close();
  }

  released(attempt: Attempt): void {
    if (this.controller.attempt === attempt) this.controller.attempt = undefined;
  }

  // ---- the request --------------------------------------------------------------------------

  /**
   * Hands the caller its controller, then sends at once or waits, and retries; never throws. A
   * body sent compressed that the limiter reads (see `HttpRuntime.readsBody`) is decoded first,
   * off the event loop (`decodingOf`), and the request goes on once it is; an abort or the
   * adapter's close meanwhile ends it at once (`decodedUnlessStopped`). Any other body goes on
   * in this call, with no promise or closure more.
   */
  start(): void {
    let decoding: ((signal: AbortSignal) => Promise<DecodedBody>) | undefined;
    let record: HeaderRecord | undefined;
    try {
      this.handler.onRequestStart?.(this.controller, undefined);
      // Aborted already (fetch aborts inside onRequestStart when its signal was): nothing taken.
      if (this.controller.abortReason !== undefined) throw this.controller.abortReason;
      const body = this.#opts.body;
      if (isBytes(body) && this.runtime.readsBody(this.route)) {
        // Made once: `findDraw` reads it too.
        record = headerRecord(this.#opts.headers);
        decoding = decodingOf(body, record);
      }
    } catch (error) {
      if (this.#done) throw error;
      this.fail(error);
      return;
    }
    if (decoding === undefined) this.#draw(undefined, record);
    else this.#drawDecoded(decoding, record as HeaderRecord);
  }

  /**
   * {@link start} once `decoding` ends; the caller's abort (through its controller's `cancel`)
   * and the adapter's close end the request at once, its decoded body dropped.
   */
  #drawDecoded(decoding: (signal: AbortSignal) => Promise<DecodedBody>, record: HeaderRecord): void {
    const stop = new AbortController();
    this.controller.cancel = stop;
    decodedUnlessStopped(
      decoding,
      stop.signal,
      (end) => this.runtime.onClose(end),
      () => closedRefusal(this.route),
    ).then(
      (decoded) =>
        this.#detached(() => {
          if (this.controller.cancel === stop) this.controller.cancel = undefined;
          this.#draw(decoded, record);
        }),
      (error: unknown) => this.#detached(() => this.fail(error)),
    );
  }

  /** {@link start} once the body is read: finds what the request draws, and sends or waits. */
  #draw(decoded: DecodedBody | undefined, record: HeaderRecord | undefined): void {
    try {
      // Aborted while its body was decoded: nothing taken.
      if (this.controller.abortReason !== undefined) throw this.controller.abortReason;
      findDraw(this, this.#origin, this.#opts, decoded, record);
      this.#release = this.runtime.hold(this.route);
      this.bodies = attemptBodies(this.#opts.body, this.runtime.options.maxReplayBodyBytes);
      if (!this.#sendFirst()) this.#loop(undefined);
    } catch (error) {
      // Ended already: the caller's own callback threw while it was told (dispatch threw after
      // calling it). The throw goes to the caller's dispatch call, as undici's dispatch does.
      if (this.#done) throw error;
      this.fail(error);
    }
  }

  /**
   * Whether the answer is judged once its body is read (see `Attempt.afterBody`): an LLM API's
   * 429, whose body tells a used-up quota from a rate limit (OpenAI's `insufficient_quota`).
   */
  readsBody(attempt: Attempt): boolean {
    return attempt.status === 429 && this.route.llm !== undefined;
  }

  /**
   * How long such a body is read ({@link REFUSAL_READ_TIMEOUT_MS}, on the limiter's clock): a body
   * that stalls is then cut (its connection closed) and the 429 judged on its status and headers.
   */
  bodyDeadline(): BodyDeadline {
    return { clock: this.runtime.clockOf(this.route), ms: REFUSAL_READ_TIMEOUT_MS };
  }

  /** The JSON of an attempt's held 429 body, for `LlmMeter.refusal` (`undefined` when not read). */
  refusalBody(attempt: Attempt | undefined): unknown {
    const body = attempt?.body;
    // Still compressed below the fetch that asked for it (see `decodedBody`).
    const encoding = attempt?.headers['content-encoding'];
    if (body === undefined || !isEncoded(encoding)) return refusalJson(body);
    return refusalJson(decodedBody(body, encoding, MAX_REFUSAL_BYTES));
  }

  /** The fast path: attempt 1 dispatched now, if its units and a slot are free now. */
  #sendFirst(): boolean {
    // A closed adapter sends nothing new: the loop refuses it (see `HttpRuntime.track`).
    if (this.runtime.closed) return false;
    const { limiter, gate } = this.route;
    if (gate !== undefined && !gate.tryEnter()) return false;
    let permit: Permit | undefined;
    try {
      permit = limiter.tryAcquire(this.units, this.costs);
    } finally {
      // An `acquired` listener that throws must not keep the slot.
      if (permit === undefined) gate?.leave();
    }
    if (permit === undefined) return false;
    this.dispatchAttempt(new Attempt(this, new FastPathJudge(this, permit, gate)));
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
    return (this.bodies as AttemptBodies).replayable && this.controller.abortReason === undefined;
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
    const attempt = this.controller.attempt;
    attempt?.discard();
    this.finished();
    try {
      const { rejection } = this.runtime.options;
      if (!answerRefusal(error, rejection, this.handler, this.controller, this.#opts.method)) {
        // The caller's abort reason goes back as it is (a string, a number: what undici gives
        // without the interceptor), not wrapped in an Error.
        const reason = this.controller.aborted && error === this.controller.reason;
        this.handler.onResponseError?.(this.controller, reason ? (error as Error) : asError(error));
      }
    } finally {
      // The caller has the refusal or the error (also when its callback throws: the throw goes on
      // as it would without the interceptor): the request keeps nothing of its last attempt.
      if (attempt !== undefined) this.released(attempt);
    }
  }

  // ---- the attempt loop ---------------------------------------------------------------------

  /** Waits, sends and retries through `runAttempts`, from attempt 1 or after a throttled one. */
  #loop(throttledFirst: Attempt | undefined): void {
    // It may wait from here on: refused if the adapter closes meanwhile (or is closed).
    this.runtime.track(this);
    // An adaptive limiter's wait is cancelled through the caller's controller (`waitCancel`):
    // no AbortController per waiting request. A slot's wait, or another limiter's, needs a signal.
    const waitsHere =
      this.#closedBy === undefined &&
      this.route.gate === undefined &&
      this.route.limiter instanceof AdaptiveRateLimiter;
    if (!waitsHere) {
      const cancel = new AbortController();
      this.controller.cancel = cancel;
      const reason = this.controller.abortReason ?? this.#closedBy;
      if (reason !== undefined) cancel.abort(reason);
    } else if (throttledFirst === undefined) {
      this.#waitFirst();
      return;
    }
    const plan = new LoopPlan(this, throttledFirst);
    const loop = runAttempts<Attempt>(plan);
    // Read once, as the loop starts: the loop holds it from there.
    plan.throttledFirst = undefined;
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
      const options: CancellableAcquireOptions = { waitedMs: 0, costs: this.costs, [kWaitCancel]: this };
      waiting = this.route.limiter.acquire(this.units, options as AcquireOptions);
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
    queueMicrotask(() =>
      this.#detached(() => {
        // Aborted (or its adapter closed) between the grant and now: nothing goes out, no answer
        // is counted (dispatched, it opened a connection to be aborted at its start, and its
        // permit told a failed answer), and it ends as an abort of its wait does.
        const stopped =
          this.controller.abortReason ??
          this.#closedBy ??
          (this.runtime.closed ? closedRefusal(this.route) : undefined);
        if (stopped !== undefined) {
          notSent(permit);
          this.fail(stopped);
          return;
        }
        // One maxWait for the whole request: its retries' waits count this one.
        this.waitedMs = permit.waitedMs ?? 0;
        this.dispatchAttempt(new Attempt(this, new FastPathJudge(this, permit, undefined)));
      }),
    );
  }

  /** Attempt 1's wait was refused (queue full, max wait, closed) or cancelled (an abort). */
  refused(error: unknown): void {
    queueMicrotask(() => this.#detached(() => this.fail(error)));
  }

  /**
   * The adapter closed, its limiter left open (see `HttpRuntime.close`): the wait in progress
   * (for a slot or units) is refused with `refusal`, and so is every later one, through a signal
   * aborted with it (a retry's: the loop then gives the caller the answer it holds).
   */
  adapterClosed(refusal: RateLimitRejectedError): void {
    if (this.#done || this.#closedBy !== undefined) return;
    this.#closedBy = refusal;
    const controller = this.controller;
    controller.cancel ??= new AbortController();
    controller.cancel.abort(refusal);
    controller.waitingIn?.cancel(controller.waitSeq, refusal);
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
      (attempt) => this.#detached(() => this.#deliver(attempt)),
      (error: unknown) => this.#detached(() => this.fail(error)),
    );
  }

  /**
   * Runs a step from a promise handler or a microtask, where no undici call is on the stack to
   * take a throw. The request is told its end before the caller's callbacks run (its permit,
   * slot and hold settled), so what can still throw here is the caller's own `onResponseError`
   * (undici hands a throw of `onResponseStart`, `onResponseData` or `onResponseEnd` to
   * `onResponseError`, and so does `Attempt.deliver`). It is reported as a process warning
   * (`ARL_HANDLER_THREW`): not an unhandled rejection or an uncaught exception, which would end
   * the process, and not lost.
   */
  #detached(step: () => void): void {
    try {
      step();
    } catch (error) {
      warnHandlerThrew(error, this.#origin);
    }
  }

  // ---- LoopRequest -------------------------------------------------------------------------

  /** Sends `attempt` down the dispatcher, with the request body of its turn. */
  dispatchAttempt(attempt: Attempt): void {
    this.controller.attempt = attempt;
    try {
      const body = (this.bodies as AttemptBodies).next();
      // An in-memory body is the caller's own: its opts go down as they are.
      const opts =
        body === this.#opts.body
          ? this.#opts
          : { ...this.#opts, body: body as Dispatcher.DispatchOptions['body'] };
      this.#dispatch(opts, attempt);
    } catch (error) {
      // Told already (undici's dispatch calls the handler's onError, then lets its throw go on):
      // the caller's own callback threw, and the throw goes on up.
      if (!attempt.sending) throw error;
      attempt.onResponseError(undefined, asError(error));
    }
  }

  #deliver(attempt: Attempt): void {
    const reason = this.controller.abortReason;
    if (reason !== undefined) {
      attempt.discard();
      this.fail(reason);
      return;
    }
    this.judged();
    this.controller.attempt = attempt;
    attempt.deliver();
  }
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error), { cause: error });
}
