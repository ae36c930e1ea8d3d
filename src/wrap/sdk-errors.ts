import { type HeaderLookup, headerLookup, type ResponseHeaders } from '../headers.js';
import { neverSent } from '../http/classify.js';
import { LlmMeter, type LlmRefusal, rateLimitOutcome, refusedCall } from '../http/llm.js';
import { REFUSAL_HEADER } from '../http/refusal.js';
import { retryAfterFromHeaders } from '../http/retry-after.js';
import type { Outcome } from '../limiter/types.js';

/**
 * Error codes the AWS SDK (smithy's `service-error-classification`) treats as throttling, whatever
 * the status: many services answer `ThrottlingException` with a 400, S3 answers `SlowDown` with a
 * 503. An AWS SDK error carries its code as `name` (and often `Code`).
 */
export const AWS_THROTTLING_CODES: ReadonlySet<string> = new Set([
  'BandwidthLimitExceeded',
  'EC2ThrottledException',
  'LimitExceededException',
  'PriorRequestNotComplete',
  'ProvisionedThroughputExceededException',
  'RequestLimitExceeded',
  'RequestThrottled',
  'RequestThrottledException',
  'SlowDown',
  'ThrottledException',
  'Throttling',
  'ThrottlingException',
  'TooManyRequestsException',
  'TransactionInProgressException',
]);

type Bag = Record<string, unknown>;

const isBag = (value: unknown): value is Bag =>
  (typeof value === 'object' || typeof value === 'function') && value !== null;

/**
 * An HTTP status: an integer 100-599, or its text of exactly three digits (`'429'`, as a
 * deserialized error or some SDKs carry it); anything else (`'429abc'`, `' 429'`, `'4.29e2'`) is none.
 */
function httpStatus(value: unknown): number | undefined {
  const status = typeof value === 'string' && /^[1-5]\d\d$/.test(value) ? Number(value) : value;
  return typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 599
    ? status
    : undefined;
}

/**
 * The HTTP status an SDK's error carries, or `undefined`. Read in this order, the first valid one
 * wins: `status` (openai, Anthropic, Octokit), `statusCode`, `response.status` (ky, Octokit,
 * axios), `response.statusCode` (got), `$metadata.httpStatusCode` (AWS SDK v3),
 * `$response.statusCode` (AWS SDK v3). Each is a number or its text (`'429'`).
 */
export function statusOfError(error: unknown): number | undefined {
  if (!isBag(error)) return undefined;
  const response = isBag(error.response) ? error.response : undefined;
  const metadata = isBag(error.$metadata) ? error.$metadata : undefined;
  const raw = isBag(error.$response) ? error.$response : undefined;
  return (
    httpStatus(error.status) ??
    httpStatus(error.statusCode) ??
    httpStatus(response?.status) ??
    httpStatus(response?.statusCode) ??
    httpStatus(metadata?.httpStatusCode) ??
    httpStatus(raw?.statusCode)
  );
}

/**
 * The response headers an SDK's error carries, in any shape `headerLookup` reads, or `undefined`:
 * `headers` (openai and Anthropic: a `Headers`; others: a record, a `Map`, an array of `[name,
 * value]` pairs), `response.headers` (ky: a `Headers`; got and Octokit: a record; axios: an
 * `AxiosHeaders`, read through its `get`), `$response.headers` (AWS SDK v3: a record). Whatever
 * the shape, its names are read case-insensitively. The first of them that holds a header; an
 * empty one (`headers: {}` beside a `response.headers` that has the answer's) is passed over.
 */
export function headersOfError(error: unknown): ResponseHeaders {
  if (!isBag(error)) return undefined;
  let empty: ResponseHeaders;
  for (const holder of [error, error.response, error.$response]) {
    // Read once: a getter (an SDK's lazy `headers`) may build them anew at each read.
    const held: unknown = isBag(holder) ? holder.headers : undefined;
    if (!isBag(held)) continue;
    const headers = held as ResponseHeaders;
    if (!isEmptyHeaders(headers)) return headers;
    empty ??= headers;
  }
  return empty;
}

