import { ThrottledBodyTooLongError } from '../errors.js';
import { keepUpToCap, MAX_HELD_BODY_BYTES } from './attempt.js';

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
  const notify = () => {
    wake?.();
    wake = undefined;
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
  return held;
}
