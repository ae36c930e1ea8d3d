import { API_BUDGETS, type LlmApi } from '../config/api.js';
import type { Costs } from '../limiter/budgets.js';
import type { Outcome } from '../limiter/types.js';
import { type MeteredBody, meteredBody } from './llm-body.js';
import { parseGoDuration } from './quota-headers/openai.js';

/** Characters per token of the estimate before an answer (both vendors document about 4). */
const CHARS_PER_TOKEN = 4;
/** Weight of the newest answer in the running averages. */
const AVERAGE_WEIGHT = 0.2;
/** Tokens a call is guessed to cost before any answer was seen and when its body cannot be read. */
const FIRST_GUESS = 1_000;
/** Output tokens an Anthropic call is guessed to produce before any answer: at most `max_tokens`. */
const FIRST_OUTPUT_GUESS = 256;
/** The longest JSON answer read for its `usage` as it passes (bytes); a longer one keeps its estimate. */
export const MAX_JSON_BYTES = 8 * 1024 * 1024;

/** What a call was charged before it was sent: the request (1) and each token budget. */
export interface LlmEstimate {
  readonly costs: Costs;
  /** `max_tokens` (or `max_completion_tokens`) times `n`, when the body said. */
  readonly maxTokens: number | undefined;
  /** Whether the body was seen. */
  readonly seen: boolean;
  /**
   * A call that runs no model (see {@link spendsNoTokens}): its answer's `usage`, when it has one
   * (a background response polled or cancelled), is a call's counted already, not this one's.
   */
  readonly runsNoModel?: true;
}

/**
 * An answer by which the API refused a call without doing it, and not for a budget: a 4xx other
 * than 429 (400 `invalid_request_error`, 401, 404...). A refused call used no tokens: it gives
 * back its token estimate, and `usage`, if its body has one, is charged in its place.
 */
export function refusedCall(status: number): boolean {
  return status >= 400 && status < 500 && status !== 429;
}

/**
 * How a 429 reads: a spend cap or quota used up (no retry can help), a call larger than a whole
 * budget (`call`: OpenAI's "Request too large": no retry can pass it, and it used nothing), or the
 * budgets that ran out.
 */
export type LlmRefusal =
  | { readonly kind: 'quota'; readonly reason: string }
  | { readonly kind: 'call'; readonly reason: string }
  | RateRefusal;

/**
 * A 429 for a rate limit: the budgets that ran out, when it says; the wait its message asks for
 * (`waitMs`, OpenAI's "Please try again in 7m12s.", Azure OpenAI's "Please retry after 6
 * seconds."), when it says one that reads; and `daily` when the limit it names is one per day
 * (OpenAI's RPD, TPD), not a per-minute budget's.
 */
interface RateRefusal {
  readonly kind: 'rate';
  readonly budgets: readonly string[] | undefined;
  /** ms, from the message's Go duration; absent when it gives none or one that does not read. */
  readonly waitMs?: number;
  /** The message names a limit per day ("per day", "(RPD)", "(TPD)"). */
  readonly daily?: true;
}

/**
 * Whether an OpenAI 429's message says the call alone asks more than the whole limit ("Request too
 * large for gpt-4o in organization org-... on tokens per min (TPM): Limit 30000, Requested
 * 36153."), where a rate limit's says "Limit 30000, Used 29000, Requested 2000".
 */
function tooLarge(message: string): boolean {
  if (/\brequest too large\b/i.test(message)) return true;
  const numbers = /\bLimit (\d+), Requested (\d+)\b/.exec(message);
  return numbers !== null && Number(numbers[2]) > Number(numbers[1]);
}

/**
 * The wait an OpenAI 429's message asks for, in ms: its "Please try again in <duration>", a Go
 * duration (`7m12s`, `1m26.4s`, `1.002s`, `20ms`; its parts apart too, `1m 30s`) read by
 * {@link parseGoDuration}, rounded up to whole ms (never a retry before the wait asked, as a
 * header's wait). `undefined` when the message gives none, or one that does not read (a sign, a
 * bare number, words), and no whole seconds either ({@link secondsWait}): it is then not used,
 * never an error.
 */
