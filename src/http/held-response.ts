import { ThrottledBodyTimeoutError, ThrottledBodyTooLongError } from '../errors.js';
import { type BodyDeadline, HELD_BODY_DRAIN_MS, keepUpToCap, MAX_HELD_BODY_BYTES } from './attempt.js';

/** How each held response's read is waited for ({@link heldBodyEnded}). */
const drains = new WeakMap<Response, (deadline: BodyDeadline, stopWhen?: StopWhen) => Promise<void>>();

/** Registers `stop`, which ends a wait early; returns what forgets it. */
type StopWhen = (stop: () => void) => () => void;

/**
 * Resolves once the body of `held` (a response {@link holdResponse} made) has been read to its end,
 * cut at the cap, or failed: what the retry waits for before it drops `held`, as a body cancelled
 * while it comes closes its connection (see {@link HELD_BODY_DRAIN_MS}). A body that has not
 * ended `deadline.ms` after this call is cut then, its connection closed (if the caller gets
 * `held` after all, its body ends with a {@link ThrottledBodyTimeoutError} after the bytes kept).
 * At once for any other response. `stopWhen` may end the wait sooner (the wrapper's close): the
 * body is then read on, as while it was held, with no deadline.
 */
export function heldBodyEnded(held: Response, deadline: BodyDeadline, stopWhen?: StopWhen): Promise<void> {
  return drains.get(held)?.(deadline, stopWhen) ?? Promise.resolve();
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
  drains.set(held, ({ clock, ms }, stopWhen) => {
    if (end !== undefined) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let forget: (() => void) | undefined;
      // keepAlive: a request waits on it (its socket keeps the process running anyway).
      const timer = clock.setTimeout(
        () => {
          if (end !== undefined) return;
          const cut = new ThrottledBodyTimeoutError(response.status, ms);
          end = { error: cut };
          reader.cancel(cut).catch(() => {});
          notify();
        },
        ms,
        true,
      );
      ended = () => {
        ended = undefined;
        forget?.();
        clock.clearTimeout(timer);
        resolve();
      };
      forget = stopWhen?.(() => ended?.());
    });
  });
  return held;
}
