import type { Dispatcher } from 'undici';
import { QuotaExhaustedError } from '../errors.js';
import { type LlmEstimate, type LlmMeter, MAX_JSON_BYTES, refusedCall, UsageScanner } from './llm.js';
import { correctAtEnd } from './llm-answers.js';
import { decodedBody, isEncoded, MAX_DECODED_BYTES } from './llm-decode.js';
import { withRawHeaders } from './raw-headers.js';
import type { RejectionMode } from './refusal.js';
import type { Route } from './runtime.js';

type Handler = Dispatcher.DispatchHandler;

/**
 * The caller's handler behind a tap (the interceptor, an LLM API's limiter): a success's `usage`
 * is read from its bytes as they pass to the caller (never held) and corrects the estimate at its
 * end; a 429 for a spend cap or a used-up quota (told by its body, which the
 * interceptor holds before a 429 reaches the caller: `refusalBody`) reaches the caller with
 * `x-should-retry: false`, or as `QuotaExhaustedError` with `rejection: 'error'`; a 429 for a call
 * larger than a whole budget (OpenAI's "Request too large") or for a limit per day with
 * `x-should-retry: false` in both. While an answer whose `usage` is read passes (a stream may run
 * for minutes), `hold` keeps the route's limiter from being dropped (as idle, or to make room for
 * another partition), so that the correction charges the limiter the next call draws from.
 */
export function usageTap(
  handler: Handler,
  route: Route,
  estimate: LlmEstimate,
  rejection: RejectionMode,
  refusalBody: () => unknown,
  hold: () => () => void,
): Handler {
  let scanner: UsageScanner | undefined;
  /** Ends the hold taken while an answer whose `usage` is read passes (see `hold`). */
  let release: (() => void) | undefined;
  const letGo = () => {
    const end = release;
    release = undefined;
    end?.();
  };
  /**
   * A compressed answer's bytes (see `decodedBody`), kept up to {@link MAX_JSON_BYTES} and read
   * at its end; `undefined`: the answer is read as it passes, or was longer.
   */
  let encoded: { readonly encoding: string | string[]; chunks: Uint8Array[]; bytes: number } | undefined;
  /** A 4xx by which the API refused the call: its estimate was given back (see `refusedCall`). */
  let refusedCallAnswer = false;
  /** The quota error the caller gets in place of the 429 (`rejection: 'error'`), until it has it. */
  let refused: Error | undefined;
  const fail = (controller: Parameters<NonNullable<Handler['onResponseError']>>[0], error: Error) => {
    refused = undefined;
    return handler.onResponseError?.(controller, error);
  };
  return {
    onRequestStart: (controller, context) => handler.onRequestStart?.(controller, context),
    onRequestUpgrade: (controller, status, headers, socket) =>
      handler.onRequestUpgrade?.(controller, status, headers, socket),
    onResponseStart: (controller, status, headers, message) => {
      if (status === 429) {
        const refusal = (route.llm as LlmMeter).refusal(refusalBody());
        // A limit per day's 429 that reaches the caller: told not to retry too (see `llmAnswer`).
        if (refusal.kind !== 'rate' || refusal.daily === true) {
          if (refusal.kind === 'quota' && rejection === 'error') {
            // A held 429 has been read whole (aborting it ends nothing): its end is the error.
            refused = new QuotaExhaustedError(route.name, refusal.reason, status);
            controller.abort(refused);
            return;
          }
          // The caller reads the header from the headers object (undici 7) or from the
          // controller's raw headers (undici 8's fetch, and Node's own through undici 8's global
          // dispatcher): both say it.
          const told = { ...headers, 'x-should-retry': 'false' };
          return handler.onResponseStart?.(withRawHeaders(controller, told), status, told, message);
        }
      } else if ((status >= 200 && status < 300) || refusedCall(status)) {
        refusedCallAnswer = refusedCall(status);
        const type = headers['content-type'];
        const text = Array.isArray(type) ? type[0] : type;
        if (UsageScanner.reads(text)) {
          scanner = new UsageScanner(text as string);
          const encoding = headers['content-encoding'];
          if (encoding !== undefined && isEncoded(encoding)) encoded = { encoding, chunks: [], bytes: 0 };
          release ??= hold();
        }
      }
      return handler.onResponseStart?.(controller, status, headers, message);
    },
    onResponseData: (controller, chunk) => {
      if (refused !== undefined) return;
      if (encoded !== undefined) keep(chunk);
      else scanner?.push(chunk);
      return handler.onResponseData?.(controller, chunk);
    },
    onResponseEnd: (controller, trailers) => {
      if (refused !== undefined) return fail(controller, refused);
      if (scanner !== undefined) {
        const ended = scanner;
        scanner = undefined;
        if (encoded !== undefined) {
          const decoded =
            encoded.chunks.length === 0
              ? undefined
              : decodedBody(joined(encoded.chunks), encoded.encoding, MAX_DECODED_BYTES);
          encoded = undefined;
          if (decoded !== undefined) ended.push(decoded);
        }
        // A throw here would skip the caller's end (the call would never end): reported instead.
        correctAtEnd(route, estimate, ended.end(), refusedCallAnswer);
        letGo();
      }
      return handler.onResponseEnd?.(controller, trailers);
    },
    onResponseError: (controller, error) => {
      letGo();
      return fail(controller, refused ?? error);
    },
  };

  function keep(chunk: Uint8Array): void {
    if (encoded === undefined) return;
    encoded.bytes += chunk.byteLength;
    // Longer than a JSON answer is read: no usage read (the estimate stays).
    if (encoded.bytes > MAX_JSON_BYTES) encoded.chunks.length = 0;
    else encoded.chunks.push(chunk);
  }
}

function joined(chunks: readonly Uint8Array[]): Uint8Array {
  return chunks.length === 1 ? (chunks[0] as Uint8Array) : Buffer.concat(chunks);
}