function askedWait(message: string): number | undefined {
  // Its parts may stand apart ("1m 30s"): read as one, or "1m" alone was a wait of 60 s.
  const asked = /\btry again in (\S+(?: \d[\d.]*(?:h|m|s|ms|us|µs|ns)(?=[\s.,;:]|$))*)/i.exec(message);
  // The sentence's full stop follows the duration ("in 1.002s."): a Go duration ends in its unit.
  const word = asked === null ? undefined : withoutStops((asked[1] as string).replaceAll(' ', ''));
  const ms = word === undefined ? undefined : parseGoDuration(word);
  // Rounded up to whole ms, as a header's wait is: "1.005s" is 1004.9999999999999 in floating
  // point, "20us" 0.02 (to the nanosecond first, a Go duration's finest unit, then up).
  // At most the largest whole ms (a message's 1e303 ms overflowed the rounding to Infinity).
  if (ms === undefined) return secondsWait(message);
  return Math.min(Math.ceil(Math.round(ms * 1e6) / 1e6), Number.MAX_SAFE_INTEGER);
}

/**
 * `word` without the stops at its end (`.,;:`), cut by a loop: `/[.,;:]+$/` took quadratic time on
 * a run of them followed by another character (a 64 KiB body, 2 s; a 1 MB SDK message, minutes).
 */
function withoutStops(word: string): string {
  let end = word.length;
  while (end > 0 && '.,;:'.includes(word.charAt(end - 1))) end--;
  return word.slice(0, end);
}

/**
 * The wait a 429's message asks for in whole seconds, in ms: Azure OpenAI's "Please retry after 6
 * seconds." (Azure has sent 429s with no `retry-after` header), and Azure API Management's "Try
 * again in 59 seconds." in front of it. `undefined` when the message says neither, or 0 seconds:
 * in whole seconds that is under one left, not none (a retry at once would meet the limit), so
 * the 429 is a bare one.
 */
function secondsWait(message: string): number | undefined {
  const asked = /\b(?:retry after|try again in) (\d{1,9}) seconds?\b/i.exec(message);
  const seconds = asked === null ? 0 : Number(asked[1]);
  return seconds === 0 ? undefined : seconds * 1_000;
}

/**
 * The budget an OpenAI 429's message names when its `error.type` does not: OpenAI's "tokens per
 * min (TPM)" and "requests per min (RPM)", Azure OpenAI's "exceeded token rate limit" and
 * "exceeded call rate limit" (its 429s have no `error.type`), and Azure API Management's "Token
 * limit is exceeded." (its `llm-token-limit` policy: tokens a minute; a token quota over a longer
 * period is a 403). API Management's "Rate limit is exceeded." (its `rate-limit` and
 * `rate-limit-by-key` policies, which count calls) names the requests only in API Management's own
 * body (`gateway`: `{ "statusCode": 429, "message": ... }`): other gateways say it of any limit.
 */
function namedBudget(message: string, gateway: boolean): readonly string[] | undefined {
  if (/\(TPM\)|tokens per min|\btoken rate limit\b|\btoken limit is exceeded\b/i.test(message))
    return ['tokens'];
  if (/\(RPM\)|requests per min|\bcall rate limit\b/i.test(message)) return ['requests'];
  if (gateway && /^rate limit is exceeded\b/i.test(message)) return ['requests'];
  return undefined;
}

/**
 * Whether a 429's body (or the part of it an error kept) is Azure API Management's own:
 * `{ statusCode: 429, message }`.
 */
function apimBody(body: unknown): boolean {
  return isObject(body) && body.statusCode === 429 && typeof body.message === 'string';
}

/** Whether an OpenAI 429's message names a limit per day (requests or tokens per day). */
function dailyLimit(message: string): boolean {
  return /\bper day\b|\((?:RPD|TPD)\)/i.test(message);
}

