import type { Dispatcher } from 'undici';
import { feed, runAttempts } from '../attempts.js';
import type { Outcome, Permit } from '../limiter/types.js';
import { Attempt, type AttemptJudge, type AttemptOwner } from './attempt.js';
import type { ConcurrencyGate } from './concurrency.js';
import { headerRecord } from './headers.js';
import { type AttemptBodies, attemptBodies } from './request-body.js';
import type { HttpRuntime, Route } from './runtime.js';

type Controller = Dispatcher.DispatchController;

/**
 * One request through the interceptor: the controller its caller holds across every attempt, the
 * first attempt sent at once when it need not wait, and the attempt loop for the rest.
 *
 * The caller gets this controller through `onRequestStart` at once, before any wait: that is how
 * an abort reaches a request still waiting (fetch listens from `onRequestStart` on, `request()`
 * keeps the abort function it gets there). An abort then cancels the wait (the limiter returns
 * the reservation), or aborts the attempt in flight. The attempts' own `onRequestStart` calls are
 * not passed on.
 *
 * The fast path: when the limiter grants the units now (`tryAcquire`) and the gate has a slot
 * free, attempt 1 is dispatched at once and judged synchronously when its response starts, by the
 * attempt loop's rules. Unless it is throttled and will be sent again, its permit is settled and
 * the response passes straight to the caller: no pause, no promise, nothing buffered. A throttled
 * answer to send again, and a request that must wait for units or a slot, go to the attempt loop
 * (`runAttempts`), which holds the 429 until its retry has units.
 */