/** An error's headers as found ({@link headersOfError}) and their lookup, or what finding them threw. */
type ErrorHeaders =
  | { readonly headers: ResponseHeaders; readonly lookup: HeaderLookup | undefined }
  | { readonly thrown: unknown };

/**
 * The error `wrap` is classifying, and its headers once found: set by {@link readingHeadersOnce}
 * around its `classifyError` and `headers` profile, both synchronous, so that the default
 * `classifyThrown` (or a caller's `classifyError` falling back to it) and the profile find them
 * once (an SDK's lazy `headers` getter runs once, a get-only holder is listed once).
 */
let classifying: { readonly error: object; found?: ErrorHeaders } | undefined;

/**
 * Runs `run` (synchronous) with `error`'s headers found at most once, by whichever reader first
 * asks ({@link headersAndLookup}), and then lent to the others; a throw is found once too, and
 * thrown again to each. Only for this run: the same error thrown again is read anew (a getter may
 * answer otherwise).
 */
export function readingHeadersOnce<T>(error: unknown, run: () => T): T {
  if (!isBag(error)) return run();
  const outer = classifying;
  classifying = { error };
  try {
    return run();
  } finally {
    classifying = outer;
  }
}

/**
 * `error`'s headers ({@link headersOfError}) and their lookup (`undefined` without headers), found
 * once for the error {@link readingHeadersOnce} runs over.
 */
export function headersAndLookup(error: unknown): {
  headers: ResponseHeaders;
  lookup: HeaderLookup | undefined;
} {
  const memo = classifying !== undefined && classifying.error === error ? classifying : undefined;
  let found = memo?.found;
  if (found === undefined) {
    try {
      const headers = headersOfError(error);
      found = { headers, lookup: headers === undefined ? undefined : headerLookup(headers) };
    } catch (thrown) {
      found = { thrown };
    }
    if (memo !== undefined) memo.found = found;
  }
  if ('thrown' in found) throw found.thrown;
  return found;
}

/**
 * Whether a headers holder has no field: an empty record, array or `Map`, or a `Headers` whose
 * `keys()` gives none (an iterator or an array). Anything else (an object read through its own
 * `get`) counts as holding some.
 */
function isEmptyHeaders(headers: ResponseHeaders): boolean {
  if (headers == null) return true;
  if (Array.isArray(headers)) return headers.length === 0;
  if (headers instanceof Map) return headers.size === 0;
  const keys = (headers as { keys?: unknown }).keys;
  if (typeof (headers as { get?: unknown }).get === 'function') {
    if (typeof keys !== 'function') return false;
    // `keys()` gives an iterator (`Headers`, a `Map`) or an array (an SDK's own class).
    const listed: unknown = keys.call(headers);
    if (Array.isArray(listed)) return listed.length === 0;
    const next = (listed as { next?: unknown } | null | undefined)?.next;
    return typeof next === 'function' && (next.call(listed) as IteratorResult<unknown>).done === true;
  }
  for (const _ in headers) return false;
  return true;
}

/**
 * Whether an SDK error's `error` is an LLM API's error body: openai's (`{ message, type, param,
 * code }`) or Anthropic's whole body (`{ type: 'error', error: { type, message } }`), not any
 * SDK's parsed body (a Stainless-generated SDK of another API keeps its own there).
 */
function isLlmErrorBody(body: unknown): boolean {
  if (!isBag(body)) return false;
  if (body.type === 'error') return isBag(body.error) && typeof body.error.type === 'string';
  return (
    typeof body.message === 'string' && typeof body.type === 'string' && ('param' in body || 'code' in body)
  );
}

/** Whether an error is the AWS SDK's throttling: a code of {@link AWS_THROTTLING_CODES}, or `$retryable.throttling`. */
function isAwsThrottling(error: Bag): boolean {
  for (const code of [error.name, error.Code]) {
    if (typeof code === 'string' && AWS_THROTTLING_CODES.has(code)) return true;
  }
  return isBag(error.$retryable) && error.$retryable.throttling === true;
}

