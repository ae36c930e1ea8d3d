import type { Dispatcher } from 'undici';
import { QuotaExhaustedError } from '../errors.js';
import { headerLookup } from '../headers.js';
import { type LlmEstimate, type LlmMeter, UsageScanner } from './llm.js';
import { correct } from './llm-answers.js';
import type { RejectionMode } from './refusal.js';
import type { Route } from './runtime.js';

type Handler = Dispatcher.DispatchHandler;

/**
 * The caller's handler behind a tap (the interceptor, an LLM API's limiter): a success's `usage`
 * is read from its bytes as they pass to the caller (never held) and corrects the estimate at its
 * end; a spend-cap 429 (told by its headers: the interceptor does not read a 429's body) reaches
 * the caller with `x-should-retry: false`, or as `QuotaExhaustedError` with `rejection: 'error'`.
 */
export function usageTap(
  handler: Handler,
  route: Route,
  estimate: LlmEstimate,
  rejection: RejectionMode,
): Handler {
  let scanner: UsageScanner | undefined;
  return {
    onRequestStart: (controller, context) => handler.onRequestStart?.(controller, context),
    onRequestUpgrade: (controller, status, headers, socket) =>
      handler.onRequestUpgrade?.(controller, status, headers, socket),
    onResponseStart: (controller, status, headers, message) => {
      if (status === 429) {
        const refusal = (route.llm as LlmMeter).refusal(undefined, headerLookup(headers));
        if (refusal.kind === 'quota') {
          if (rejection === 'error') {
            controller.abort(new QuotaExhaustedError(route.name, refusal.reason, status));
            return;
          }
          return handler.onResponseStart?.(
            controller,
            status,
            { ...headers, 'x-should-retry': 'false' },
            message,
          );
        }
      } else if (status >= 200 && status < 300) {
        const type = headers['content-type'];
        const text = Array.isArray(type) ? type[0] : type;
        if (UsageScanner.reads(text)) scanner = new UsageScanner(text as string);
      }
      return handler.onResponseStart?.(controller, status, headers, message);
    },
    onResponseData: (controller, chunk) => {
      scanner?.push(chunk);
      return handler.onResponseData?.(controller, chunk);
    },
    onResponseEnd: (controller, trailers) => {
      if (scanner !== undefined) {
        const usage = scanner.end();
        scanner = undefined;
        correct(route, estimate, usage);
      }
      return handler.onResponseEnd?.(controller, trailers);
    },
    onResponseError: (controller, error) => handler.onResponseError?.(controller, error),
  };
}