export class RateLimitedDispatch implements Controller, AttemptOwner, AttemptJudge {
  readonly handler: Dispatcher.DispatchHandler;
  readonly #dispatch: Dispatcher.Dispatch;
  readonly #opts: Dispatcher.DispatchOptions;
  readonly #runtime: HttpRuntime;
  readonly #route: Route;
  readonly #origin: string;
  /** Cancels a wait for units or for a slot: made only when the request has to wait. */
  #cancel: AbortController | undefined;
  #units = 1;
  #bodies: AttemptBodies | undefined;
  #attempt: Attempt | undefined;
  /** The permit of attempt 1 sent on the fast path, until its response starts or it fails. */
  #permit: Permit | undefined;
  /** Whether attempt 1 sent on the fast path holds a slot of the route's gate. */
  #slot = false;
  #reason: Error | undefined;
  #paused = false;
  #done = false;

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
    this.#runtime = runtime;
    this.#route = route;
  }

  // ---- the controller the caller holds ----------------------------------------------------

  get controller(): Controller {
    return this;
  }

  get aborted(): boolean {
    return this.#reason !== undefined;
  }

  get reason(): Error | null {
    return this.#reason ?? null;
  }

  get paused(): boolean {
    return this.#paused;
  }

  get rawHeaders(): Controller['rawHeaders'] {
    return this.#attempt?.controller?.rawHeaders;
  }

  get rawTrailers(): Controller['rawTrailers'] {
    return this.#attempt?.controller?.rawTrailers;
  }

  abort(reason?: Error): void {
    if (this.#reason !== undefined) return;
    this.#reason = reason ?? new DOMException('This operation was aborted', 'AbortError');
    this.#cancel?.abort(this.#reason);
    // An attempt not yet bound to its controller is aborted when it is (`bind`).
    this.#attempt?.controller?.abort(this.#reason);
  }

  pause(): void {
    this.#paused = true;
    this.#attempt?.controller?.pause();
  }

  resume(): void {
    this.#paused = false;
    // A held response stays paused until the loop has judged it.
    if (this.#attempt?.delivered) this.#attempt.controller?.resume();
  }

  // ---- AttemptOwner -------------------------------------------------------------------------

  get callerPaused(): boolean {
    return this.#paused;
  }

  bind(attempt: Attempt): void {
    if (this.#reason !== undefined) attempt.controller?.abort(this.#reason);
  }

  finished(): void {
    this.#done = true;
    this.#bodies?.close();
  }

  // ---- the request --------------------------------------------------------------------------

  /** Hands the caller its controller, then sends at once or waits, and retries; never throws. */
  start(): void {
    try {
      this.handler.onRequestStart?.(this, undefined);
      // Aborted already (fetch aborts inside onRequestStart when its signal was): nothing taken.
      if (this.#reason !== undefined) throw this.#reason;
      this.#units = this.#requestUnits();
      this.#bodies = attemptBodies(this.#opts.body, this.#runtime.options.maxReplayBodyBytes);
      if (!this.#sendFirst()) this.#loop(undefined);
    } catch (error) {
      this.#fail(error);
    }
  }

  #requestUnits(): number {
    if (this.#runtime.options.units === undefined) return 1;
    const { method, path, headers } = this.#opts;
    return this.#runtime.unitsFor(() => ({
      origin: this.#origin,
      method,
      path,
      headers: headerRecord(headers),
    }));
  }

  /** The fast path: attempt 1 dispatched now, if its units and a slot are free now. */
  #sendFirst(): boolean {
    const { limiter, gate } = this.#route;
    if (gate !== undefined && !gate.tryEnter()) return false;
    let permit: Permit | undefined;
    try {
      permit = limiter.tryAcquire(this.#units);
    } finally {
      // An `acquired` listener that throws must not keep the slot.
      if (permit === undefined) gate?.leave();
    }
    if (permit === undefined) return false;
    this.#permit = permit;
    this.#slot = gate !== undefined;
    this.#dispatchAttempt(new Attempt(this, this));
    return true;
  }

  // ---- AttemptJudge: attempt 1 on the fast path ---------------------------------------------

  /** Judges attempt 1 as `runAttempts` judges an attempt; `true` passes its response through. */
  started(attempt: Attempt): boolean {
    this.#leaveSlot();
    const permit = this.#permit;
    this.#permit = undefined;
    let outcome: Outcome;
    try {
      outcome = this.#classify(attempt);
    } catch (error) {
      // As in the loop: the permit is not settled, and the request fails (an upgraded one is the
      // caller's already).
      if (!attempt.delivered) this.#fail(error);
      return false;
    }
    try {
      if (permit !== undefined) feed(permit, outcome);
    } catch (error) {
      // A controller or a listener that throws fails the request, as it does in the loop.
      if (!attempt.delivered) this.#fail(error);
      return false;
    }
    if (attempt.delivered) return true;
    // runAttempts's rule: a throttled answer is sent again while attempts are left and the body can be.
    if (outcome.kind === 'throttled' && 1 < this.#runtime.options.maxAttempts && this.#canRetry()) {
      this.#loop(attempt);
      return false;
    }
    if (this.#reason !== undefined) {
      this.#fail(this.#reason);
      return false;
    }
    return true;
  }

  /** Attempt 1 on the fast path failed before its response: as the loop ends on an error. */
  failed(_attempt: Attempt, error: Error): void {
    this.#leaveSlot();
    const permit = this.#permit;
    this.#permit = undefined;
    permit?.failed();
    this.#fail(error);
  }

  #leaveSlot(): void {
    if (!this.#slot) return;
    this.#slot = false;
    this.#route.gate?.leave();
  }

  // ---- the attempt loop ---------------------------------------------------------------------

  /** Waits, sends and retries through `runAttempts`, from attempt 1 or after a throttled one. */
  #loop(throttledFirst: Attempt | undefined): void {
    const cancel = new AbortController();
    this.#cancel = cancel;
    if (this.#reason !== undefined) cancel.abort(this.#reason);
    const bodies = this.#bodies as AttemptBodies;
    runAttempts<Attempt>({
      limiter: this.#route.limiter,
      units: this.#units,
      maxAttempts: this.#runtime.options.maxAttempts,
      signal: cancel.signal,
      throttledFirst,
      slot:
        this.#route.gate === undefined
          ? undefined
          : (signal) => (this.#route.gate as ConcurrencyGate).enter(signal),
      send: () => this.#send(),
      classify: (a) => this.#classify(a),
      canRetry: () => this.#canRetry(),
      discard: (a) => a.discard(bodies.complete),
    }).then(
      (attempt) => this.#deliver(attempt),
      (error: unknown) => this.#fail(error),
    );
  }

  #send(): Promise<Attempt> {
    return new Promise<Attempt>((resolve, reject) => {
      const judge: AttemptJudge = {
        // Held for the loop to judge.
        started: (attempt) => {
          resolve(attempt);
          return false;
        },
        failed: (_attempt, error) => reject(error),
      };
      this.#dispatchAttempt(new Attempt(this, judge));
    });
  }

  #dispatchAttempt(attempt: Attempt): void {
    this.#attempt = attempt;
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

  #classify(attempt: Attempt): Outcome {
    return this.#runtime.classify(attempt.status, attempt.headers, () => attempt.headers, this.#route);
  }

  #canRetry(): boolean {
    return (this.#bodies as AttemptBodies).replayable && this.#reason === undefined;
  }

  #deliver(attempt: Attempt): void {
    if (this.#reason !== undefined) {
      attempt.discard(false);
      this.#fail(this.#reason);
      return;
    }
    attempt.deliver();
  }

  #fail(error: unknown): void {
    if (this.#done) return;
    // A response held for judging (a classify() that threw) must not keep its connection paused.
    this.#attempt?.discard(false);
    this.finished();
    this.handler.onResponseError?.(this, asError(error));
  }
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error), { cause: error });
}
