import type { Dispatcher } from 'undici';
import type { LoopCancel } from '../attempt-loop.js';
import type { CancellableLine } from '../limiter/waiting-line.js';
import type { Attempt } from './attempt.js';

type Controller = Dispatcher.DispatchController;

/**
 * The controller the caller of one rate-limited request holds across all its attempts (undici's
 * `DispatchController`). It is handed over at once, before any wait: that is how an abort reaches
 * a request still waiting (fetch listens from `onRequestStart` on, `request()` keeps the abort
 * function it gets there). An abort cancels the wait (the limiter returns the reservation), or
 * aborts the attempt in flight; pause and resume reach the current attempt (see
 * {@link Attempt.pause}).
 */
export class CallerController implements Controller, LoopCancel {
  /** The attempt the caller's calls reach now: the last one dispatched. */
  attempt: Attempt | undefined;
  /**
   * Cancels a wait for units or for a slot through a signal: set only when the request has to
   * wait and its wait is not cancelled through this controller itself (see `waitingIn`).
   */
  cancel: AbortController | undefined;
  /** The line the request's units wait in, and its place there (`WaitCancel`): an abort takes it out. */
  waitingIn: CancellableLine | undefined;
  waitSeq = 0;
  #reason: Error | undefined;
  #paused = false;

  get aborted(): boolean {
    return this.#reason !== undefined;
  }

  get reason(): Error | null {
    return this.#reason ?? null;
  }

  /** The abort reason, if the caller aborted. */
  get abortReason(): Error | undefined {
    return this.#reason;
  }

  get paused(): boolean {
    return this.#paused;
  }

  get rawHeaders(): Controller['rawHeaders'] {
    return this.attempt?.controller?.rawHeaders;
  }

  get rawTrailers(): Controller['rawTrailers'] {
    return this.attempt?.controller?.rawTrailers;
  }

  abort(reason?: Error): void {
    if (this.#reason !== undefined) return;
    this.#reason = reason ?? new DOMException('This operation was aborted', 'AbortError');
    this.cancel?.abort(this.#reason);
    this.waitingIn?.cancel(this.waitSeq, this.#reason);
    // An attempt not yet bound to its controller is aborted when it is (`RateLimitedDispatch.bind`).
    this.attempt?.controller?.abort(this.#reason);
  }

  pause(): void {
    this.#paused = true;
    this.attempt?.pause();
  }

  resume(): void {
    this.#paused = false;
    this.attempt?.resume();
  }
}
