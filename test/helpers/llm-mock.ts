/**
 * Local mocks of two LLM APIs, metered the way their vendors document it: a `node:http` server on
 * 127.0.0.1 answering OpenAI's chat completions (`POST /v1/chat/completions`) or Anthropic's
 * messages (`POST /v1/messages`), with JSON answers and server-sent-event streams (`stream: true`).
 *
 * Quotas (per model, each a bucket that starts full and refills continuously at its limit per
 * minute; a bucket holds `capacity`, a minute of its limit by default):
 * - OpenAI: requests and tokens. A request is charged at admission the larger of `max_tokens`
 *   (or `max_completion_tokens`) and characters/4 of its messages; it is admitted when both buckets
 *   hold its charge, else 429. A refused request still takes one request from the request bucket
 *   (failed requests count). Headers `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` on
 *   every answer, resets as Go durations (`6m0s`, `1.5s`, `120ms`): the time until the bucket is
 *   full again. A 429 has no `retry-after` unless `retryAfter` is set (the API's own 429s carry
 *   none); its body's `error.type` is `requests` or `tokens`, `code` `rate_limit_exceeded`.
 * - Anthropic: requests, input tokens, output tokens. Input tokens (characters/4 of the system
 *   prompt and the messages) are charged at admission; output tokens as they are generated (the
 *   output bucket may go below zero; `max_tokens` is never charged); a request is admitted when the
 *   request bucket holds one, the input bucket its input and the output bucket more than zero.
 *   Headers `anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,remaining,
 *   reset}`, resets as RFC 3339 times when the budget is full again, token `remaining` rounded to
 *   the nearest thousand, `tokens-*` the most restrictive of input and output; a 429 carries
 *   `retry-after` (whole seconds) and `error.type` `rate_limit_error`.
 * - Spend cap (`spendCapReached = true`): every request gets OpenAI's 429 `insufficient_quota`,
 *   or Anthropic's 429 `rate_limit_error` without `retry-after` whose `error.details.error_code` is
 *   `enforced_spend_limit_reached`. No bucket is charged.
 *
 * `usage` is in every JSON answer, and in a stream: OpenAI's last chunk before `[DONE]` when the
 * request sets `stream_options: { include_usage: true }`; Anthropic's `message_start` (input) and
 * `message_delta` (input and output, the last event but `message_stop`).
 *
 * Time is injected (`clock`): on a `ManualClock` nothing happens until the test advances it
 * (latencies, refills), except with zero latencies, where an answer is written at once.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { type Clock, systemClock } from '../../src/clock.js';
import { goDuration } from '../../src/simulate/go-duration.js';

export { goDuration };

type LlmApi = 'openai' | 'anthropic';

/** The limits of one model, per minute. */
interface LlmLimits {
  requestsPerMinute: number;
  /** OpenAI's token budget (input and output together, as charged at admission). */
  tokensPerMinute: number;
  /** Anthropic's input-token budget. */
  inputTokensPerMinute: number;
  /** Anthropic's output-token budget. */
  outputTokensPerMinute: number;
}

export interface LlmMockOptions {
  api: LlmApi;
  /** Limits of every model not named in `models`. @default 500 requests, 40,000 tokens, 40,000 input, 8,000 output */
  limits?: Partial<LlmLimits>;
  /** Limits of some models (the rest from `limits`): each model has buckets of its own. */
  models?: Readonly<Record<string, Partial<LlmLimits>>>;
  /** A bucket holds this many seconds of its limit (> 0). @default 60 */
  capacitySeconds?: number;
  /** Characters of prompt per token. @default 4 */
  charsPerToken?: number;
  /**
   * Output tokens the model generates for a request (capped at its `max_tokens`).
   * @default min(max_tokens, 64)
   */
  completionTokens?: (body: Readonly<Record<string, unknown>>) => number;
  /** ms from admission to the first output token. @default 0 */
  firstTokenMs?: number;
  /** ms per output token after the first chunk (the chunks after the first come this many ms per token apart). @default 0 */
  perTokenMs?: number;
  /** Output tokens per stream event (and per output-bucket charge). @default 16 */
  tokensPerChunk?: number;
  /** OpenAI only: send `retry-after` (whole seconds) on a rate-limit 429. @default false */
  retryAfter?: boolean;
  /**
   * OpenAI only: answer as Azure OpenAI does: `x-ratelimit-remaining-{requests,tokens}` alone (no
   * `-limit-`, no `-reset-`), and a rate-limit 429 with `retry-after-ms` and `retry-after`.
   * @default false
   */
  azure?: boolean;
  /** @default systemClock */
  clock?: Clock;
  /** Wall-clock ms (epoch) at the clock's reading when the server starts, for Anthropic's resets. @default Date.now() */
  epochMs?: number;
}

