import { type LoopCancel, runAttempts } from '../attempt-loop.js';
import { DISPOSE } from '../dispose.js';
import { ConfigError, InvalidCallbackValueError, type RateLimitRejectedError } from '../errors.js';
import { type HeaderRecord, headerRecord } from '../headers.js';
import { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { Outcome } from '../limiter/types.js';
import type { CancellableLine } from '../limiter/waiting-line.js';
import { normalizeOrigin } from '../origin.js';
import { redactError } from '../redact.js';
import type { RateLimiterRegistry } from '../registry/index.js';
import { type AdapterWait, closedRefusal } from './adapter-close.js';
import { HELD_BODY_DRAIN_MS, untilSocketReturned } from './attempt.js';
import { errorOutcome } from './classify.js';
import { refusedAtOnce, slotBound } from './concurrency.js';
import { heldBodyEnded, heldBodyRead, holdResponse } from './held-response.js';
import { heldRefusal, llmAnswer, readRefusal, refusalBody } from './llm-answers.js';
import { type InterceptorOptions, type OutgoingRequest, resolveInterceptorOptions } from './options.js';
import {
  type DecodedBody,
  decodedUnlessStopped,
  decodingOf,
  isBytes,
  withLazyBody,
} from './outgoing-body.js';
import { refusalResponse } from './refusal.js';
import { type AttemptBodies, attemptBodies, isReplayableBody } from './request-body.js';
import { HttpRuntime, type Route } from './runtime.js';

/** Options of {@link rateLimitedFetch}. */
export interface RateLimitedFetchOptions extends InterceptorOptions {
  /**
   * The fetch to wrap (undici's, a polyfill, one msw intercepts, ...). Read at call time when
   * unset, so a fetch patched later is used. @default globalThis.fetch
   */
  fetch?: typeof fetch;
}

/** What {@link rateLimitedFetch} returns: a fetch, with its registry. */
export type RateLimitedFetch = typeof fetch & {
  /** The registry the wrapper takes its limiters from. */
  readonly registry: RateLimiterRegistry;
  /**
   * Closes the registry the wrapper made. A registry passed in as `registry`, and a `limiter`
   * instance given in `limiters`, stay open for their other users: the wrapper's own requests
   * waiting for them (for a `maxConcurrent` slot or for units), and those it is given after, are
   * refused with `RateLimitRejectedError` `'closed'`; a request in flight gets its answer (a retry
   * it would need is not sent). Idempotent.
   */
  close(): void;
  /** {@link close}, for `using`. */
  [Symbol.dispose](): void;
};

/**
 * Wraps any `fetch` (browsers, Deno, Bun, undici, msw-intercepted) with the same behaviour as the
 * undici interceptor: each origin's requests wait for units of its limiter, throttled responses
 * cut the rate and pause the origin, and a throttled request is sent again up to `maxAttempts` in
 * all, after which its caller gets the 429 response.
 *
 * Request bodies are sent again as they are when they can be (a string, bytes, Blob, FormData,
 * URLSearchParams); a `Request` object's body is cloned for each attempt (`Request.clone()`, which
 * keeps it in memory until the request is over); a stream or async iterable `init.body` is kept
 * while sent, up to `maxReplayBodyBytes`, and a longer one is not retried. A `Request` whose body
 * was read already is refused with a `TypeError`, as `fetch` refuses it, before it draws anything.
 * A 429 whose body the wrapped `fetch` read already (one that logs it) is retried as any other.
 *
 * Not http(s) URLs (`data:`, `blob:`) and origins without a limiter (`default: false`) are passed
 * through. A call is metered against the origin it is made to; an answer from another origin
 * that `fetch` followed a redirect to is returned as it is (not retried), and its `Retry-After`
 * pauses that origin's limiter. A request the limiter refuses rejects with `RateLimitRejectedError`; an aborted one
 * with the signal's reason (the same object), at once, even while it waits. The fetch's own
 * errors reject as they are (one whose fields throw when read too), but for the one it builds
 * from a URL with secrets (a password: "Request cannot be constructed from a URL that includes
 * credentials: <url>"): a copy of the same class, masked.
 *
 * @throws {ConfigError} when an option is invalid, naming each bad field and the value received.
 */
export function rateLimitedFetch(options: RateLimitedFetchOptions = {}): RateLimitedFetch {
  const source = 'rateLimitedFetch options';
  const resolved = resolveInterceptorOptions(options, source, ['fetch']);
  const base = options.fetch;
  if (base !== undefined && typeof base !== 'function') {
    throw new ConfigError([{ path: 'fetch', message: 'must be a fetch function', received: base }], source);
  }
  const raw: typeof fetch = base ?? ((input, init) => globalThis.fetch(input, init));
  // A fetch that throws at once, or returns something else than a (promised) response, fails the
  // call with an error naming it, rather than with a TypeError from deep inside the wrapper.
  const send = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> =>
    checkedResponse(await raw(input, init), base !== undefined);
  const runtime = new HttpRuntime(resolved, source);

  async function fetchWithRateLimit(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const request = asRequest(input);
    const url = requestUrl(input, request);
    const origin = url === undefined ? undefined : tryNormalize(url);
    const originRoute = origin === undefined ? undefined : runtime.route(origin);
    // A `Request` whose body was read already cannot be sent: refused as `fetch` refuses it (a
    // `TypeError`), before anything is drawn.
    if (request?.bodyUsed === true && init?.body == null) throw usedBodyError(request);
    if (origin === undefined || originRoute === undefined || url === undefined)
      return send(input, init).catch((error: unknown) => {
        throw fetchError(error, input, request, init);
      });

    // A body sent compressed that the limiter reads is decoded first, off the event loop; an
    // abort or the close meanwhile ends the call at once. Any other body: no await, no closure.
    const body = init?.body;
    let record: HeaderRecord | undefined;
    let decoded: DecodedBody | undefined;
    if (isBytes(body) && runtime.readsBody(originRoute)) {
      record = headerRecord(new Headers(init?.headers ?? request?.headers));
      const decoding = decodingOf(body, record);
      if (decoding !== undefined) {
        const signal = signalOf(request, init) ?? undefined;
        decoded = await decodedUnlessStopped(
          decoding,
          typeof signal?.addEventListener === 'function' ? signal : undefined,
          (stop) => runtime.onClose(stop),
          () => closedRefusal(originRoute),
        );
      }
    }
    let outgoing: OutgoingRequest | undefined;
    const described = (): OutgoingRequest => {
      if (outgoing === undefined) {
        const headers = record ?? headerRecord(new Headers(init?.headers ?? request?.headers));
        const made = {
          origin,
          method: init?.method ?? request?.method ?? 'GET',
          path: url.pathname + url.search,
          headers,
        };
        // `init.body` as given; a `Request`'s own body is a stream: never read for it.
        outgoing = withLazyBody(made, init?.body, headers, decoded);
      }
      return outgoing;
    };
    const route =
      originRoute.partitioner === undefined
        ? originRoute
        : runtime.partitionRoute(origin, originRoute, {
            headers: init?.headers ?? request?.headers,
            request: described,
          });
    const units = runtime.unitsFor(described);
    const estimate = runtime.estimate(route, described);
    const callerSignal = signalOf(request, init) ?? undefined;
    // Behind a limiter the adapter's close leaves open, its waits are also refused at the close.
    // (A signal that is not one is left to the limiter, which refuses it by name.)
    const closing =
      route.closesWithAdapter ||
      (callerSignal !== undefined && typeof callerSignal.addEventListener !== 'function')
        ? undefined
        : closingWait(route, callerSignal);
    const signal = closing === undefined ? callerSignal : closing.signal;
    const waitCancel = closing instanceof FetchWait ? closing : undefined;
    const bodies = fetchBodies(input, request, init, resolved.maxReplayBodyBytes);
    const llm = route.llm;
    const attempt =
      llm === undefined
        ? () => send(...bodies.next())
        : async (_attempt: number, started?: () => void) => {
            const response = await send(...bodies.next());
            if (response.status !== 429) return response;
            // The slot is freed when the response starts; the refusal's body is read to judge it,
            // for REFUSAL_READ_TIMEOUT_MS at most.
            started?.();
            return readRefusal(response, runtime.clockOf(route));
          };
    const { limiter, gate } = route;
    /** When the retry began to read its held answer's body before its slot (`heldBodyRead`). */
    let readSince: number | undefined;
    const release = runtime.hold(route);
    if (closing !== undefined) runtime.track(closing);
    try {
      const response = await runAttempts<Response>({
        limiter,
        units,
        costs: estimate?.costs,
        maxAttempts: resolved.maxAttempts,
        signal,
        waitCancel,
        // Closed with its own registry between a grant and the send: not sent.
        closed: () => (runtime.closed ? closedRefusal(route) : undefined),
        slot:
          gate === undefined
            ? undefined
            : (slotSignal, waitedMs) =>
                gate.enter(slotSignal, slotBound(limiter, units, waitedMs), waitCancel),
        unitsFirst: route.gatePer === 'origin',
        send: attempt,
        classify: (r) =>
          redirectedAway(r, runtime, originRoute)
            ? otherOriginsAnswer(r, runtime)
            : runtime.classify(r, () => headerRecord(r.headers), route, refusalBody(r)),
        thrownQuota: (r) =>
          redirectedAway(r, runtime, originRoute)
            ? undefined
            : runtime.thrownQuota(r, () => headerRecord(r.headers), route),
        // A request that never reached the server gives back its LLM token draws.
        classifyError: errorOutcome,
        canRetry: () => bodies.replayable,
        // Read into memory while the retry waits: an unread body would keep its connection.
        hold: holdWithRefusal,
        discard: (r) => dropBody(r.body),
        // With maxConcurrent, the held body is read before the retry's slot (holding none), cutting
        // nothing; the retry then cuts one still coming (see `AttemptPlan.heldBodyRead`).
        // A retry the limiter would refuse at once reads nothing first: refused with no wait.
        heldBodyRead: (held, waitedMs) => {
          if (refusedAtOnce(limiter, units, waitedMs)) return undefined;
          const clock = runtime.clockOf(route);
          const since = clock.now();
          const reading = heldBodyRead(held, { clock, ms: HELD_BODY_DRAIN_MS }, (stop) =>
            runtime.onClose(stop),
          );
          if (reading !== undefined) readSince = since;
          return reading;
        },
        // The held body read to its end first: cancelled while it comes, it closed its connection.
        beforeRetry: async (held) => {
          const since = readSince;
          readSince = undefined;
          if (held !== undefined) {
            const deadline = { clock: runtime.clockOf(route), ms: HELD_BODY_DRAIN_MS, since };
            // Or until the wrapper closes: then nothing more is sent (see `HttpRuntime.onClose`).
            await heldBodyEnded(held, deadline, (stop) => runtime.onClose(stop));
          }
          await untilSocketReturned();
        },
      });
      return estimate === undefined
        ? response
        : llmAnswer(response, route, estimate, resolved.rejection, () => runtime.hold(route));
    } catch (error) {
      bodies.close();
      const refused = refusalResponse(error, resolved.rejection, init?.method ?? request?.method);
      if (refused !== undefined) return refused;
      throw fetchError(error, input, request, init);
    } finally {
      release();
      if (closing !== undefined) {
        runtime.untrack(closing);
        closing.done();
      }
    }
  }

  return Object.assign(fetchWithRateLimit, {
    registry: runtime.registry,
    close: () => runtime.close(),
    [DISPOSE]: () => runtime.close(),
  }) as RateLimitedFetch;
}

/**
 * A request's waits behind a limiter the adapter's close leaves open (see `HttpRuntime.close`),
 * cancelled by the caller's signal or by the close (`adapterClosed`, with the adapter's refusal).
 * The caller's signal is listened to until `done`. Behind an adaptive limiter the waits, for
 * units and for a `maxConcurrent` slot, are cancelled through a {@link FetchWait}, with no
 * `AbortController` per request (on Node 20 one costs about 20 µs; a slot's wait makes one only
 * when the request has to wait). Another limiter's wait needs a signal (`acquire`'s contract):
 * one controller per request, its signal for the waits (not the sends).
 */
function closingWait(
  route: Route,
  caller: AbortSignal | undefined,
): AdapterWait & { readonly signal: AbortSignal | undefined; done(): void } {
  if (route.limiter instanceof AdaptiveRateLimiter) return new FetchWait(route, caller);
  const controller = new AbortController();
  const onAbort = () => controller.abort(caller?.reason);
  if (caller?.aborted) onAbort();
  else caller?.addEventListener('abort', onAbort, { once: true });
  return {
    route,
    signal: controller.signal,
    adapterClosed: (refusal) => controller.abort(refusal),
    done: () => caller?.removeEventListener('abort', onAbort),
  };
}

/**
 * The waits of one request behind an adaptive limiter, cancelled without a signal (the attempt
 * loop's `waitCancel`, the gate's `SlotCancel`): the caller's abort or the adapter's close takes
 * the waiter out through the line it waits in (the limiter's, or a `maxConcurrent` gate's), and
 * refuses its later waits at once, as an aborted signal would.
 * Only this request's waits: a caller's abort rejects its own call, nothing else.
 */
class FetchWait implements LoopCancel, AdapterWait {
  readonly route: Route;
  readonly #caller: AbortSignal | undefined;
  waitingIn: CancellableLine | undefined;
  waitSeq = 0;
  abortReason: unknown;
  /** No signal: the loop's waits are cancelled through this object (`waitCancel`). */
  readonly signal = undefined;

  constructor(route: Route, caller: AbortSignal | undefined) {
    this.route = route;
    this.#caller = caller;
    if (caller?.aborted) this.#cancel(caller.reason);
    else caller?.addEventListener('abort', this, { once: true });
  }

  /** The caller's signal aborted. */
  handleEvent(): void {
    this.#cancel(this.#caller?.reason);
  }

  adapterClosed(refusal: RateLimitRejectedError): void {
    this.#cancel(refusal);
  }

  done(): void {
    this.#caller?.removeEventListener('abort', this);
  }

  #cancel(reason: unknown): void {
    if (this.abortReason !== undefined) return;
    this.abortReason = reason;
    this.waitingIn?.cancel(this.waitSeq, reason);
  }
}

