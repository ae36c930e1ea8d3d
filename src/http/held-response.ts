import { ThrottledBodyTimeoutError, ThrottledBodyTooLongError } from '../errors.js';
import { type BodyDeadline, HELD_BODY_DRAIN_MS, keepUpToCap, MAX_HELD_BODY_BYTES } from './attempt.js';

/**
 * How each held response's read is waited for ({@link heldBodyEnded}, {@link heldBodyRead}):
 * `undefined` once it has ended. `cut`: whether a body still coming at the deadline is cut.
 */
const drains = new WeakMap<
  Response,
  (deadline: BodyDeadline, stopWhen: StopWhen | undefined, cut: boolean) => Promise<void> | undefined
>();

/** Registers `stop`, which ends a wait early; returns what forgets it. */
type StopWhen = (stop: () => void) => () => void;

/**
 * Resolves once the body of `held` (a response {@link holdResponse} made) has been read to its end,
 * cut at the cap, or failed: what the retry waits for before it drops `held`, as a body cancelled
 * while it comes closes its connection (see {@link HELD_BODY_DRAIN_MS}). A body that has not
 * ended `deadline.ms` after this call is cut then, its connection closed (if the caller gets
 * `held` after all, its body ends with a {@link ThrottledBodyTimeoutError} after the bytes kept).
 * At once for any other response. `stopWhen` may end the wait sooner (the wrapper's close): the
 * body is then read on, as while it was held, with no deadline. `deadline.since` (default: this
 * call) is when the time counts from: a body still coming past it is cut at once.
 */
export function heldBodyEnded(held: Response, deadline: BodyDeadline, stopWhen?: StopWhen): Promise<void> {
  return drains.get(held)?.(deadline, stopWhen, true) ?? Promise.resolve();
}

/**
 * As {@link heldBodyEnded}, but cuts nothing: resolves once the body of `held` has ended, or
 * `deadline.ms` after this call, or at `stopWhen`, the body read on after (a retry's read before
 * its `maxConcurrent` slot: see `AttemptPlan.heldBodyRead`). `undefined` when it has ended, or for
 * a response {@link holdResponse} did not make.
 */
export function heldBodyRead(
  held: Response,
  deadline: BodyDeadline,
  stopWhen?: StopWhen,
): Promise<void> | undefined {
  return drains.get(held)?.(deadline, stopWhen, false);
}

/**
 * A throttled fetch `Response` held while its retry waits, in the fetch wrapper. Its body is read
 * into memory at once (up to {@link MAX_HELD_BODY_BYTES}; a longer one is cut there and the rest
 * cancelled, which closes its connection), so that the response holds no connection while the
 * retry waits for a slot or units: an unread body would keep its socket, and a request waiting
 * for a socket may hold the slot the retry waits for.
 *
 * Returns the response the caller gets if no retry is sent: the same status, headers, `url` and
 * `redirected`, with the kept bytes as its body (ending with a {@link ThrottledBodyTooLongError}
 * when the body was cut). Cancelling its body drops what was kept.
 */
export function holdResponse(response: Response): Response {
  const source = response.body;
  // No body, one that is not a web stream (a polyfill's Node stream), or one read already (by a
  // fetch that logs its 429s, say: it holds no connection): returned as it is.
  if (source == null || typeof source.getReader !== 'function' || source.locked || response.bodyUsed)
    return response;
  const reader = source.getReader();
  const kept = { chunks: [] as Uint8Array[], bytes: 0 };
  const { chunks } = kept;
  let end: { error?: unknown } | undefined;
  let wake: (() => void) | undefined;
  let dropped = false;
  /** Told once the read has ended (see {@link heldBodyEnded}). */
  let ended: (() => void) | undefined;
  const notify = () => {
    wake?.();
    wake = undefined;
    if (end !== undefined) ended?.();
  };

  void (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || dropped) break;
        const cut = keepUpToCap(kept, value, response.status);
        if (cut !== undefined) {
          end = { error: cut };
          reader.cancel(cut).catch(() => {});
          break;
        }
        notify();
      }
      end ??= {};
    } catch (error) {
      end = { error };
    }
    notify();
  })();

  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      while (chunks.length === 0 && end === undefined) {
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
      }
      const chunk = chunks.shift();
      if (chunk !== undefined) controller.enqueue(chunk);
      else if (end?.error !== undefined) controller.error(end.error);
      else controller.close();
    },
    cancel(reason) {
      dropped = true;
      chunks.length = 0;
      if (end === undefined) reader.cancel(reason).catch(() => {});
    },
  });
  const held = new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
  Object.defineProperties(held, {
    url: { value: response.url },
    redirected: { value: response.redirected },
  });
  drains.set(held, ({ clock, ms, since }, stopWhen, cut) => {
    if (end !== undefined) return undefined;
    return new Promise<void>((resolve) => {
      let forget: (() => void) | undefined;
      let timer: unknown;
      const done = () => {
        if (ended === done) ended = undefined;
        forget?.();
        clock.clearTimeout(timer);
        resolve();
      };
      const timeUp = () => {
        if (end !== undefined || !cut) return done();
        const error = new ThrottledBodyTimeoutError(response.status, ms);
        end = { error };
        reader.cancel(error).catch(() => {});
        notify(); // calls `ended`: done
      };
      ended = done;
      const left = since === undefined ? ms : since + ms - clock.now();
      if (left <= 0) return timeUp();
      // keepAlive: a request waits on it (its socket keeps the process running anyway).
      timer = clock.setTimeout(timeUp, left, true);
      forget = stopWhen?.(done);
    });
  });
  return held;
}