/**
 * One limiter's meter of an LLM API (`api: 'openai' | 'anthropic'`): the costs of a call before
 * it is sent, from its body (OpenAI: the larger of `max_tokens` / `max_completion_tokens` times
 * `n` and characters/4 of the prompt, as OpenAI charges at admission; Anthropic: input
 * characters/4, output the running average of the answers' `output_tokens`, at most `max_tokens`),
 * what the answer's `usage` says it really cost, and what a 429's body means. A string or bytes
 * body is read as JSON whatever its content type (a compressed one decoded first); one that is not
 * JSON is charged its characters/4 (no `max_tokens` known). A body it cannot see (a stream), a
 * multipart body with a file part (an audio file, whatever its bytes), or bytes that are not UTF-8
 * text, is charged the running average (see {@link meteredBody}).
 * An image, a PDF or audio sent inline (base64) is left out: the APIs count it by its size in tiles
 * or pages, not its characters, and the answer's `usage` corrects the estimate.
 */
export class LlmMeter {
  readonly api: LlmApi;
  readonly #average = new Map<string, number>();

  constructor(api: LlmApi) {
    this.api = api;
  }

  /**
   * The costs of a call before it is sent, from its body as {@link meteredBody} reads it (`read`:
   * asked only for a call that runs a model).
   */
  estimateOf(read: () => MeteredBody, method: string, path: string): LlmEstimate {
    if (spendsNoTokens(method, path)) {
      // Counted as a request only: nothing it asks for runs a model, and no answer corrects it.
      const costs: Record<string, number> =
        this.api === 'openai' ? { tokens: 0 } : { input_tokens: 0, output_tokens: 0 };
      return { costs, maxTokens: undefined, seen: true, runsNoModel: true };
    }
    const { object, text } = read();
    // A body that is not JSON (text, bytes): its characters/4, the rule of thumb the vendors give.
    const chars = object === undefined ? text?.length : promptChars(object);
    const maxTokens = object === undefined ? undefined : maxTokensOf(object);
    if (this.api === 'openai') {
      const tokens =
        chars === undefined
          ? (this.#average.get('tokens') ?? FIRST_GUESS)
          : Math.max(maxTokens ?? 0, Math.ceil(chars / CHARS_PER_TOKEN), 1);
      return { costs: { tokens }, maxTokens, seen: object !== undefined };
    }
    const input =
      chars === undefined
        ? (this.#average.get('input_tokens') ?? FIRST_GUESS)
        : Math.max(Math.ceil(chars / CHARS_PER_TOKEN), 1);
    const expected = this.#average.get('output_tokens') ?? FIRST_OUTPUT_GUESS;
    const output = Math.max(1, Math.min(expected, maxTokens ?? expected));
    return { costs: { input_tokens: input, output_tokens: output }, maxTokens, seen: object !== undefined };
  }

  /**
   * What the call really cost per budget by its answer's `usage` (`undefined` when it has none),
   * and the running averages learn from it. OpenAI: the larger of `max_tokens` and the prompt
   * tokens (what it charged at admission); without the body, the prompt and completion tokens.
   * Anthropic: input (and cache creation) tokens, output tokens. A `refused` call (see
   * {@link refusedCall}) was not admitted: OpenAI, the prompt and completion tokens. A call that
   * runs no model has no cost of its own: the `usage` of a response it polls or cancels was
   * charged by the call that made it, so it is not charged again (nor learned).
   */
  used(usage: Usage | undefined, estimate: LlmEstimate, refused = false): Costs | undefined {
    if (usage === undefined || estimate.runsNoModel === true) return undefined;
    if (this.api === 'openai') {
      // Chat completions name them prompt and completion tokens; the Responses API input and output.
      const prompt = count(usage.prompt_tokens) ?? count(usage.input_tokens);
      const completion = count(usage.completion_tokens) ?? count(usage.output_tokens);
      if (prompt === undefined) return undefined;
      const tokens =
        estimate.seen && !refused ? Math.max(estimate.maxTokens ?? 0, prompt) : prompt + (completion ?? 0);
      this.#learn('tokens', tokens);
      return { tokens };
    }
    const input = count(usage.input_tokens);
    const output = count(usage.output_tokens);
    const out: Record<string, number> = {};
    if (input !== undefined) {
      out.input_tokens = input + (count(usage.cache_creation_input_tokens) ?? 0);
      this.#learn('input_tokens', out.input_tokens);
    }
    if (output !== undefined) {
      out.output_tokens = output;
      this.#learn('output_tokens', output);
    }
    return Object.keys(out).length === 0 ? undefined : out;
  }

  /**
   * How a 429 reads, from its JSON body (`undefined` when not read). OpenAI's "Request too large"
   * (`error.type` `tokens`, `code` `rate_limit_exceeded`) is a `call`: the call is refused as a
   * 4xx that is not a throttle is (see {@link refusedCall}). Only the body is read: neither
   * vendor's headers tell a spend cap from a rate limit (a spend cap's body says it). An OpenAI
   * rate limit's message also gives the wait it asks for ("Please try again in 7m12s.", Azure
   * OpenAI's "Please retry after 6 seconds.": `waitMs`) and whether its limit is one per day
   * (`daily`: "requests per day (RPD)"); see {@link rateLimitOutcome} for what they do.
   */
  refusal(body: unknown): LlmRefusal {
    const error = isObject(body) && isObject(body.error) ? body.error : undefined;
    if (this.api === 'openai') {
      if (error?.code === 'insufficient_quota' || error?.type === 'insufficient_quota') {
        return { kind: 'quota', reason: 'insufficient_quota' };
      }
      // Azure API Management's own 429 has no `error`: `{ "statusCode": 429, "message": ... }`.
      const said = error === undefined && isObject(body) ? body.message : error?.message;
      const message = typeof said === 'string' ? said : '';
      if (tooLarge(message)) return { kind: 'call', reason: 'request_too_large' };
      const type = error?.type;
      const gateway = apimBody(error === undefined ? body : error);
      const budgets: readonly string[] | undefined =
        type === 'requests' || type === 'tokens' ? [type] : namedBudget(message, gateway);
      const rate: { kind: 'rate'; budgets: typeof budgets; waitMs?: number; daily?: true } = {
        kind: 'rate',
        budgets,
      };
      const waitMs = askedWait(message);
      if (waitMs !== undefined) rate.waitMs = waitMs;
      if (dailyLimit(message)) rate.daily = true;
      return rate;
    }
    const details = isObject(error?.details) ? error.details : undefined;
    if (details?.error_code === 'enforced_spend_limit_reached') {
      return { kind: 'quota', reason: 'enforced_spend_limit_reached' };
    }
    // A spend cap says so in its body (`details.error_code`, above). A 429 without Anthropic's JSON
    // (a proxy's or a gateway's page) is a rate limit, retried, as OpenAI's is: no body tells a cap.
    const message = typeof error?.message === 'string' ? error.message : '';
    const named = API_BUDGETS.anthropic.filter((b) => message.includes(b.replace('_', ' ')));
    return { kind: 'rate', budgets: named.length === 1 ? named : undefined };
  }

  #learn(budget: string, value: number): void {
    const before = this.#average.get(budget);
    this.#average.set(budget, before === undefined ? value : before + AVERAGE_WEIGHT * (value - before));
  }
}

/**
 * The outcome of a 429 judged throttled by its status and headers (`throttled`) that the body
 * reads as a rate limit (`refusal`).
 *
 * - The wait the message asks for (`waitMs`) is the answer's wait only when its headers ask for
 *   none (`retry-after-ms`, `Retry-After`, a `classify` callback's `retryAfterMs`): the header
 *   wins. It then does what a `Retry-After` of that length does: the limiter pauses (at most
 *   `maxPause`) and the retry goes after it; a wait longer than `maxWait` refuses the retry (the
 *   caller gets the 429) and the calls that come while it lasts (`RateLimitRejectedError`
 *   `max-wait`, or the library's 429 with `rejection: 'response'`).
 * - A limit per day (`daily`) is no per-minute budget's: nothing is cut. With a wait (the message's
 *   or the headers') it pauses every budget the call drew from, without a cut (`pauseOnly`: a
 *   throttle in the events and metrics, `cut: false`), and the call is retried after it as a
 *   throttled one is.
 *   Not only the one `error.type` names: a daily requests limit refuses every call (each draws a
 *   request), and under a daily tokens limit only the calls that run no model (a list of models)
 *   would pass; those wait too, as every call draws a request, for at most `maxPause`. Without a wait (or one of
 *   0), the daily 429 fails: no cut, no pause, no retry (a retry sent at once would meet the same
 *   limit).
 * - Otherwise the budgets it names are cut (`budgets`), and only those.
 */
export function rateLimitOutcome(
  throttled: Extract<Outcome, { kind: 'throttled' }>,
  refusal: RateRefusal,
): Outcome {
  const retryAfterMs = throttled.retryAfterMs ?? refusal.waitMs;
  if (refusal.daily === true) {
    const { quota } = throttled;
    // A wait of 0 (the message's "0s", the header's `retry-after-ms: 0`) is none: the limit per
    // day has not gone in no time, and a retry at once would meet it.
    if (retryAfterMs === undefined || retryAfterMs === 0)
      return quota === undefined ? { kind: 'failed' } : { kind: 'failed', quota };
    return quota === undefined
      ? { kind: 'throttled', retryAfterMs, pauseOnly: true }
      : { kind: 'throttled', retryAfterMs, quota, pauseOnly: true };
  }
  const waited =
    throttled.retryAfterMs === undefined && retryAfterMs !== undefined
      ? { ...throttled, retryAfterMs }
      : throttled;
  return refusal.budgets === undefined ? waited : { ...waited, budgets: refusal.budgets };
}

/**
 * Whether a call runs no model, so draws no tokens: a `GET`, `HEAD`, `DELETE` or `OPTIONS` (a
 * list of models, a batch, a file or a background response polled), a count of a prompt's tokens
 * (Anthropic's `/v1/messages/count_tokens`, OpenAI's `/v1/responses/input_tokens`), a cancel (a
 * path ending in `/cancel`: a background response's, a batch's, a fine-tuning job's), or a file
 * uploaded or a batch created or cancelled (a path with a `files`, `uploads` or `batches`
 * segment: OpenAI's `/v1/files`, `/v1/uploads/...`, `/v1/batches`, Anthropic's
 * `/v1/messages/batches`; a batch's calls run later, under the batch API's own limits). Most of
 * their answers carry no `usage`: charged the estimate of a call, each kept it (5 counts of a
 * prompt took 10,000 input tokens from the model's budget; 10 polls of a batch 4,000 tokens; a
 * file's multipart body, the running average). A background response polled or cancelled answers
 * with the response and its `usage`: that is the call's that made it, and is not charged again
 * (see {@link LlmMeter.used}).
 */
function spendsNoTokens(method: string, path: string): boolean {
  const m = method.toUpperCase();
  if (m === 'GET' || m === 'HEAD' || m === 'DELETE' || m === 'OPTIONS') return true;
  const end = path.indexOf('?');
  const route = end === -1 ? path : path.slice(0, end);
  if (route.endsWith('/count_tokens') || route.endsWith('/input_tokens') || route.endsWith('/cancel'))
    return true;
  return route.split('/').some((segment) => NO_MODEL_SEGMENTS.has(segment));
}

/** The path segments of the calls that store a file or a batch and run no model. */
const NO_MODEL_SEGMENTS = new Set(['files', 'uploads', 'batches']);

/** The longest 429 body read to tell why it came (bytes). */
export const MAX_REFUSAL_BYTES = 64 * 1024;

/**
 * The longest a 429's body is read to tell why it came (ms from the response's start, on the
 * limiter's clock): past it, the body is cut and its connection closed, and the 429 is judged on
 * its status and headers alone, as a 429 whose body is not JSON (a rate limit, retried per its
 * `Retry-After`); if it is the caller's answer, its body ends with `ThrottledBodyTimeoutError`
 * after the bytes received (not with the rest of the live body: an SDK reads a 429's body before
 * it decides, and would wait on a stalled one as long as the call did). Without it, a body that stalls after the headers (a proxy's, a
 * gateway's) held the call until the body ended or undici's `bodyTimeout` (300 s) passed, its
 * token estimate counted in flight. 5 s: both vendors send a 429's short JSON body (under 1 KiB)
 * with its headers, and 64 KiB take about 4 s even at 128 kbit/s, so no answer that is coming is
 * cut; and it is short against the SDKs' own timeouts (10 min) and the minute of a token budget,
 * so a stalled 429 delays its retry by little. Counted from the start, not between chunks: a body
 * that trickles a byte a second is cut too.
 */
export const REFUSAL_READ_TIMEOUT_MS = 5_000;

/**
 * A 429's body as {@link LlmMeter.refusal} reads it: its JSON, or `undefined` (none, not JSON, or
 * longer than {@link MAX_REFUSAL_BYTES}). The fetch wrapper and the interceptor both read it so.
 */
export function refusalJson(bytes: Uint8Array | undefined): unknown {
  if (bytes === undefined || bytes.byteLength === 0 || bytes.byteLength > MAX_REFUSAL_BYTES) return undefined;
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return undefined;
  }
}