/**
 * Whether `response` is the answer of another origin, one that `fetch` followed a redirect to
 * (`redirect: 'follow'`, its default) and that has a limiter other than `route`'s: then it is
 * not the answer of the origin the request was metered against, whose server answered a
 * redirect.
 */
function redirectedAway(response: Response, runtime: HttpRuntime, route: Route): boolean {
  if (response.redirected !== true || typeof response.url !== 'string') return false;
  const final = URL.canParse(response.url) ? tryNormalize(new URL(response.url)) : undefined;
  return final !== undefined && runtime.route(final)?.limiter !== route.limiter;
}

/**
 * The outcome, for the request's own origin, of an answer from the origin a redirect led to: a
 * success (its server answered, with a redirect), never a cut, a pause or a retry through it.
 * A throttle with a `Retry-After` pauses the limiter of the origin that sent it, when it has one
 * of its own; the answer is returned to the caller as it is.
 */
function otherOriginsAnswer(response: Response, runtime: HttpRuntime): Outcome {
  const final = tryNormalize(new URL(response.url));
  const route = final === undefined ? undefined : runtime.route(final);
  if (route !== undefined) {
    const outcome = runtime.classify(response, () => headerRecord(response.headers), route);
    if (outcome.kind === 'throttled' && outcome.retryAfterMs !== undefined && outcome.retryAfterMs > 0)
      route.adaptive?.pauseFor(outcome.retryAfterMs);
  }
  return { kind: 'success' };
}

