import type { Dispatcher } from 'undici';
import { runAttempts } from '../attempts.js';
import { Attempt, type AttemptOwner } from './attempt.js';
import { headerRecord } from './headers.js';
import { type AttemptBodies, attemptBodies } from './request-body.js';
import type { HttpRuntime, Route } from './runtime.js';

type Controller = Dispatcher.DispatchController;

/**
 * One request through the interceptor: the controller its caller holds across every attempt, and
 * the loop that waits for units, sends, judges and retries.
 *
 * The caller gets this controller through `onRequestStart` at once, before the wait: that is how
 * an abort reaches a request still waiting (fetch listens from `onRequestStart` on, `request()`
 * keeps the abort function it gets there). An abort then cancels the wait (the limiter returns
 * the reservation), or aborts the attempt in flight. The attempts' own `onRequestStart` calls are
 * not passed on.
 */
export class RateLimitedDispatch implements Controller, AttemptOwner {
  readonly handler: Dispatcher.DispatchHandler;
  readonly #dispatch: Dispatcher.Dispatch;
  readonly #opts: Dispatcher.DispatchOptions;
  readonly #runtime: HttpRuntime;
  readonly #route: Route;
  readonly #origin: string;
  readonly #cancel = new AbortController();
  #bodies: AttemptBodies | undefined;
  #attempt: Attempt | undefined;
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
    this.#cancel.abort(this.#reason);
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

  get abortReason(): Error | undefined {
    return this.#reason;
  }

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

  // ---- the attempt loop ---------------------------------------------------------------------

  /** Hands the caller its controller, then waits, sends and retries; never throws. */
  start(): void {
    try {
      this.handler.onRequestStart?.(this, undefined);
      if (this.#reason !== undefined) throw this.#reason;
      const { method, path, headers } = this.#opts;
      const units = this.#runtime.unitsFor(() => ({
        origin: this.#origin,
        method,
        path,
        headers: headerRecord(headers),
      }));
      this.#bodies = attemptBodies(this.#opts.body, this.#runtime.options.maxReplayBodyBytes);
      const bodies = this.#bodies;
      runAttempts<Attempt>({
        limiter: this.#route.limiter,
        units,
        maxAttempts: this.#runtime.options.maxAttempts,
        signal: this.#cancel.signal,
        send: () => this.#send(),
        classify: (a) => this.#runtime.classify(a.status, a.headers, () => a.headers),
        canRetry: () => bodies.replayable && this.#reason === undefined,
        discard: (a) => a.discard(bodies.complete),
      }).then(
        (attempt) => this.#deliver(attempt),
        (error: unknown) => this.#fail(error),
      );
    } catch (error) {
      this.#fail(error);
    }
  }

  #send(): Promise<Attempt> {
    const go = (): Promise<Attempt> => {
      const attempt = new Attempt(this);
      this.#attempt = attempt;
      try {
        this.#dispatch(
          { ...this.#opts, body: this.#bodies?.next() as Dispatcher.DispatchOptions['body'] },
          attempt,
        );
      } catch (error) {
        attempt.onResponseError(undefined, asError(error));
      }
      return attempt.response;
    };
    const queue = this.#route.queue;
    return queue === undefined ? go() : queue.add(go, { signal: this.#cancel.signal });
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