/** One request as the server saw it. */
interface LlmHit {
  /** ms on the mock's clock. */
  at: number;
  model: string;
  status: number;
  /** The budget that refused it (`requests`, `tokens`, `input_tokens`, `output_tokens`), `spend_cap`, or `undefined` for a 200. */
  refusedBy: string | undefined;
  /** Tokens charged at admission (OpenAI: the charge; Anthropic: input tokens). */
  charged: number;
  stream: boolean;
}

export interface LlmMock {
  /** `http://127.0.0.1:<port>` (no trailing slash): OpenAI's `baseURL` is `${origin}/v1`, Anthropic's the origin. */
  readonly origin: string;
  readonly api: LlmApi;
  /** Requests answered 200. */
  readonly served: number;
  /** Requests answered 429 for a rate limit (the spend cap not included). */
  readonly throttled: number;
  /** Requests answered 429 for the spend cap. */
  readonly spendCapRefusals: number;
  /** Every request, in order of arrival. */
  readonly hits: readonly LlmHit[];
  /** Output tokens generated in all (Anthropic's output budget; OpenAI's completions). */
  readonly outputTokens: number;
  /** When true, every request is refused as over the spend cap (OpenAI: quota exhausted). */
  spendCapReached: boolean;
  /** The level of a model's budgets now (refilled to the clock's now). */
  level(model: string): Readonly<Record<string, number>>;
  close(): Promise<void>;
}

const DEFAULT_LIMITS: LlmLimits = {
  requestsPerMinute: 500,
  tokensPerMinute: 40_000,
  inputTokensPerMinute: 40_000,
  outputTokensPerMinute: 8_000,
};