/**
 * Cancels a response body nobody will read: a web stream's, or a Node stream's (a polyfill's
 * `Response`, such as node-fetch's), destroyed.
 */
function dropBody(body: unknown): void {
  const stream = body as { cancel?: unknown; destroy?: unknown } | null | undefined;
  if (typeof stream?.cancel === 'function') (stream as ReadableStream).cancel().catch(() => {});
  else if (typeof stream?.destroy === 'function') (stream as { destroy(): void }).destroy();
}

/**
 * `value` when it is a response (of any `fetch`: a number `status`, `headers` with `get`).
 * @throws {InvalidCallbackValueError} `'fetch'` when it is not.
 */
function checkedResponse(value: unknown, given: boolean): Response {
  const candidate = value as { status?: unknown; headers?: { get?: unknown } | null } | null;
  if (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.status === 'number' &&
    typeof candidate.headers?.get === 'function'
  ) {
    return value as Response;
  }
  const what =
    value === null ? 'null' : typeof value === 'object' ? 'an object that is not a Response' : typeof value;
  throw new InvalidCallbackValueError(
    'fetch',
    `${given ? 'the fetch option' : 'globalThis.fetch'} returned ${what}; it must return a Response or a promise of one`,
    value,
  );
}

type FetchArgs = [input: RequestInfo | URL, init?: RequestInit];

