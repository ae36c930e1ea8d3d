import type { Clock } from '../clock.js';
import { QuotaExhaustedError, ThrottledBodyTimeoutError, ThrottledBodyTooLongError } from '../errors.js';
import { kChargeUncounted } from '../internal.js';
import type { Costs } from '../limiter/budgets.js';
import { keepUpToCap } from './attempt.js';
import { warnCorrectionThrew } from './handler-threw.js';
import type { LlmEstimate, LlmMeter, Usage } from './llm.js';
import { REFUSAL_READ_TIMEOUT_MS, refusalJson, refusedCall, UsageScanner } from './llm.js';
import type { RejectionMode } from './refusal.js';
import type { Route } from './runtime.js';

/** A 429 of an LLM API with its body read (JSON parsed, or `undefined`): what `classify` needs. */
const refusalBodies = new WeakMap<Response, unknown>();

/**
 * Reads a 429's body (up to 64 KiB) so that its error `type` / `code` can be told (the budget
 * that ran out, a spend cap), and gives a response with the same status, headers and bytes. A
 * longer body is cut there and the rest cancelled (its connection closed), as the interceptor
 * holds a 429: the response's body then ends with a {@link ThrottledBodyTooLongError} after the
 * bytes kept, and the body is not read for a reason. So is a body that has not ended
 * {@link REFUSAL_READ_TIMEOUT_MS} after the read began, on `clock` (one that stalls after the
 * headers): cut then, its connection closed, and it ends with a {@link ThrottledBodyTimeoutError}.
 * A body whose connection fails while it is read (a reset) ends the same way with that error, as
 * the interceptor's held 429 does: the 429 is judged on its status and headers (an abort of the
 * call during the read is the attempt loop's to end the call with).
 */
export async function readRefusal(response: Response, clock: Clock): Promise<Response> {
  const held = { chunks: [] as Uint8Array[], bytes: 0 };
  let cut: unknown;
  // A body read already (by a fetch that logs its 429s, say) is judged as none.
  const source = response.bodyUsed || response.body?.locked === true ? null : response.body;
  const reader = source?.getReader();
  // The time is up: the pending read ends (`done`) as the cancel closes the stream.
  const timer =
    reader === undefined
      ? undefined
      : clock.setTimeout(
          () => {
            cut ??= new ThrottledBodyTimeoutError(response.status, REFUSAL_READ_TIMEOUT_MS);
            reader.cancel(cut).catch(() => {});
          },
          REFUSAL_READ_TIMEOUT_MS,
          true,
        );
  try {
    while (reader !== undefined && cut === undefined) {
      let read: ReadableStreamReadResult<Uint8Array>;
      try {
        read = await reader.read();
      } catch (error) {
        cut ??= error;
        break;
      }
      const { done, value } = read;
      if (done) break;
      cut = keepUpToCap(held, value, response.status);
      if (cut !== undefined) {
        reader.cancel(cut).catch(() => {});
        break;
      }
    }
  } finally {
    if (timer !== undefined) clock.clearTimeout(timer);
  }
  const { bytes } = held;
  const kept = new Uint8Array(bytes);
  let at = 0;
  for (const chunk of held.chunks) {
    kept.set(chunk, at);
    at += chunk.byteLength;
  }
  const error = cut;
  const body =
    error === undefined
      ? bytes === 0
        ? null
        : kept
      : new ReadableStream<Uint8Array>({
          start(controller) {
            if (bytes > 0) controller.enqueue(kept);
          },
          pull(controller) {
            controller.error(error);
          },
        });
  const copy = new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
  refusalBodies.set(copy, error === undefined ? refusalJson(kept) : undefined);
  return copy;
}

/** The parsed body of a 429 read by {@link readRefusal}. */
export function refusalBody(response: Response): unknown {
  return refusalBodies.get(response);
}

/**
 * `held`, the copy of `response` that waits while its retry does (`holdResponse`), with the parsed
 * body of the 429 it copies: the caller's answer is judged on it when the retry is refused.
 */
export function heldRefusal(response: Response, held: Response): Response {
  if (refusalBodies.has(response)) refusalBodies.set(held, refusalBodies.get(response));
  return held;
}

