import type { Dispatcher } from 'undici';
import { DISPOSE } from '../dispose.js';
import { AdaptiveRateLimitError, InvalidArgumentError } from '../errors.js';
import { normalizeOrigin } from '../origin.js';
import type { RateLimiterRegistry } from '../registry/index.js';
import { RateLimitedDispatch } from './handler.js';
import { toDispatchHandler } from './legacy-handler.js';
import { type InterceptorOptions, resolveInterceptorOptions } from './options.js';
import { HttpRuntime } from './runtime.js';
import { warnOnUnsupportedUndici } from './undici-support.js';

// Names an undici that cannot run on this Node (undici 8 on Node 20) when the package loads, before
// undici's own load error, which does not say why.
warnOnUnsupportedUndici();

/** What {@link adaptiveRateLimit} returns: an undici interceptor, with its registry. */
export interface AdaptiveRateLimitInterceptor extends Dispatcher.DispatcherComposeInterceptor {
  /** The registry the interceptor takes its limiters from: snapshots, events, run-time changes. */
  readonly registry: RateLimiterRegistry;
  /**
   * Closes the registry the interceptor made (rejecting the requests still waiting); a registry
   * passed in as `registry`, and a `limiter` instance given in `limiters`, stay open for their
   * other users: the interceptor's own requests waiting for them (for a `maxConcurrent` slot or for
   * units), and those it is given after, are refused with `RateLimitRejectedError` `'closed'`; a
   * request in flight gets its answer (a retry it would need is not sent). Close the dispatcher
   * too. Idempotent.
   */
  close(): void;
  /** {@link close}, for `using`. */
  [Symbol.dispose](): void;
}

/**
 * An undici interceptor that meters each origin's requests through an adaptive limiter: every
 * request waits for its units, a 429 (or another throttle status) cuts the rate and pauses the
 * origin for its `Retry-After`, and a throttled request is sent again through the limiter, up to
 * `maxAttempts` in all; then its caller gets the 429 itself.
 *
 * ```ts
 * import { Agent, interceptors, setGlobalDispatcher } from 'undici';
 * setGlobalDispatcher(new Agent().compose(adaptiveRateLimit()));                  // every fetch
 * new Agent().compose(interceptors.dns(), adaptiveRateLimit(options), interceptors.retry());
 * ```
 *
 * Order in `compose` (the last listed runs first): put the limiter inside `retry` and `redirect`,
 * so that each of their attempts and hops waits for units with its own origin, and outside `dns`,
 * which replaces the host name with an address.
 *
 * - A request without `opts.origin` (a `Client` or `Pool` composed on undici 7) uses the
 *   `origin` option; without one it fails.
 * - An abort while the request waits rejects it at once and returns its units. A request the
 *   limiter refuses fails with `RateLimitRejectedError` (through `fetch`: the `cause` of its
 *   `TypeError`).
 * - A success is counted when the response starts, not when its body ends; a `maxConcurrent`
 *   slot is given back then too (a body nobody reads would otherwise hold it for ever).
 * - A request whose units (and slot) are free is sent at once, and its response passes straight
 *   through unless it is throttled and will be sent again.
 *
 * Written against undici's handler API of v7 and v8 (`onRequestStart`, `onResponseStart`, ...);
 * an old-style handler (`onConnect`, `onHeaders`, ...: Node's built-in `fetch` with a
 * `dispatcher` from undici 8) is converted on entry.
 *
 * @throws {ConfigError} when an option is invalid, naming each bad field and the value received.
 */
export function adaptiveRateLimit(options: InterceptorOptions = {}): AdaptiveRateLimitInterceptor {
  const resolved = resolveInterceptorOptions(options);
  const runtime = new HttpRuntime(resolved);
  const origins = new OriginCache();

  // undici 8 passes a Client's or Pool's origin as the second argument.
  function interceptor(dispatch: Dispatcher.Dispatch, dispatcherOrigin?: unknown): Dispatcher.Dispatch {
    const fallback =
      typeof dispatcherOrigin === 'string' || dispatcherOrigin instanceof URL
        ? origins.normalize(dispatcherOrigin)
        : resolved.origin;
    // Exactly two parameters: undici 8's compose checks `dispatch.length === 2`.
    return function adaptiveRateLimitDispatch(
      opts: Dispatcher.DispatchOptions,
      given: Dispatcher.DispatchHandler,
    ) {
      // Node's fetch passes an old-style handler, which undici 8's compose no longer converts.
      const handler = toDispatchHandler(given);
      const origin = opts.origin == null ? fallback : origins.normalize(opts.origin);
      if (origin === undefined) {
        handler.onResponseError?.(
          null as unknown as Dispatcher.DispatchController,
          missingOrigin(opts.origin),
        );
        return true;
      }
      const route = runtime.route(origin);
      if (route === undefined) return dispatch(opts, handler);
      new RateLimitedDispatch(dispatch, opts, handler, runtime, origin, route).start();
      return true;
    };
  }

  const made = Object.assign(interceptor, {
    registry: runtime.registry,
    close: () => runtime.close(),
    [DISPOSE]: () => runtime.close(),
  });
  runtimes.set(made, runtime);
  return made;
}

const runtimes = new WeakMap<AdaptiveRateLimitInterceptor, HttpRuntime>();

/**
 * The runtime behind an interceptor (its routes and concurrency gates), for tests that assert on
 * state; not exported from the package root.
 * @internal
 */
export function runtimeOf(interceptor: AdaptiveRateLimitInterceptor): HttpRuntime {
  const runtime = runtimes.get(interceptor);
  if (runtime === undefined) {
    throw new InvalidArgumentError(
      'runtimeOf',
      'interceptor',
      'must be one made by adaptiveRateLimit',
      interceptor,
    );
  }
  return runtime;
}

function missingOrigin(origin: unknown): AdaptiveRateLimitError {
  const message =
    origin == null
      ? 'the request has no origin (a Client or Pool composed on undici 7): pass `origin` to adaptiveRateLimit'
      : `the request's origin ${JSON.stringify(String(origin))} is not an http(s) origin`;
  return new AdaptiveRateLimitError('ERR_INVALID_ORIGIN', `adaptiveRateLimit: ${message}`);
}

/** `normalizeOrigin` for the few origins a process talks to, remembered; `undefined` when invalid. */
class OriginCache {
  readonly #seen = new Map<string, string | undefined>();

  normalize(origin: string | URL): string | undefined {
    if (typeof origin !== 'string') return tryNormalize(origin);
    let normalized = this.#seen.get(origin);
    if (normalized === undefined && !this.#seen.has(origin)) {
      // Bounded: a crawler's many hosts must not grow it without end.
      if (this.#seen.size >= 1024) this.#seen.clear();
      normalized = tryNormalize(origin);
      this.#seen.set(origin, normalized);
    }
    return normalized;
  }
}

function tryNormalize(origin: string | URL): string | undefined {
  try {
    return normalizeOrigin(origin);
  } catch {
    return undefined;
  }
}