const openaiMeter = new LlmMeter('openai');
const anthropicMeter = new LlmMeter('anthropic');

/**
 * An LLM SDK's 429 read as the HTTP adapters read it with `api` (src/http/llm.ts), from the body
 * the SDK keeps as `error` (Anthropic's: the whole body, `{ type: 'error', error }`; openai's: the
 * body's `error`), or `undefined` when the error has none.
 */
function llmRefusal(error: Bag): LlmRefusal | undefined {
  const body = isBag(error.error) ? error.error : undefined;
  if (body === undefined) return undefined;
  if (body.type === 'error' && isBag(body.error)) return anthropicMeter.refusal(body);
  return openaiMeter.refusal({ error: body });
}

/**
 * The default `classifyError` of `wrap`: how the errors of the SDKs people call rate-limited APIs
 * with (openai, Anthropic, Octokit, the AWS SDK v3, axios, got, ky, and any error with a
 * `status`) feed the limiter.
 *
 * - throttled: status 429 (see {@link statusOfError}), or an AWS throttling error (its code in
 *   {@link AWS_THROTTLING_CODES}, such as `ThrottlingException` with a 400 or `SlowDown` with a
 *   503); with the wait the error's headers ask for ({@link headersOfError}: `retry-after-ms`,
 *   `Retry-After`, an exhausted `ratelimit`), else the error's own `retryAfterMs` when it is a
 *   number >= 0.
 * - success: any other 4xx (a 404, a 400 without an LLM API's error body), an answer the server
 *   processed, as the HTTP adapters count it; the call still ends with the SDK's error.
 * - failed: anything else; a 5xx with such a wait pauses the limiter without a cut, as the HTTP
 *   adapters do. So is a 429 the library made itself (`x-adaptive-rate-limit: rejected`, the
 *   adapters' `rejection: 'response'`): no server said it. So is an LLM API's 429 that no retry
 *   can pass (a spend cap, openai's `insufficient_quota`, Anthropic's
 *   `enforced_spend_limit_reached`): the call ends at once with the SDK's error, as with `api`.
 * - a call the API refused (openai's "Request too large" 429, an LLM API's 4xx with its error
 *   body, such as a context too long): `{ kind: 'success', refused: true }`, as with `api`: the
 *   API ran nothing, so the call's draws from the other budgets are given back, no cut, no retry;
 *   the call ends with the SDK's error.
 *   An LLM SDK's rate-limit 429 names the budget it is about (`budgets`: openai's `error.type`
 *   `requests` or `tokens`, the budget Anthropic's message names), so a limiter with those
 *   `budgets` cuts only that one when the call drew from it (`wrap`'s `costs`); else the budgets
 *   the call drew from, as a limiter without them does. An openai 429's message gives its wait
 *   when no header does ("Please try again in 7m12s.", Azure OpenAI's "Please retry after 6
 *   seconds."), and one for a limit per day (RPD, TPD) cuts no budget: it pauses the limiter for
 *   that wait (see `rateLimitOutcome`).
 *
 * It never throws: a header value that is a number is read as its text (`'retry-after': 5`), one
 * that is neither (`null`) as no header, and an error it cannot read otherwise (a getter that
 * throws) gives its kind without a wait.
 *
 * For anything else (an SDK's own error class, GitHub's 403), give `wrap` a `classifyError` of your
 * own, falling back to this one. It reads no announced quota: `wrap`'s `headers` reads those from
 * the same headers, whichever `classifyError` judged the error.
 */
export function classifyThrown(error: unknown): Outcome {
  try {
    return classifyBag(error);
  } catch {
    // A field no reader expected (a getter that throws, a header shape of its own): the kind
    // alone, without a wait. The default classifier of every wrapped call never throws: the
    // caller gets the SDK's own error, not one of ours.
    try {
      const status = statusOfError(error);
      if (isBag(error) && (status === 429 || isAwsThrottling(error))) return { kind: 'throttled' };
      return clientError(status) ? SERVER_ANSWERED() : { kind: 'failed' };
    } catch {
      return { kind: 'failed' };
    }
  }
}