/** The `usage` object of an answer (the fields both vendors use). */
export type Usage = Readonly<Record<string, unknown>>;

/**
 * Reads `usage` from an answer's bytes as they pass, without holding them: a server-sent-events
 * stream event by event (the last `usage` seen, fields merged: OpenAI's last chunk, Anthropic's
 * `message_start` then `message_delta`; an event longer than 8 MiB is dropped), or a JSON answer
 * kept as text up to 8 MiB and parsed at its end (a longer one: its last 64 KiB searched for the
 * last `usage` object, which both APIs write after the content).
 */
export class UsageScanner {
  readonly #sse: boolean;
  readonly #decoder = new TextDecoder();
  /** A JSON answer's text so far. */
  #text = '';
  #bytes = 0;
  /** A JSON answer longer than {@link MAX_JSON_BYTES}: its last text (at least `TAIL_CHARS`). */
  #tail: string[] = [];
  #tailLength = 0;
  /**
   * A stream's text since its last event's end, as it came: joined only when an event ends in it,
   * so a long event is not copied (nor searched again) at each of its chunks.
   */
  #pending: string[] = [];
  #pendingLength = 0;
  #usage: Record<string, unknown> | undefined;
  /** A stream's event grew past {@link MAX_JSON_BYTES}: dropped up to its end (the next blank line). */
  #dropping = false;

