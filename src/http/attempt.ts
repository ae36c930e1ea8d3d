import type { Duplex } from 'node:stream';
import { setImmediate as timersSetImmediate } from 'node:timers';
import type { Dispatcher } from 'undici';
import type { Clock } from '../clock.js';
import { AdaptiveRateLimitError, ThrottledBodyTimeoutError, ThrottledBodyTooLongError } from '../errors.js';

type Controller = Dispatcher.DispatchController;
type HeaderMap = Record<string, string | string[] | undefined>;

/**
 * How long a held body is waited for (see {@link Attempt.afterBody}): `ms` on `clock`, from `since`
 * (a time on `clock`; default: when the wait starts).
 */
export interface BodyDeadline {
  readonly clock: Clock;
  readonly ms: number;
  readonly since?: number | undefined;
}

/**
 * The most bytes of a throttled answer's body kept in memory while its retry waits (64 KiB). A
 * held answer is read as it arrives, never paused, so that its connection goes back to the pool
 * at once; a longer body is cut there and its connection closed. When the caller gets the held
 * answer after all (attempts run out, the limiter refuses the retry), its body ends with a
 * {@link ThrottledBodyTooLongError} after these bytes.
 */
export const MAX_HELD_BODY_BYTES = 64 * 1024;

/**
 * How long a throttled answer's body still coming when its retry is ready to go is read on before
 * the retry goes (1 s, on the limiter's clock, from then): a body that needs more than one socket
 * read (written in parts, longer than a TCP window) had not ended in the turn of a grant at once
 * (`Retry-After: 0`), and dropping it aborted it, closing its keep-alive connection: the retry and
 * the next request opened new sockets (3 sockets for each retried 429 on an undici `Agent`, where
 * the retry, sent as the body ended, reuses the one). Read to its end, it is kept (up to
 * {@link MAX_HELD_BODY_BYTES}, past which it is cut at once, as while it is held), and the retry
 * goes over its socket. A body that has not ended by then (a proxy's page that trickles without
 * end) is cut, its connection closed, and the retry goes: read on for ever, it held its
 * connection (with `connections: 1` the retry never went out). 1 s is about what opening a new
 * connection costs over TLS to a far origin several times over, so the wait rarely delays a retry
 * more than the new socket would have; a retry refused its units never has its answer cut by it
 * (a body is cut only once the retry has its units).
 *
 * With `maxConcurrent`, the read holds no slot: the retry reads first, for up to this long from
 * when it is judged, cutting nothing, and only then waits for its slot and its units as any
 * retry does (see `AttemptPlan.heldBodyRead`); a body still coming once it has them is cut at
 * once. Read with the slot taken, a body that trickles held the slot its 1 s: three such 429s at
 * `maxConcurrent: 1` took three 1 s steps one after another; read before the slot, one.
 */
export const HELD_BODY_DRAIN_MS = 1_000;

/**
 * Keeps `chunk` of a throttled answer's body in `kept`, up to {@link MAX_HELD_BODY_BYTES}: past
 * the cap, the part that fits is kept and the error the body ends with is returned (the caller
 * then cuts the rest and closes its connection). The interceptor's held answer, the fetch wrapper's
 * held answer and an LLM API's 429 read before it is judged all keep their bytes so.
 */
export function keepUpToCap<T extends Uint8Array>(
  kept: { chunks: T[]; bytes: number },
  chunk: T,
  status: number,
): ThrottledBodyTooLongError | undefined {
  const room = MAX_HELD_BODY_BYTES - kept.bytes;
  if (chunk.byteLength <= room) {
    kept.chunks.push(chunk);
    kept.bytes += chunk.byteLength;
    return undefined;
  }
  if (room > 0) kept.chunks.push(chunk.subarray(0, room) as T);
  kept.bytes = MAX_HELD_BODY_BYTES;
  return new ThrottledBodyTooLongError(status, MAX_HELD_BODY_BYTES);
}