/** A token bucket refilled continuously; starts full; may be driven below zero by `take`. */
class Bucket {
  level: number;
  #at: number;
  constructor(
    readonly limitPerMinute: number,
    readonly capacity: number,
    now: number,
  ) {
    this.level = capacity;
    this.#at = now;
  }
  refill(now: number): void {
    this.level = Math.min(this.capacity, this.level + ((now - this.#at) * this.limitPerMinute) / 60_000);
    this.#at = now;
  }
  /** ms until the bucket holds `amount` (0 when it does). */
  msUntil(amount: number): number {
    return amount <= this.level ? 0 : ((amount - this.level) * 60_000) / this.limitPerMinute;
  }
  /** ms until the bucket is full. */
  msUntilFull(): number {
    return this.msUntil(this.capacity);
  }
}

/** An RFC 3339 time in whole seconds (rounded up), as Anthropic's resets: `2026-12-01T11:13:07Z`. */
export function rfc3339(epochMs: number): string {
  return new Date(Math.ceil(epochMs / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

/** Characters of the text in a message's content: a string, or an array of parts with `text`. */
function textLength(content: unknown): number {
  if (typeof content === 'string') return content.length;
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const part of content) {
    if (part !== null && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string') {
      n += (part as { text: string }).text.length;
    }
  }
  return n;
}

/** Characters of a request's prompt: its messages' text (and Anthropic's `system`). */
export function promptChars(body: Readonly<Record<string, unknown>>): number {
  let n = textLength(body.system);
  if (Array.isArray(body.messages)) {
    for (const m of body.messages)
      if (m !== null && typeof m === 'object') n += textLength((m as { content?: unknown }).content);
  }
  return n;
}

function maxTokensOf(body: Readonly<Record<string, unknown>>): number | undefined {
  const value = body.max_completion_tokens ?? body.max_tokens;
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

interface ModelState {
  requests: Bucket;
  /** OpenAI: tokens; Anthropic: input tokens. */
  tokens: Bucket;
  /** Anthropic only. */
  output: Bucket;
}

export async function startLlmMock(options: LlmMockOptions): Promise<LlmMock> {
  const { api } = options;
  const clock = options.clock ?? systemClock;
  const capacitySeconds = options.capacitySeconds ?? 60;
  if (!(capacitySeconds > 0))
    throw new RangeError(`startLlmMock: capacitySeconds must be > 0, received ${capacitySeconds}`);
  const charsPerToken = options.charsPerToken ?? 4;
  const firstTokenMs = options.firstTokenMs ?? 0;
  const perTokenMs = options.perTokenMs ?? 0;
  const tokensPerChunk = Math.max(1, Math.floor(options.tokensPerChunk ?? 16));
  const startedAt = clock.now();
  const epochMs = options.epochMs ?? Date.now();
  const wallClock = () => epochMs + (clock.now() - startedAt);
  const models = new Map<string, ModelState>();
  const hits: LlmHit[] = [];
  const stats = { served: 0, throttled: 0, spendCapRefusals: 0, outputTokens: 0 };
  let ids = 0;

  const limitsOf = (model: string): LlmLimits => ({
    ...DEFAULT_LIMITS,
    ...options.limits,
    ...options.models?.[model],
  });
  const stateOf = (model: string): ModelState => {
    let state = models.get(model);
    if (state === undefined) {
      const l = limitsOf(model);
      const now = clock.now();
      const bucket = (perMinute: number) => new Bucket(perMinute, (perMinute * capacitySeconds) / 60, now);
      state = {
        requests: bucket(l.requestsPerMinute),
        tokens: bucket(api === 'openai' ? l.tokensPerMinute : l.inputTokensPerMinute),
        output: bucket(l.outputTokensPerMinute),
      };
      models.set(model, state);
    }
    const now = clock.now();
    state.requests.refill(now);
    state.tokens.refill(now);
    state.output.refill(now);
    return state;
  };

  const openaiHeaders = (s: ModelState): Record<string, string> =>
    options.azure === true
      ? {
          'x-ratelimit-remaining-requests': String(Math.max(0, Math.floor(s.requests.level))),
          'x-ratelimit-remaining-tokens': String(Math.max(0, Math.floor(s.tokens.level))),
        }
      : {
          'x-ratelimit-limit-requests': String(s.requests.limitPerMinute),
          'x-ratelimit-limit-tokens': String(s.tokens.limitPerMinute),
          'x-ratelimit-remaining-requests': String(Math.max(0, Math.floor(s.requests.level))),
          'x-ratelimit-remaining-tokens': String(Math.max(0, Math.floor(s.tokens.level))),
          'x-ratelimit-reset-requests': goDuration(s.requests.msUntilFull()),
          'x-ratelimit-reset-tokens': goDuration(s.tokens.msUntilFull()),
        };

  const anthropicHeaders = (s: ModelState): Record<string, string> => {
    const now = wallClock();
    const headers: Record<string, string> = {};
    const put = (name: string, b: Bucket, round: boolean) => {
      const remaining = Math.max(0, Math.floor(b.level));
      headers[`anthropic-ratelimit-${name}-limit`] = String(b.limitPerMinute);
      headers[`anthropic-ratelimit-${name}-remaining`] = String(
        round ? Math.round(remaining / 1000) * 1000 : remaining,
      );
      headers[`anthropic-ratelimit-${name}-reset`] = rfc3339(now + b.msUntilFull());
    };
    put('requests', s.requests, false);
    put('input-tokens', s.tokens, true);
    put('output-tokens', s.output, true);
    put('tokens', s.output.level < s.tokens.level ? s.output : s.tokens, true);
    return headers;
  };

  const json = (res: ServerResponse, status: number, headers: Record<string, string>, body: unknown) => {
    res.writeHead(status, { ...headers, 'content-type': 'application/json' }).end(JSON.stringify(body));
  };

  const badRequest = (res: ServerResponse, message: string) => {
    const body =
      api === 'openai'
        ? { error: { message, type: 'invalid_request_error', param: null, code: null } }
        : { type: 'error', error: { type: 'invalid_request_error', message } };
    json(res, 400, {}, body);
  };

  /** Runs `fn` after `ms` on the mock's clock; at once when `ms` is 0. */
  const after = (ms: number, fn: () => void): void => {
    if (ms <= 0) fn();
    else clock.setTimeout(fn, ms, true);
  };

  const handle = (req: IncomingMessage, res: ServerResponse, raw: string) => {
    const path = (req.url ?? '').split('?')[0];
    const expected = api === 'openai' ? '/v1/chat/completions' : '/v1/messages';
    if (req.method !== 'POST' || path !== expected) {
      json(res, 404, {}, { error: { message: `no route ${req.method} ${path}`, type: 'not_found_error' } });
      return;
    }
    let body: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(raw);
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
        throw new Error('not an object');
      body = parsed as Record<string, unknown>;
    } catch {
      badRequest(res, 'the body is not a JSON object');
      return;
    }
    const model = body.model;
    if (typeof model !== 'string' || !Array.isArray(body.messages)) {
      badRequest(res, '`model` (a string) and `messages` (an array) are required');
      return;
    }
    const maxTokens = maxTokensOf(body);
    if (api === 'anthropic' && maxTokens === undefined) {
      badRequest(res, 'max_tokens: Field required');
      return;
    }
    const now = clock.now();
    const state = stateOf(model);
    const stream = body.stream === true;
    const promptTokens = Math.ceil(promptChars(body) / charsPerToken);
    const charge = api === 'openai' ? Math.max(maxTokens ?? 0, promptTokens) : promptTokens;
    const hit: LlmHit = { at: now, model, status: 200, refusedBy: undefined, charged: 0, stream };
    hits.push(hit);

    if (mock.spendCapReached) {
      hit.status = 429;
      hit.refusedBy = 'spend_cap';
      stats.spendCapRefusals++;
      if (api === 'openai') {
        json(res, 429, openaiHeaders(state), {
          error: {
            message: 'You exceeded your current quota, please check your plan and billing details.',
            type: 'insufficient_quota',
            param: null,
            code: 'insufficient_quota',
          },
        });
      } else {
        json(res, 429, anthropicHeaders(state), {
          type: 'error',
          error: {
            type: 'rate_limit_error',
            message: 'You have reached your specified API usage limits.',
            details: { error_code: 'enforced_spend_limit_reached' },
          },
        });
      }
      return;
    }

    // Admission: every budget at once, or a 429 naming the first that cannot.
    const needs: [string, Bucket, number][] =
      api === 'openai'
        ? [
            ['requests', state.requests, 1],
            ['tokens', state.tokens, charge],
          ]
        : [
            ['requests', state.requests, 1],
            ['input_tokens', state.tokens, charge],
            ['output_tokens', state.output, Number.MIN_VALUE],
          ];
    const short = needs.find(([, bucket, amount]) => bucket.level < amount);
    if (short !== undefined) {
      const [budget, bucket, amount] = short;
      hit.status = 429;
      hit.refusedBy = budget;
      stats.throttled++;
      const tooLarge = amount > bucket.capacity;
      const waitMs = bucket.msUntil(amount);
      if (api === 'openai') {
        // Failed requests count against the request budget.
        state.requests.level = Math.max(0, state.requests.level - 1);
        const what = budget === 'requests' ? 'requests per min (RPM)' : 'tokens per min (TPM)';
        const message = tooLarge
          ? `Request too large for ${model} on ${what}: Limit ${bucket.limitPerMinute}, Requested ${amount}.`
          : `Rate limit reached for ${model} on ${what}: Limit ${bucket.limitPerMinute}, Used ${Math.ceil(bucket.capacity - bucket.level)}, Requested ${amount}. Please try again in ${goDuration(waitMs)}.`;
        const headers = openaiHeaders(state);
        if (options.retryAfter === true || options.azure === true)
          headers['retry-after'] = String(Math.max(1, Math.ceil(waitMs / 1000)));
        if (options.azure === true) headers['retry-after-ms'] = String(Math.ceil(waitMs));
        json(res, 429, headers, {
          error: { message, type: budget, param: null, code: 'rate_limit_exceeded' },
        });
      } else {
        const what = budget.replace('_', ' ');
        const headers = anthropicHeaders(state);
        headers['retry-after'] = String(Math.max(1, Math.ceil((tooLarge ? 60_000 : waitMs) / 1000)));
        json(res, 429, headers, {
          type: 'error',
          error: {
            type: 'rate_limit_error',
            message: `This request would exceed the rate limit for your organization of ${bucket.limitPerMinute} ${what} per minute.`,
          },
        });
      }
      return;
    }
    state.requests.level -= 1;
    state.tokens.level -= charge;
    hit.charged = charge;
    stats.served++;

    const wanted = options.completionTokens?.(body) ?? 64;
    const outputTokens = Math.max(1, Math.min(maxTokens ?? wanted, Math.floor(wanted)));
    const headers = api === 'openai' ? openaiHeaders(state) : anthropicHeaders(state);
    const id = `${api === 'openai' ? 'chatcmpl' : 'msg'}_mock${++ids}`;
    generate({ res, headers, id, model, stream, body, promptTokens, outputTokens, state });
  };

  interface Generation {
    res: ServerResponse;
    headers: Record<string, string>;
    id: string;
    model: string;
    stream: boolean;
    body: Record<string, unknown>;
    promptTokens: number;
    outputTokens: number;
    state: ModelState;
  }

  /** Produces the answer chunk by chunk on the clock, charging Anthropic's output bucket as it goes. */
  const generate = (g: Generation) => {
    const { res, id, model, stream, promptTokens, outputTokens } = g;
    let closed = false;
    res.on('close', () => {
      closed = true;
    });
    const includeUsage =
      api === 'anthropic' ||
      ((g.body.stream_options as { include_usage?: unknown } | undefined)?.include_usage ?? false) === true;
    const created = Math.floor(wallClock() / 1000);
    const usage =
      api === 'openai'
        ? {
            prompt_tokens: promptTokens,
            completion_tokens: outputTokens,
            total_tokens: promptTokens + outputTokens,
          }
        : {
            input_tokens: promptTokens,
            output_tokens: outputTokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
          };
    const text = (tokens: number) => 'word '.repeat(tokens).slice(0, tokens * 5);
    const send = (event: string, data: unknown) => {
      if (closed) return;
      res.write(
        api === 'openai'
          ? `data: ${JSON.stringify(data)}\n\n`
          : `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`,
      );
    };
    const chunk = (delta: Record<string, unknown>, finish: string | null) => ({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    });
    const stopReason = outputTokens >= (maxTokensOf(g.body) ?? Number.POSITIVE_INFINITY) ? 'length' : 'stop';

    if (stream) {
      res.writeHead(200, { ...g.headers, 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.flushHeaders(); // the head goes at admission, before the first token
      if (api === 'anthropic') {
        send('message_start', {
          type: 'message_start',
          message: {
            id,
            type: 'message',
            role: 'assistant',
            content: [],
            model,
            stop_reason: null,
            stop_sequence: null,
            usage: { ...usage, output_tokens: 1 },
          },
        });
      }
    }
    let done = 0;
    const step = () => {
      if (closed) return;
      const n = Math.min(tokensPerChunk, outputTokens - done);
      done += n;
      stats.outputTokens += n;
      if (api === 'anthropic') {
        g.state.output.refill(clock.now());
        g.state.output.level -= n;
      }
      if (stream) {
        if (api === 'openai') {
          send('', chunk(done === n ? { role: 'assistant', content: text(n) } : { content: text(n) }, null));
        } else {
          if (done === n) {
            send('content_block_start', {
              type: 'content_block_start',
              index: 0,
              content_block: { type: 'text', text: '' },
            });
          }
          send('content_block_delta', {
            type: 'content_block_delta',
            index: 0,
            delta: { type: 'text_delta', text: text(n) },
          });
        }
      }
      if (done < outputTokens) {
        after(perTokenMs * Math.min(tokensPerChunk, outputTokens - done), step);
        return;
      }
      finish();
    };
    const finish = () => {
      if (closed) return;
      if (!stream) {
        const answer =
          api === 'openai'
            ? {
                id,
                object: 'chat.completion',
                created,
                model,
                choices: [
                  {
                    index: 0,
                    message: { role: 'assistant', content: text(outputTokens), refusal: null },
                    logprobs: null,
                    finish_reason: stopReason,
                  },
                ],
                usage,
              }
            : {
                id,
                type: 'message',
                role: 'assistant',
                model,
                content: [{ type: 'text', text: text(outputTokens) }],
                stop_reason: stopReason === 'length' ? 'max_tokens' : 'end_turn',
                stop_sequence: null,
                usage,
              };
        json(res, 200, g.headers, answer);
        return;
      }
      if (api === 'openai') {
        send('', chunk({}, stopReason));
        if (includeUsage)
          send('', { id, object: 'chat.completion.chunk', created, model, choices: [], usage });
        if (!closed) res.end('data: [DONE]\n\n');
      } else {
        send('content_block_stop', { type: 'content_block_stop', index: 0 });
        send('message_delta', {
          type: 'message_delta',
          delta: { stop_reason: stopReason === 'length' ? 'max_tokens' : 'end_turn', stop_sequence: null },
          usage,
        });
        send('message_stop', { type: 'message_stop' });
        if (!closed) res.end();
      }
    };
    after(firstTokenMs, step);
  };

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => handle(req, res, Buffer.concat(chunks).toString('utf8')));
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string')
    throw new Error('startLlmMock: the server has no port');

  const mock: LlmMock = {
    origin: `http://127.0.0.1:${address.port}`,
    api,
    get served() {
      return stats.served;
    },
    get throttled() {
      return stats.throttled;
    },
    get spendCapRefusals() {
      return stats.spendCapRefusals;
    },
    get outputTokens() {
      return stats.outputTokens;
    },
    hits,
    spendCapReached: false,
    level(model): Readonly<Record<string, number>> {
      const s = stateOf(model);
      return api === 'openai'
        ? { requests: s.requests.level, tokens: s.tokens.level }
        : { requests: s.requests.level, input_tokens: s.tokens.level, output_tokens: s.output.level };
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
  return mock;
}