  constructor(contentType: string) {
    this.#sse = contentType.toLowerCase().includes('text/event-stream');
  }

  /** Whether answers of this content type carry a `usage` this scanner reads. */
  static reads(contentType: string | undefined): boolean {
    const type = contentType?.toLowerCase() ?? '';
    return type.includes('text/event-stream') || type.includes('json');
  }

  push(chunk: Uint8Array): void {
    if (this.#sse) {
      this.#feed(this.#decoder.decode(chunk, { stream: true }));
      return;
    }
    this.#bytes += chunk.byteLength;
    const text = this.#decoder.decode(chunk, { stream: true });
    if (this.#bytes > MAX_JSON_BYTES) {
      // Longer than is kept: its last characters only, where both APIs write `usage`.
      if (this.#text !== '') this.#tail.push(this.#text);
      this.#tail.push(text);
      this.#tailLength += this.#text.length + text.length;
      this.#text = '';
      if (this.#tailLength > 2 * TAIL_CHARS) {
        const kept = this.#tail.join('').slice(-TAIL_CHARS);
        this.#tail = [kept];
        this.#tailLength = kept.length;
      }
      return;
    }
    this.#text += text;
  }

  /** The usage at the end of the answer, or `undefined`. */
  end(): Usage | undefined {
    if (this.#sse) {
      this.#feed(`${this.#decoder.decode()}\n\n`);
      return this.#usage;
    }
    if (this.#bytes > MAX_JSON_BYTES) return usageAtEnd(this.#tail.join('') + this.#decoder.decode());
    try {
      const parsed: unknown = JSON.parse(this.#text + this.#decoder.decode());
      return isObject(parsed) ? usageIn(parsed) : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * A stream's next text: the events that end in it (at a blank line) are read. Only the new text
   * is searched, with the last 3 characters before it (a blank line split between two chunks), so
   * an event of N bytes in chunks of c costs O(N), not O(N²/c): a 6 MB event blocked the event
   * loop for 1.2 s in 16 KiB chunks.
   */
  #feed(piece: string): void {
    const pending = this.#pending;
    // The last 3 characters before the new text (across the pieces: a chunk may be one byte).
    let head = '';
    for (let i = pending.length - 1; i >= 0 && head.length < 3; i--)
      head = (pending[i] as string).slice(-3) + head;
    head = head.slice(-3);
    const window = head + piece;
    const base = this.#pendingLength - head.length;
    let all: string | undefined;
    let consumed = 0;
    const blankLine = /\r?\n\r?\n/g;
    for (let m = blankLine.exec(window); m !== null; m = blankLine.exec(window)) {
      const at = base + m.index;
      if (at < consumed) continue;
      all ??= pending.join('') + piece;
      this.#event(all.slice(consumed, at));
      consumed = at + m[0].length;
    }
    if (all === undefined) {
      pending.push(piece);
      this.#pendingLength += piece.length;
    } else {
      const rest = all.slice(consumed);
      this.#pending = rest === '' ? [] : [rest];
      this.#pendingLength = rest.length;
    }
    // An event is kept up to 8 MiB, as a JSON answer is: a longer one is dropped as it grows.
    if (this.#pendingLength > MAX_JSON_BYTES) {
      this.#pending = [];
      this.#pendingLength = 0;
      this.#dropping = true;
    }
  }

  #event(event: string): void {
    if (this.#dropping) {
      this.#dropping = false;
      return;
    }
    if (!event.includes('"usage"')) return;
    const data = event
      .split(/\r?\n/)
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).trimStart())
      .join('\n');
    try {
      const parsed: unknown = JSON.parse(data);
      if (!isObject(parsed)) return;
      const usage = usageIn(parsed);
      if (usage !== undefined) this.#usage = { ...this.#usage, ...withoutNulls(usage) };
    } catch {
      // Not JSON (a comment, `[DONE]`): nothing to read.
    }
  }
}

/** The end of a JSON answer longer than {@link MAX_JSON_BYTES} searched for its `usage`. */
const TAIL_CHARS = 64 * 1024;

/**
 * The object of the last `"usage"` key in `text` (the end of a JSON answer too long to parse
 * whole: both APIs write `usage` after the content), or `undefined` when there is none whole.
 */
function usageAtEnd(text: string): Usage | undefined {
  const key = text.lastIndexOf('"usage"');
  if (key === -1) return undefined;
  const start = text.indexOf('{', key);
  if (start === -1 || text.slice(key + 7, start).trim() !== ':') return undefined;
  let depth = 0;
  let quoted = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '\\') i++;
      else if (c === '"') quoted = false;
    } else if (c === '"') quoted = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) {
      try {
        const parsed: unknown = JSON.parse(text.slice(start, i + 1));
        return isObject(parsed) ? parsed : undefined;
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/**
 * The `usage` of an answer or a stream event: its own (a JSON answer, OpenAI's last chunk,
 * Anthropic's `message_delta`), its `message`'s (Anthropic's `message_start`) or its
 * `response`'s (the Responses API's `response.completed`).
 */
function usageIn(parsed: Record<string, unknown>): Record<string, unknown> | undefined {
  if (isObject(parsed.usage)) return parsed.usage;
  for (const key of ['message', 'response'] as const) {
    const inner = parsed[key];
    if (isObject(inner) && isObject(inner.usage)) return inner.usage;
  }
  return undefined;
}

function withoutNulls(usage: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(usage).filter(([, v]) => v !== null && v !== undefined));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Tokens a `usage` field may count and be believed: far above any model's context window and
 * output (millions). A larger count (a proxy's overflow, a broken answer) is no usage: charged as
 * debt and learned as the running average, it held every later call of the model for years, or
 * (summed to `Infinity`) made every estimate of a body not seen an invalid cost.
 */
const MAX_USAGE_TOKENS = 1e9;

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 && value <= MAX_USAGE_TOKENS
    ? value
    : undefined;
}

/**
 * Characters of text in a content value: a string, or parts with `text` (or `input_text`), or
 * parts with a `content` of their own (a tool result's), tool calls and their outputs, Anthropic's
 * plain-text documents, or token ids (embeddings' and completions'
 * `input` / `prompt` as an array of them, or one per text: each counts as a token's characters).
 * Read with a list of the arrays still to read, not by recursion: a body nested thousands deep is
 * counted, not a stack overflow.
 */
function textLength(content: unknown): number {
  let n = 0;
  const pending: unknown[] = [content];
  while (pending.length > 0) {
    const value = pending.pop();
    if (typeof value === 'string') n += value.length;
    else if (Array.isArray(value)) {
      for (const part of value) {
        if (typeof part === 'string') n += part.length;
        else if (typeof part === 'number') n += CHARS_PER_TOKEN;
        else if (Array.isArray(part)) pending.push(part);
        else if (isObject(part)) {
          if (typeof part.text === 'string') n += part.text.length;
          else if (part.content !== undefined) pending.push(part.content);
          // The model's tool calls and their results, sent back: the Responses API's
          // `function_call` (`arguments`) and `function_call_output` (`output`), Anthropic's
          // `tool_use` (`input`).
          if (typeof part.arguments === 'string') n += part.arguments.length;
          if (part.output !== undefined) pending.push(part.output);
          if (part.type === 'tool_use') n += definitionChars(part.input);
          // Anthropic's plain-text document: its text is in its source (`data`, or content blocks).
          const source = part.type === 'document' && isObject(part.source) ? part.source : undefined;
          if (source?.type === 'text' && typeof source.data === 'string') n += source.data.length;
          else if (source?.type === 'content') pending.push(source.content);
        }
      }
    }
  }
  return n;
}

/**
 * Characters of a request's prompt: `system` (the Responses API's `instructions`), the messages'
 * contents and tool calls, `input` / `prompt`, the tools it declares (`tools`, OpenAI's older
 * `functions`: both APIs count their definitions as input tokens), and the structured output's
 * schema (Chat Completions' `response_format`, the Responses API's `text.format`), counted as
 * input too.
 */
function promptChars(body: Record<string, unknown>): number {
  let n =
    textLength(body.system) +
    textLength(body.instructions) +
    textLength(body.input) +
    textLength(body.prompt) +
    definitionChars(body.tools) +
    definitionChars(body.functions) +
    definitionChars(body.response_format) +
    (isObject(body.text) ? definitionChars(body.text.format) : 0);
  if (Array.isArray(body.messages)) {
    for (const m of body.messages) {
      // An assistant message's tool calls (Chat Completions' `tool_calls`, the older `function_call`).
      if (isObject(m))
        n += textLength(m.content) + definitionChars(m.tool_calls) + definitionChars(m.function_call);
    }
  }
  return n;
}

/**
 * Characters of a JSON value's strings, its keys' too (a tool's name, description and schema).
 * Read with a list of the values still to read, not by recursion, as {@link textLength} is.
 */
function definitionChars(value: unknown): number {
  let n = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (typeof next === 'string') n += next.length;
    else if (Array.isArray(next)) for (const item of next) pending.push(item);
    else if (isObject(next)) {
      for (const [key, inner] of Object.entries(next)) {
        n += key.length;
        pending.push(inner);
      }
    }
  }
  return n;
}

/** `max_completion_tokens` or `max_tokens` (OpenAI: times `n`), when the body says. */
function maxTokensOf(body: Record<string, unknown>): number | undefined {
  const value = count(body.max_completion_tokens) ?? count(body.max_tokens) ?? count(body.max_output_tokens);
  if (value === undefined) return undefined;
  const n = typeof body.n === 'number' && Number.isInteger(body.n) && body.n > 1 ? body.n : 1;
  // Each is at most a billion, not their product: an `n` out of range (the API refuses it with a
  // 400) made the estimate Infinity, which no budget can draw.
  return Math.min(value * n, MAX_USAGE_TOKENS);
}