/**
 * The answer the caller gets from an LLM API's limiter: a spend cap or used-up quota ends with
 * `QuotaExhaustedError` (`rejection: 'error'`) or the API's 429 with `x-should-retry: false`
 * (`'response'`: the SDKs do not retry it); a 429 for a call larger than a whole budget (OpenAI's
 * "Request too large") is the API's 429 with `x-should-retry: false` in both modes, as a refused
 * call's 4xx is the API's answer, and so is a 429 for a limit per day that reaches the caller (its
 * wait passed `maxWait`, or it gave none: an SDK's retry within seconds would meet the same limit,
 * or the limiter's pause); a success's `usage` corrects the estimate as its body passes. While it
 * passes (a stream may run for minutes), `hold` keeps the route's limiter from being dropped (as
 * idle, or to make room for another partition), so that the correction charges the limiter the
 * next call draws from: until the body ends, fails or is cancelled, or is collected unread.
 */
export function llmAnswer(
  response: Response,
  route: Route,
  estimate: LlmEstimate,
  rejection: RejectionMode,
  hold: () => () => void,
): Response {
  const llm = route.llm as LlmMeter;
  if (response.status === 429) {
    const refusal = llm.refusal(refusalBody(response));
    if (refusal.kind === 'rate' && refusal.daily !== true) return response;
    if (refusal.kind === 'quota' && rejection === 'error')
      throw new QuotaExhaustedError(route.name, refusal.reason, response.status, response);
    const headers = new Headers(response.headers);
    headers.set('x-should-retry', 'false');
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
  }
  const refused = refusedCall(response.status);
  if (!refused && (response.status < 200 || response.status >= 300)) return response;
  if (response.body === null) return response;
  const type = response.headers.get('content-type') ?? undefined;
  if (!UsageScanner.reads(type)) return response;
  const scanner = new UsageScanner(type as string);
  const held: Held = { release: hold() };
  const letGo = () => endHold(held);
  // `cancel` (the caller cancelled the body, or its source failed) is in Node 20's streams, not
  // yet in TypeScript's `Transformer`.
  const tap: Transformer<Uint8Array, Uint8Array> & { cancel(reason: unknown): void } = {
    transform(chunk, controller) {
      controller.enqueue(chunk);
      scanner.push(chunk);
    },
    flush() {
      // The caller reads the whole answer whatever the correction does.
      correctAtEnd(route, estimate, scanner.end(), refused);
      letGo();
    },
    // No usage to read.
    cancel: letGo,
  };
  const tapped = response.body.pipeThrough(new TransformStream(tap));
  const answer = new Response(tapped, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
  // What a wrapped answer would lose: where it came from.
  Object.defineProperty(answer, 'url', { value: response.url });
  Object.defineProperty(answer, 'redirected', { value: response.redirected });
  // On the body, not the answer: a caller that keeps only the body's reader (an SDK's stream)
  // lets the answer go while the stream runs.
  unreadAnswers.register(tapped, held);
  return answer;
}

/** A hold on a route's limiter while an answer passes, ended once. */
interface Held {
  release: (() => void) | undefined;
}

function endHold(held: Held): void {
  const end = held.release;
  held.release = undefined;
  end?.();
}

/** An answer's body dropped unread ends its hold (`held` does not reach the body). */
const unreadAnswers = new FinalizationRegistry<Held>(endHold);

/**
 * {@link correct}, at an answer's end: a throw (a listener's, a custom controller's) is reported,
 * never thrown, so that the caller is told the end whatever the correction does.
 */
export function correctAtEnd(
  route: Route,
  estimate: LlmEstimate,
  usage: Usage | undefined,
  refused: boolean,
): void {
  try {
    correct(route, estimate, usage, refused);
  } catch (error) {
    warnCorrectionThrew(error, route.name);
  }
}

/**
 * Charges the difference between what the answer's `usage` says and the estimate; for a refused
 * call (`refusedCall`), whose estimate was given back when its answer came, what `usage` says.
 */
function correct(route: Route, estimate: LlmEstimate, usage: Usage | undefined, refused = false): void {
  const used = (route.llm as LlmMeter).used(usage, estimate, refused);
  if (used === undefined || route.adaptive === undefined) return;
  const delta: Record<string, number> = {};
  for (const [budget, units] of Object.entries(used)) {
    const charged = refused ? 0 : ((estimate.costs as Costs)[budget] ?? 0);
    // A usage past the largest number (two counts' sum) cannot be charged: the estimate stands.
    if (units !== charged && Number.isFinite(units - charged)) delta[budget] = units - charged;
  }
  if (Object.keys(delta).length === 0) return;
  // A refused call's estimate was given back as one the API never counted: so is its usage, which
  // the answer's `remaining` need not hold. An admitted call's is in it (see `AnnouncedBucket`).
  if (refused) route.adaptive[kChargeUncounted](delta);
  else route.adaptive.charge(delta);
}