/**
 * The next turn of the event loop (see {@link untilSocketReturned}): `node:timers`' `setImmediate`
 * (Deno, Bun and workerd have it too), which vitest's and Jest's fake timers leave alone once
 * it is loaded (they replace the global's, before or after this module loads); a macrotask of the
 * `setTimeout` of the module's load where a runtime has none.
 */
const nextTurn: (step: () => void) => unknown =
  typeof timersSetImmediate === 'function'
    ? timersSetImmediate
    : (
        (later) => (step: () => void) =>
          later(step, 0)
      )(globalThis.setTimeout);

/**
 * Resolves on the next turn of the event loop (`setImmediate`): what the retry of a throttled
 * answer waits once its units are granted (`AttemptPlan.beforeRetry`), in the
 * interceptor and in the fetch wrapper (Node's `fetch` is undici too). undici gives a keep-alive
 * socket back to its pool only on the turn after the answer on it ended
 * (`setImmediate(client[kResume])` in its HTTP/1 client); a retry dispatched in the grant's
 * microtask found that socket still busy and opened a second connection, leaving the first idle.
 * The grant comes in a microtask after undici's parser has returned (granted at once, or by another
 * answer that freed room in the line in that turn), so this `setImmediate` runs after undici's own;
 * a retry granted by a timer later loses one turn, nothing more.
 *
 * Not the global `setImmediate`: a test suite that fakes timers (vitest's and Jest's default sets
 * fake `setImmediate`, before the library loads or after) would hold every retry until it ran its
 * timers, where a retry had needed no timer of theirs. Under fake timers undici's own turn is
 * faked too, and the retry may open a second connection, as before. node:test's `mock.timers`
 * does replace `node:timers`' functions: a suite that first imports the library while they are
 * on holds every retry until it ticks them.
 */
export function untilSocketReturned(): Promise<void> {
  return new Promise<void>((resolve) => nextTurn(resolve));
}

/** The side of a rate-limited request an attempt reports to; see `RateLimitedDispatch`. */
export interface AttemptOwner {
  /** The caller's handler and the controller it knows (the same for every attempt). */
  readonly handler: Dispatcher.DispatchHandler;
  readonly controller: Controller;
  /** Whether the caller paused the response. */
  readonly callerPaused: boolean;
  /** The attempt's own controller is known (`onRequestStart`). */
  bind(attempt: Attempt): void;
  /**
   * Runs `step` on a later turn of the event loop, where no undici call is on the stack: a throw
   * of the caller's handler there is reported (`ARL_HANDLER_THREW`), not left uncaught.
   */
  later(step: () => void): void;
  /** The delivered response ended or failed: the request is over. */
  finished(): void;
  /**
   * The caller has been told the end or the failure: the request lets go of the attempt. A
   * request that waited long is in V8's old generation by then, and its pointer to the young
   * attempt would keep the attempt, and what it holds, alive through the scavenges until the
   * next full GC.
   */
  released(attempt: Attempt): void;
}

/** Who judges an attempt: told of its response start, or of its failure before one. */
export interface AttemptJudge {
  /**
   * The final response started (or the request was upgraded: then the caller has it already).
   * `true` gives it to the caller at once; `false` holds it for the attempt loop to
   * {@link Attempt.deliver} or {@link Attempt.discard}: its body is read meanwhile (up to
   * {@link MAX_HELD_BODY_BYTES}), so it holds no connection. May discard the attempt itself.
   */
  started(attempt: Attempt): boolean;
  /** The attempt failed before its response started. */
  failed(attempt: Attempt, error: Error): void;
}

/**
 * Where an attempt stands. `held`: judged, not yet given to the caller nor dropped; its body is
 * kept as it arrives, with how it ended (trailers, or an error: the cut of a body past the cap,
 * or the transport's). `done`: dropped for a retry, or ended; later callbacks are ignored.
 */
