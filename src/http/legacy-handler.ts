import type { IncomingHttpHeaders } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { AdaptiveRateLimitError } from '../errors.js';
import { rawPairs } from './raw-headers.js';

type Controller = Dispatcher.DispatchController;

/**
 * undici's handler callbacks before v7 (`onConnect`, `onHeaders`, `onData`, `onComplete`,
 * `onError`, `onUpgrade`). Node's built-in `fetch` still passes such a handler to its dispatcher.
 */
interface LegacyHandler {
  onConnect?(abort: (reason?: Error) => void, context?: unknown): void;
  onHeaders?(
    statusCode: number,
    rawHeaders: Buffer[],
    resume: () => void,
    statusText: string,
  ): boolean | undefined;
  onData?(chunk: Buffer): boolean | undefined;
  onComplete?(rawTrailers: Buffer[]): void;
  onError(error: Error): void;
  onUpgrade?(statusCode: number, rawHeaders: Buffer[], socket: Duplex): void;
}

/**
 * The handler a dispatch was given, in undici's current handler API (`onRequestStart`,
 * `onResponseStart`, ...).
 *
 * undici 7's `compose` converts an old-style handler before each interceptor; undici 8's no longer
 * does, so Node's own `fetch(url, { dispatcher })` reaches the interceptor with `onConnect`,
 * `onHeaders`, ... and, unconverted, would never see its response. Such a handler is wrapped in a
 * {@link LegacyHandlerAdapter}; one with neither API fails at once.
 *
 * @throws {AdaptiveRateLimitError} `ERR_INVALID_HANDLER` when the handler has neither
 *   `onRequestStart`/`onResponseError` nor `onError`.
 */
export function toDispatchHandler(handler: unknown): Dispatcher.DispatchHandler {
  if (typeof handler === 'object' && handler !== null) {
    // Read as a partial of both APIs: undici 8's `DispatchHandler` type no longer declares the old
    // callbacks, so `h.onError` must not be looked up through it (the build would fail there).
    const h = handler as Partial<Dispatcher.DispatchHandler> & Partial<LegacyHandler>;
    if (typeof h.onRequestStart === 'function' || typeof h.onResponseError === 'function') {
      return h as Dispatcher.DispatchHandler;
    }
    if (typeof h.onError === 'function') return new LegacyHandlerAdapter(h as LegacyHandler);
  }
  throw new AdaptiveRateLimitError(
    'ERR_INVALID_HANDLER',
    'adaptiveRateLimit: the dispatch handler has neither onRequestStart/onResponseError (undici >= 7) nor onError (the older handler API)',
  );
}

/**
 * Presents an old-style handler through the current API: each callback is passed on with the
 * headers as raw name/value Buffers, and `false` from `onHeaders`/`onData` pauses the response.
 * Written from undici 7's `WrapHandler` mapping, except that a header with several values
 * (`set-cookie`) becomes several raw pairs rather than one pair holding an array.
 */
class LegacyHandlerAdapter implements Dispatcher.DispatchHandler {
  readonly #handler: LegacyHandler;

  constructor(handler: LegacyHandler) {
    this.#handler = handler;
  }

  onRequestStart(controller: Controller, context: unknown): void {
    this.#handler.onConnect?.((reason) => controller.abort(reason as Error), context);
  }

  onRequestUpgrade(
    _controller: Controller,
    statusCode: number,
    headers: IncomingHttpHeaders,
    socket: Duplex,
  ): void {
    this.#handler.onUpgrade?.(statusCode, rawPairs(headers), socket);
  }

  onResponseStart(
    controller: Controller,
    statusCode: number,
    headers: IncomingHttpHeaders,
    statusMessage?: string,
  ): void {
    const resume = () => controller.resume();
    if (this.#handler.onHeaders?.(statusCode, rawPairs(headers), resume, statusMessage ?? '') === false) {
      controller.pause();
    }
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    if (this.#handler.onData?.(chunk) === false) controller.pause();
  }

  onResponseEnd(_controller: Controller, trailers: IncomingHttpHeaders): void {
    this.#handler.onComplete?.(rawPairs(trailers));
  }

  onResponseError(_controller: Controller | null, error: Error): void {
    this.#handler.onError(error);
  }
}