// A new outcome each time: a `classifyError` that falls back to `classifyThrown` may add its own
// `quota` to the one it got, and a shared object would hand that quota to every later error.
const NO_ANSWER = (): Outcome => ({ kind: 'failed', noAnswer: true });
const REFUSED_CALL = (): Outcome => ({ kind: 'success', refused: true });
const SERVER_ANSWERED = (): Outcome => ({ kind: 'success' });
const NOT_SENT = (): Outcome => ({ kind: 'failed', notSent: true });

/**
 * Whether `status` is a 4xx: past the throttles, an answer the server processed, as the HTTP
 * adapters count one (a 404, a 400): a success of its units, so that the accepted rate a cut
 * starts from counts it.
 */
function clientError(status: number | undefined): boolean {
  return status !== undefined && status >= 400 && status < 500;
}

function classifyBag(error: unknown): Outcome {
  if (!isBag(error)) return NO_ANSWER();
  // The headers are found and read once, for the refusal mark and for the wait (and, under `wrap`,
  // for its `headers` profile: see `readingHeadersOnce`).
  const { headers, lookup } = headersAndLookup(error);
  // The library's own refusal (`rejection: 'response'`) was never sent: not the server's word.
  if (lookup?.(REFUSAL_HEADER) !== undefined) return { kind: 'failed' };
  const status = statusOfError(error);
  const llm = status === 429 ? llmRefusal(error) : undefined;
  // A call above a whole budget (openai's "Request too large"), or an LLM API's 4xx refusing the
  // call (a context too long): the API ran nothing, so its token draws are given back, as the
  // HTTP adapters with `api` give them back; no retry can pass it.
  if (
    llm?.kind === 'call' ||
    (status !== undefined && refusedCall(status) && !isAwsThrottling(error) && isLlmErrorBody(error.error))
  )
    return REFUSED_CALL();
  // No retry can pass a spend cap or a used-up quota.
  if (llm !== undefined && llm.kind !== 'rate') return { kind: 'failed' };
  const throttled = status === 429 || isAwsThrottling(error);
  // No status and no headers: no HTTP answer came (a connection reset, a timeout, the function's
  // own bug), so none that left an announced quota out; one that never reached the server gives
  // its LLM token draws back, as the HTTP adapters do.
  if (!throttled && status === undefined && headers === undefined)
    return neverSent(error) ? NOT_SENT() : NO_ANSWER();
  if (!throttled && clientError(status)) return SERVER_ANSWERED();
  // A wait on a failure is kept only for a server error (a 503 "come back later").
  const retryAfterMs = throttled || (status ?? 0) >= 500 ? retryAfterOfError(error, lookup) : undefined;
  const kind = throttled ? 'throttled' : 'failed';
  const outcome: Outcome = retryAfterMs === undefined ? { kind } : { kind, retryAfterMs };
  // The budget the 429 names (openai's `error.type` `tokens`): only that one is cut; the wait its
  // message asks for when no header does; a limit per day cut nowhere (see `rateLimitOutcome`).
  return llm?.kind === 'rate' && outcome.kind === 'throttled' ? rateLimitOutcome(outcome, llm) : outcome;
}

/**
 * The wait an error's headers ask for (`headers`: their lookup, read already), or its own
 * `retryAfterMs`; `undefined` when neither.
 */
function retryAfterOfError(error: Bag, headers: HeaderLookup | undefined): number | undefined {
  const fromHeaders = headers === undefined ? undefined : retryAfterFromHeaders(headers, Date.now());
  if (fromHeaders !== undefined) return fromHeaders;
  const own = error.retryAfterMs;
  return typeof own === 'number' && own >= 0 && Number.isFinite(own) ? own : undefined;
}