/** The arguments of each attempt, with a body that can be sent again; see {@link AttemptBodies}. */
function fetchBodies(
  input: RequestInfo | URL,
  request: Request | undefined,
  init: RequestInit | undefined,
  maxBytes: number,
) {
  const body = init?.body;
  const replay = (next: () => FetchArgs, bodies?: AttemptBodies) => ({
    next,
    get replayable() {
      return bodies?.replayable ?? true;
    },
    close: () => bodies?.close(),
  });
  if (isOneShotFetchBody(body)) {
    // A stream or async iterable: kept while sent, up to maxBytes.
    const bodies = attemptBodies(body, maxBytes);
    return replay(() => {
      const next = bodies.next();
      return [
        input,
        { ...init, body: isReplayableBody(next) ? (next as BodyInit) : toStream(next), duplex: 'half' },
      ];
    }, bodies);
  }
  if (body == null && request !== undefined && request.body !== null) {
    return replay(() => [request.clone(), init]);
  }
  return replay(() => [input, init]);
}

/**
 * Whether `fetch` reads `body` once: a web `ReadableStream` or an async iterable (a Node
 * `Readable`, an async generator). Anything else `fetch` sends as it is or turns into a string
 * (WebIDL's `BodyInit`: a number, a `URL`, an array as `"a,b"`), the same on every attempt, so it is
 * passed to it as it is.
 */
