import type { Dispatcher } from 'undici';
import { RateLimitRejectedError } from '../errors.js';
import { withRawHeaders } from './raw-headers.js';

/**
 * How the HTTP adapters answer a request the limiter refuses (`RateLimitRejectedError`: its wait
 * would pass `maxWait`, the queue is full, the limiter was closed):
 * - `'error'`: the request fails with the error (through Node's `fetch`, as the `cause` of its
 *   `TypeError`);
 * - `'response'`: the caller gets a local `429 Too Many Requests` made by the library (see
 *   {@link refusalOf}), which SDKs back off from, where they retry a transport error at once.
 */
export type RejectionMode = 'error' | 'response';

/** The header that marks a response the library made itself: `rejected;reason=max-wait`. */
export const REFUSAL_HEADER = 'x-adaptive-rate-limit';

/** A local answer to a refused request. */
export interface Refusal {
  readonly status: 429;
  readonly statusText: 'Too Many Requests';
  /** Lower-case names. */
  readonly headers: Readonly<Record<string, string>>;
  /** JSON: `{"message","error":{"type":"rate_limit_rejected","code","reason","limiter","message"}}`. */
  readonly body: string;
}

/**
 * The local 429 for `error` when `mode` is `'response'` and `error` is a refusal of the limiter;
 * `undefined` otherwise (the error then stands). Its headers:
 * - `retry-after`: the wait the limiter predicted, in whole seconds rounded up, at least 1 (1 when
 *   it predicted none: a closed limiter);
 * - `x-adaptive-rate-limit: rejected;reason=<reason>` (a Structured Field item: a token with a
 *   token parameter), so that code and logs can tell it from the server's own 429;
 * - `content-type: application/json`, with a body SDKs read an error message from (openai and
 *   Anthropic show `error.message`, Octokit the top-level `message`).
 */
function refusalOf(error: unknown, mode: RejectionMode): Refusal | undefined {
  if (mode !== 'response' || !(error instanceof RateLimitRejectedError)) return undefined;
  const seconds = Math.max(1, Math.ceil((error.retryAfterMs ?? 0) / 1000));
  const body = JSON.stringify({
    message: error.message,
    error: {
      type: 'rate_limit_rejected',
      code: error.code,
      reason: error.reason,
      limiter: error.limiter,
      message: error.message,
    },
  });
  return {
    status: 429,
    statusText: 'Too Many Requests',
    headers: {
      'content-type': 'application/json',
      'content-length': String(new TextEncoder().encode(body).byteLength),
      'retry-after': String(seconds),
      [REFUSAL_HEADER]: `rejected;reason=${error.reason}`,
    },
    body,
  };
}

/** Whether an answer to `method` has no body (RFC 9110 §9.3.2): a HEAD's shows a GET's headers only. */
function bodiless(method: string | undefined): boolean {
  return method?.toUpperCase() === 'HEAD';
}

/**
 * The fetch wrapper's hook: the local 429 as a `Response`, or `undefined` to rethrow `error`. To
 * a HEAD, without its body, as every answer to a HEAD.
 */
export function refusalResponse(error: unknown, mode: RejectionMode, method?: string): Response | undefined {
  const refusal = refusalOf(error, mode);
  if (refusal === undefined) return undefined;
  const { status, statusText, headers, body } = refusal;
  return new Response(bodiless(method) ? null : body, { status, statusText, headers });
}

/**
 * The interceptor's hook: gives the local 429 to an undici handler (start, body, end; to a HEAD,
 * no body) and returns `true`, or returns `false` to fail the request with `error`. The handler
 * has had `onRequestStart` with `controller`.
 */
export function answerRefusal(
  error: unknown,
  mode: RejectionMode,
  handler: Dispatcher.DispatchHandler,
  controller: Dispatcher.DispatchController,
  method?: string,
): boolean {
  const refusal = refusalOf(error, mode);
  if (refusal === undefined) return false;
  // The caller's controller would show the raw headers of the last attempt (a held 429): the local
  // answer shows its own, which undici 8's fetch reads in place of the headers object.
  controller = withRawHeaders(controller, refusal.headers, 'none');
  try {
    handler.onResponseStart?.(controller, refusal.status, { ...refusal.headers }, refusal.statusText);
    if (!controller.aborted && !bodiless(method)) {
      handler.onResponseData?.(controller, Buffer.from(refusal.body, 'utf8'));
    }
    // An abort from a callback ends the request with its reason, as undici's core does.
    if (controller.aborted) handler.onResponseError?.(controller, controller.reason ?? new Error('aborted'));
    else handler.onResponseEnd?.(controller, {});
  } catch (thrown) {
    // A throwing handler fails its request, as undici's core does.
    handler.onResponseError?.(controller, thrown instanceof Error ? thrown : new Error(String(thrown)));
  }
  return true;
}