type AttemptState =
  | { readonly kind: 'sending' }
  | { readonly kind: 'held'; chunks: Buffer[]; bytes: number; trailers?: HeaderMap; error?: Error }
  | { readonly kind: 'delivered' }
  | { readonly kind: 'done' };

type Held = Extract<AttemptState, { kind: 'held' }>;

const SENDING: AttemptState = { kind: 'sending' };
const DELIVERED: AttemptState = { kind: 'delivered' };
const DONE: AttemptState = { kind: 'done' };

/**
 * The handler of one attempt. It sends the request once and asks its judge at response start
 * whether the caller gets this response now, or the response is held until the attempt loop
 * decides: the caller sees it ({@link Attempt.deliver}), or a retry replaces it
 * ({@link Attempt.discard}). A held response is never paused: its body is read into memory as it
 * arrives, up to {@link MAX_HELD_BODY_BYTES} (a longer one is cut and its connection closed), so
 * that a request waiting for its retry holds no connection a request before it may need.
 */
export class Attempt implements Dispatcher.DispatchHandler {
  /** The controller undici gave this attempt; `undefined` until `onRequestStart`. */
  controller: Controller | undefined;
  status = 0;
  headers: HeaderMap = {};
  statusMessage: string | undefined;
  /** Whether undici upgraded the request (an upgrade, a CONNECT): the caller has its socket. */
  upgraded = false;

  readonly #owner: AttemptOwner;
  readonly #judge: AttemptJudge;
  #state: AttemptState = SENDING;
  /** The held body, whole, once it ended within the cap (kept after it is delivered). */
  #body: Buffer | undefined;
  /** Called once the held body has ended, been cut at the cap, or failed; see {@link Attempt.afterBody}. */
  #afterBody: (() => void) | undefined;
  /** The timer of the wait for the held body (see {@link Attempt.afterBody}), while it runs. */
  #deadline: { readonly clock: Clock; readonly handle: unknown } | undefined;
  constructor(owner: AttemptOwner, judge: AttemptJudge) {
    this.#owner = owner;
    this.#judge = judge;
  }

  /** Whether the attempt is sent and has not been answered (no response start, no failure). */
  get sending(): boolean {
    return this.#state.kind === 'sending';
  }

  /** Whether the caller has this response. */
  get delivered(): boolean {
    return this.#state.kind === 'delivered';
  }

  /** Whether the response is held for the attempt loop (its body being read into memory). */
  get held(): boolean {
    return this.#state.kind === 'held';
  }

  /** Whether the response is held and its body has ended (whole, cut at the cap, or failed): it holds no connection. */
  get heldToTheEnd(): boolean {
    const state = this.#state;
    return state.kind === 'held' && (state.trailers !== undefined || state.error !== undefined);
  }

  /**
   * The body of a response that was held until it ended (at most {@link MAX_HELD_BODY_BYTES}),
   * also once delivered; `undefined` when it was not held whole (cut at the cap, failed, passed
   * straight through).
   */
  get body(): Buffer | undefined {
    return this.#body;
  }

  /**
   * Calls `callback` once the held response's body has ended (see {@link Attempt.body}), been cut
   * at the cap, or failed: at once if it has. Only for a held response (its judge returned `false`).
   * With a `deadline`, a body that has not ended `deadline.ms` after `deadline.since` (this call
   * when not given) is cut then (at once when that is past), as one past the cap is (its
   * connection closed; delivered, it ends with a {@link ThrottledBodyTimeoutError} after the bytes
   * kept), and `callback` is called. A later call replaces an earlier one's callback and deadline.
   */
  afterBody(callback: () => void, deadline?: BodyDeadline): void {
    if (!this.held || this.heldToTheEnd) {
      callback();
      return;
    }
    this.#clearDeadline();
    this.#afterBody = callback;
    if (deadline !== undefined) {
      const { clock, ms, since } = deadline;
      const left = since === undefined ? ms : since + ms - clock.now();
      if (left <= 0) {
        this.#timedOut(ms);
        return;
      }
      // keepAlive: a request waits on it (its socket keeps the process running anyway).
      this.#deadline = { clock, handle: clock.setTimeout(() => this.#timedOut(ms), left, true) };
    }
  }

