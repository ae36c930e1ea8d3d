import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';

type Controller = Dispatcher.DispatchController;
type HeaderMap = Record<string, string | string[] | undefined>;

/** The side of a rate-limited request an attempt reports to; see `RateLimitedDispatch`. */
export interface AttemptOwner {
  /** The caller's handler and the controller it knows (the same for every attempt). */
  readonly handler: Dispatcher.DispatchHandler;
  readonly controller: Controller;
  /** The caller aborted: the reason, else `undefined`. */
  readonly abortReason: Error | undefined;
  /** Whether the caller paused the response. */
  readonly callerPaused: boolean;
  /** The attempt's own controller is known (`onRequestStart`). */
  bind(attempt: Attempt): void;
  /** The delivered response ended or failed: the request is over. */
  finished(): void;
}

/**
 * The handler of one attempt. It sends the request once and reports back at response start
 * (`response` resolves) without telling the caller: the attempt loop decides whether the caller
 * sees this response ({@link Attempt.deliver}) or a retry replaces it ({@link Attempt.discard}).
 * Until then the response is paused, and what arrives anyway is kept.
 */
export class Attempt implements Dispatcher.DispatchHandler {
  /** The controller undici gave this attempt; `undefined` until `onRequestStart`. */
  controller: Controller | undefined;
  status = 0;
  headers: HeaderMap = {};
  statusMessage: string | undefined;
  /** Resolves at response start (or upgrade), rejects on an error before it. */
  readonly response: Promise<Attempt>;

  readonly #owner: AttemptOwner;
  /** done: dropped for a retry, or ended; later callbacks are ignored. */
  #state: 'sending' | 'held' | 'delivered' | 'done' = 'sending';
  #resolve!: (attempt: Attempt) => void;
  #reject!: (error: Error) => void;
  #chunks: Buffer[] = [];
  #trailers: HeaderMap | undefined;
  #error: Error | undefined;

  constructor(owner: AttemptOwner) {
    this.#owner = owner;
    this.response = new Promise<Attempt>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  /** Whether the caller has this response. */
  get delivered(): boolean {
    return this.#state === 'delivered';
  }

  onRequestStart(controller: Controller, _context: unknown): void {
    this.controller = controller;
    this.#owner.bind(this);
  }

  onRequestUpgrade(_controller: Controller, status: number, headers: HeaderMap, socket: Duplex): void {
    // The socket is the caller's now: nothing to hold or retry.
    this.status = status;
    this.headers = headers;
    this.#state = 'delivered';
    this.#resolve(this);
    const { handler, controller } = this.#owner;
    this.#owner.finished();
    handler.onRequestUpgrade?.(controller, status, headers, socket);
    this.#state = 'done';
  }

  onResponseStart(controller: Controller, status: number, headers: HeaderMap, statusMessage?: string): void {
    const { handler, controller: callerController } = this.#owner;
    if (status < 200) {
      // Informational (103 Early Hints): passed on, the final answer follows.
      if (this.#state === 'sending')
        handler.onResponseStart?.(callerController, status, headers, statusMessage);
      return;
    }
    if (this.#state !== 'sending') return;
    this.status = status;
    this.headers = headers;
    this.statusMessage = statusMessage;
    this.#state = 'held';
    controller.pause();
    this.#resolve(this);
  }

  onResponseData(_controller: Controller, chunk: Buffer): void {
    if (this.#state === 'held') this.#chunks.push(chunk);
    else if (this.#state === 'delivered') this.#owner.handler.onResponseData?.(this.#owner.controller, chunk);
  }

  onResponseEnd(_controller: Controller, trailers: HeaderMap): void {
    if (this.#state === 'held') this.#trailers = trailers;
    else if (this.#state === 'delivered') this.#end(trailers);
  }

  onResponseError(_controller: Controller | null | undefined, error: Error): void {
    if (this.#state === 'sending') this.#reject(error);
    else if (this.#state === 'held') this.#error ??= error;
    else if (this.#state === 'delivered') this.#fail(error);
  }

  /** Gives the held response to the caller: its start, what arrived meanwhile, then the rest. */
  deliver(): void {
    if (this.#state !== 'held') return;
    this.#state = 'delivered';
    const { handler, controller } = this.#owner;
    const chunks = this.#chunks;
    this.#chunks = [];
    try {
      handler.onResponseStart?.(controller, this.status, this.headers, this.statusMessage);
      for (const chunk of chunks) handler.onResponseData?.(controller, chunk);
      if (this.#error !== undefined) this.#fail(this.#error);
      else if (this.#trailers !== undefined) this.#end(this.#trailers);
      else if (!this.#owner.callerPaused) this.controller?.resume();
    } catch (error) {
      // A throwing handler fails its request, as undici's core does.
      if (this.#state === 'delivered') {
        this.controller?.abort(error as Error);
        this.#fail(error as Error);
      }
    }
  }

  /**
   * Drops the held response without the caller seeing it. Its body is read and thrown away when
   * the request body was sent whole (the connection stays usable); otherwise the attempt is
   * aborted, so that it stops reading a request body the next attempt needs.
   */
  discard(requestBodySent: boolean): void {
    if (this.#state !== 'held') return;
    this.#state = 'done';
    this.#chunks = [];
    if (this.#error !== undefined || this.#trailers !== undefined) return;
    if (requestBodySent) this.controller?.resume();
    else this.controller?.abort(new Error('adaptive-rate-limit: throttled attempt dropped for a retry'));
  }

  #end(trailers: HeaderMap): void {
    this.#owner.finished();
    // If the caller's onResponseEnd throws (undici's RetryHandler does, to retry), the state stays
    // 'delivered': undici's core turns the throw into onResponseError, which is passed on.
    this.#owner.handler.onResponseEnd?.(this.#owner.controller, trailers);
    this.#state = 'done';
  }

  #fail(error: Error): void {
    this.#state = 'done';
    this.#owner.finished();
    this.#owner.handler.onResponseError?.(this.#owner.controller, error);
  }
}