function isOneShotFetchBody(body: unknown): boolean {
  return (
    typeof body === 'object' &&
    body !== null &&
    !isReplayableBody(body) &&
    (typeof (body as { getReader?: unknown }).getReader === 'function' || Symbol.asyncIterator in body)
  );
}

/** An async iterable of bytes as a web `ReadableStream`. */
function toStream(iterable: unknown): ReadableStream<Uint8Array> {
  const iterator = (iterable as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { done, value } = await iterator.next();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    async cancel(reason) {
      await iterator.return?.(reason);
    },
  });
}

/** What `fetch` rejects a `Request` with when its body was read already, said of the request. */
function usedBodyError(request: Request): TypeError {
  const { origin, pathname } = new URL(request.url);
  return new TypeError(
    `adaptive-rate-limit: the Request's body was read already (bodyUsed), so it cannot be sent: ${request.method} ${origin}${pathname}; make a new Request`,
  );
}

/**
 * What the wrapper rethrows for a fetch's rejection: the error fetch builds from the URL it was
 * given, which names that URL ("Request cannot be constructed from a URL that includes
 * credentials: <url>", "Failed to parse URL from <url>" and its cause's `input`), as a copy with
 * the URL's secrets masked (see `redactError`). Anything else is rethrown as the same object: the
 * caller's abort reason (whatever it is) and every other error, whatever its text.
 */