  /** The held body did not end in time: cut there, its connection closed, as at the cap. */
  #timedOut(ms: number): void {
    this.#deadline = undefined;
    const state = this.#state;
    if (state.kind !== 'held' || state.error !== undefined || state.trailers !== undefined) return;
    state.error = new ThrottledBodyTimeoutError(this.status, ms);
    this.controller?.abort(state.error);
    this.#bodyEnded();
  }

  #clearDeadline(): void {
    const deadline = this.#deadline;
    this.#deadline = undefined;
    if (deadline !== undefined) deadline.clock.clearTimeout(deadline.handle);
  }

  #bodyEnded(): void {
    this.#clearDeadline();
    const callback = this.#afterBody;
    this.#afterBody = undefined;
    callback?.();
  }

  onRequestStart(controller: Controller, _context: unknown): void {
    this.controller = controller;
    this.#owner.bind(this);
  }

  onRequestUpgrade(_controller: Controller, status: number, headers: HeaderMap, socket: Duplex): void {
    // The socket is the caller's now: nothing to hold or retry.
    this.upgraded = true;
    this.status = status;
    this.headers = headers;
    this.#state = DELIVERED;
    this.#judge.started(this);
    const { handler, controller } = this.#owner;
    this.#owner.finished();
    handler.onRequestUpgrade?.(controller, status, headers, socket);
    this.#state = DONE;
  }

  onResponseStart(controller: Controller, status: number, headers: HeaderMap, statusMessage?: string): void {
    if (status < 200) {
      // Informational (103 Early Hints): passed on, the final answer follows.
      if (this.#state.kind === 'sending') {
        const { handler, controller: callerController } = this.#owner;
        handler.onResponseStart?.(callerController, status, headers, statusMessage);
      }
      return;
    }
    if (this.#state.kind !== 'sending') return;
    this.status = status;
    this.headers = headers;
    this.statusMessage = statusMessage;
    this.#state = { kind: 'held', chunks: [], bytes: 0 };
    if (this.#judge.started(this)) this.deliver();
    // Held: read on even if the caller paused before the response (it is paused again when the
    // caller gets it), so that the connection is free while the retry waits.
    else if (this.held && this.#owner.callerPaused) controller.resume();
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    const state = this.#state;
    if (state.kind === 'delivered') this.#owner.handler.onResponseData?.(this.#owner.controller, chunk);
    else if (state.kind === 'held' && state.error === undefined && state.trailers === undefined) {
      this.#hold(state, controller, chunk);
    }
  }

  /** Keeps a chunk of the held body, up to the cap; past it, cuts the body and closes the connection. */
  #hold(held: Held, controller: Controller, chunk: Buffer): void {
    const cut = keepUpToCap(held, chunk, this.status);
    if (cut === undefined) return;
    held.error = cut;
    controller.abort(held.error);
    this.#bodyEnded();
  }

  onResponseEnd(_controller: Controller, trailers: HeaderMap): void {
    const state = this.#state;
    if (state.kind === 'delivered') this.#end(trailers);
    else if (state.kind === 'held' && state.error === undefined) {
      // A dispatcher below that gives no trailers (a mock's, an interceptor's) ended it all the
      // same: kept as none, or the held answer was never told its end.
      state.trailers = trailers ?? {};
      this.#body = Buffer.concat(state.chunks, state.bytes);
      this.#bodyEnded();
    }
  }

  onResponseError(_controller: Controller | null | undefined, error: Error): void {
    const state = this.#state;
    if (state.kind === 'delivered') this.#fail(error);
    else if (state.kind === 'sending') {
      this.#state = DONE;
      this.#judge.failed(this, error);
    } else if (state.kind === 'held') {
      state.error ??= error;
      this.#bodyEnded();
    }
  }

  /**
   * The caller paused or resumed its response: passed on unless the response is held (it is read
   * on, and paused when the caller gets it if the caller is paused then) or dropped.
   */
  pause(): void {
    if (this.#passesControl()) this.controller?.pause();
  }

  resume(): void {
    if (this.#passesControl()) this.controller?.resume();
  }

  #passesControl(): boolean {
    return this.#state.kind === 'sending' || this.#state.kind === 'delivered';
  }

  /** Gives the held response to the caller: its start, what arrived meanwhile, then the rest. */
  deliver(): void {
    const held = this.#state;
    if (held.kind !== 'held') return;
    this.#clearDeadline();
    this.#state = DELIVERED;
    const { handler, controller } = this.#owner;
    // The caller may abort from any callback: stop there. An abort reaches the attempt's own
    // controller, which tells the caller onResponseError while its body comes; once that body has
    // ended (held whole) it is told here, as undici tells it (before, data and end came after).
    const stopped = (): boolean => {
      if (!this.delivered) return true;
      const reason = controller.reason;
      if (reason === undefined || reason === null) return false;
      // As it is: the caller's own reason (a string too), as undici gives it.
      this.#fail(reason as Error);
      return true;
    };
    try {
      handler.onResponseStart?.(controller, this.status, this.headers, this.statusMessage);
      for (const chunk of held.chunks) {
        if (stopped()) return;
        handler.onResponseData?.(controller, chunk);
      }
      if (stopped()) return;
      // The held body's error on a later turn: fetch (Node's and undici's) loses an error that
      // comes in the turn of the response's start, and its body then never ends.
      const error = held.error;
      if (error !== undefined) this.#owner.later(() => this.delivered && this.#fail(error));
      else if (held.trailers !== undefined) this.#end(held.trailers);
      else if (this.#owner.callerPaused) this.controller?.pause();
    } catch (error) {
      // A throwing handler fails its request, as undici's core does.
      if (this.delivered) {
        this.controller?.abort(error as Error);
        this.#fail(error as Error);
      }
    }
  }

  /**
   * Drops the held response without the caller seeing it, once its retry has its units and its
   * body was read to its end (or for {@link HELD_BODY_DRAIN_MS}). A body still coming then (a
   * body that trickles without end: a proxy's page, a gateway's stream; one dropped as its
   * request ends otherwise) is aborted, its connection closed: read on and thrown away, it was
   * read for ever, holding its connection (with `connections: 1` the retry never went out); and a
   * request body not sent whole must not be read on by this attempt, as the next one needs it.
   */
  discard(): void {
    if (!this.held) return;
    this.#clearDeadline();
    const ended = this.heldToTheEnd;
    this.#state = DONE;
    if (ended) return;
    this.controller?.abort(
      new AdaptiveRateLimitError(
        'ERR_ATTEMPT_DROPPED',
        'adaptive-rate-limit: throttled attempt dropped for a retry',
      ),
    );
  }

  #end(trailers: HeaderMap): void {
    this.#owner.finished();
    // If the caller's onResponseEnd throws (undici's RetryHandler does, to retry), the state stays
    // 'delivered': undici's core turns the throw into onResponseError, which is passed on.
    this.#owner.handler.onResponseEnd?.(this.#owner.controller, trailers);
    this.#state = DONE;
    this.#owner.released(this);
  }

  #fail(error: Error): void {
    this.#state = DONE;
    this.#owner.finished();
    try {
      this.#owner.handler.onResponseError?.(this.#owner.controller, error);
    } finally {
      // Also when the caller's callback throws (its throw goes on to undici, as without us).
      this.#owner.released(this);
    }
  }
}