function fetchError(
  error: unknown,
  input: RequestInfo | URL,
  request: Request | undefined,
  init: RequestInit | undefined,
): unknown {
  if (error === abortReason(signalOf(request, init))) return error;
  const url = urlText(input, request);
  try {
    return url !== undefined && namesUrl(error, url) ? redactError(error) : error;
  } catch {
    // An error whose fields throw when read (a Proxy) names nothing that can be read: as it is.
    return error;
  }
}

/**
 * The signal of the call, as fetch reads it: `init.signal` when given, `null` included (then the
 * `Request`'s own signal is dropped: no signal), else the `Request`'s.
 */
function signalOf(
  request: Request | undefined,
  init: RequestInit | undefined,
): AbortSignal | null | undefined {
  return init?.signal !== undefined ? init.signal : request?.signal;
}

/** The signal's `reason`; `undefined` for no signal or an object that is not one. */
function abortReason(signal: AbortSignal | null | undefined): unknown {
  try {
    return signal?.reason;
  } catch {
    return undefined;
  }
}

/** A TypeError (what fetch rejects with) whose message, or whose cause's `input`, holds `url`. */
function namesUrl(error: unknown, url: string): boolean {
  if (!(error instanceof TypeError)) return false;
  if (error.message.includes(url)) return true;
  const cause: unknown = error.cause;
  return typeof cause === 'object' && cause !== null && (cause as { input?: unknown }).input === url;
}

/** The URL as fetch reads it (a string, `URL.href`, a `Request`'s `url`); `undefined` if none. */
function urlText(input: RequestInfo | URL, request: Request | undefined): string | undefined {
  try {
    const text = request !== undefined ? request.url : String(input);
    return text === '' ? undefined : text;
  } catch {
    return undefined;
  }
}

/**
 * `input` when it is a `Request` of any implementation: the global class, undici's own (the
 * `undici` package's `fetch` and `Request` are not the global ones), a polyfill's, another
 * realm's. `instanceof Request` sees the global class only: a request of another class would
 * be read as a URL, fail to parse and pass through unmetered, with no retry and no pause.
 */
function asRequest(input: RequestInfo | URL): Request | undefined {
  if (input instanceof Request) return input;
  if (typeof input !== 'object' || input === null || input instanceof URL) return undefined;
  const { url, method, clone } = input as Partial<Request>;
  return typeof url === 'string' && typeof method === 'string' && typeof clone === 'function'
    ? (input as Request)
    : undefined;
}

function requestUrl(input: RequestInfo | URL, request: Request | undefined): URL | undefined {
  try {
    if (input instanceof URL) return input;
    const href = request !== undefined ? request.url : String(input);
    // A relative URL resolves against the page, as fetch resolves it (browsers).
    return URL.canParse(href) ? new URL(href) : new URL(new Request(href).url);
  } catch {
    return undefined;
  }
}

function tryNormalize(url: URL): string | undefined {
  try {
    return normalizeOrigin(url);
  } catch {
    return undefined;
  }
}

/** A retried answer held in memory (`holdResponse`), keeping its 429's parsed body (`heldRefusal`). */
function holdWithRefusal(response: Response): Response {
  return heldRefusal(response, holdResponse(response));
}
