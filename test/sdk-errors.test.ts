import Anthropic from '@anthropic-ai/sdk';
import { S3ServiceException } from '@aws-sdk/client-s3';
import { AxiosError, AxiosHeaders, type InternalAxiosRequestConfig } from 'axios';
import { HTTPError as KyHTTPError } from 'ky';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { AdaptiveRateLimiter, classifyThrown, ManualClock, wrap } from '../src/index.js';
import { startLlmMock } from './helpers/llm-mock.js';

/** A thrown 429 of each SDK, as the SDK builds it (or, for got and Octokit, in the shape they give it). */
const throttledErrors: [string, () => unknown, number | undefined][] = [
  [
    'openai RateLimitError, retry-after-ms in a Headers',
    () => new OpenAI.RateLimitError(429, undefined, 'slow down', new Headers({ 'retry-after-ms': '1500' })),
    1500,
  ],
  [
    'Anthropic RateLimitError, Retry-After in a Headers',
    () => new Anthropic.RateLimitError(429, undefined, 'slow down', new Headers({ 'retry-after': '7' })),
    7000,
  ],
  [
    'Octokit RequestError: status, response.headers as a record',
    () =>
      Object.assign(new Error('slow down'), {
        status: 429,
        response: { status: 429, headers: { 'retry-after': '3' } },
      }),
    3000,
  ],
  [
    'ky HTTPError: response is a Response',
    () =>
      new KyHTTPError(
        new Response('slow down', { status: 429, headers: { 'Retry-After': '2' } }),
        new Request('http://127.0.0.1/'),
        {} as never,
      ),
    2000,
  ],
  [
    'got HTTPError: response.statusCode, response.headers as a record',
    () => Object.assign(new Error('429'), { response: { statusCode: 429, headers: { 'retry-after': '4' } } }),
    4000,
  ],
  [
    'axios AxiosError: response.headers is an AxiosHeaders',
    () =>
      new AxiosError('429', 'ERR_BAD_REQUEST', undefined, undefined, {
        status: 429,
        statusText: 'Too Many Requests',
        headers: new AxiosHeaders({ 'Retry-After': '5' }),
        data: '',
        config: {} as InternalAxiosRequestConfig,
      }),
    5000,
  ],
  [
    'AWS ThrottlingException with a 400',
    () =>
      Object.assign(
        new S3ServiceException({
          name: 'ThrottlingException',
          $fault: 'client',
          $metadata: { httpStatusCode: 400 },
        }),
        { $response: { statusCode: 400, headers: { 'retry-after': '6' } } },
      ),
    6000,
  ],
  [
    "AWS S3's SlowDown with a 503, no Retry-After",
    () => new S3ServiceException({ name: 'SlowDown', $fault: 'server', $metadata: { httpStatusCode: 503 } }),
    undefined,
  ],
  [
    'AWS TooManyRequestsException by $metadata.httpStatusCode 429',
    () =>
      new S3ServiceException({
        name: 'TooManyRequestsException',
        $fault: 'client',
        $metadata: { httpStatusCode: 429 },
      }),
    undefined,
  ],
  [
    'an error with its own retryAfterMs',
    () => Object.assign(new Error('x'), { statusCode: 429, retryAfterMs: 900 }),
    900,
  ],
];

describe('classifyThrown: the SDKs’ errors', () => {
  it.each(throttledErrors)('%s is a throttle with its wait', (_name, make, retryAfterMs) => {
    const outcome = classifyThrown(make());
    expect(outcome).toEqual(
      retryAfterMs === undefined ? { kind: 'throttled' } : { kind: 'throttled', retryAfterMs },
    );
  });

  it.each([
    [
      'a 404 with Retry-After (a wait kept only on a server error)',
      { status: 404, headers: { 'retry-after': '9' } },
    ],
    ['a 400 of an SDK of no LLM API', { status: 400, error: { message: 'bad' } }],
    ['an Octokit 403 with no quota header', { status: 403, response: { status: 403, headers: {} } }],
    ['a 401, axios-shaped', { response: { status: 401, headers: {} } }],
  ])(
    '%s is an answer the server processed: a success of its units, as the HTTP adapters count it',
    (_name, error) => {
      expect(classifyThrown(error)).toEqual({ kind: 'success' });
    },
  );

  it.each([
    ['a plain Error (no HTTP answer)', new Error('boom'), { kind: 'failed', noAnswer: true }],
    [
      'a connection refused (never sent)',
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
      { kind: 'failed', notSent: true },
    ],
    ['a string', 'boom', { kind: 'failed', noAnswer: true }],
    [
      'a 503 with Retry-After',
      { response: { status: 503, headers: new Headers({ 'retry-after': '9' }) } },
      { kind: 'failed', retryAfterMs: 9000 },
    ],
    ['a status out of range', { status: 4290 }, { kind: 'failed', noAnswer: true }],
    [
      "openai's insufficient_quota (no retry can pass it)",
      new OpenAI.RateLimitError(
        429,
        {
          type: 'insufficient_quota',
          code: 'insufficient_quota',
          message: 'You exceeded your current quota',
        },
        undefined,
        new Headers(),
      ),
      { kind: 'failed' },
    ],
    [
      "Anthropic's enforced_spend_limit_reached",
      new Anthropic.RateLimitError(
        429,
        {
          type: 'error',
          error: {
            type: 'rate_limit_error',
            message: 'spend limit reached',
            details: { error_code: 'enforced_spend_limit_reached' },
          },
        },
        undefined,
        new Headers(),
      ),
      { kind: 'failed' },
    ],
  ])('%s is a failure', (_name, error, outcome) => {
    expect(classifyThrown(error)).toEqual(outcome);
  });

  it.each([
    [
      'openai\'s "Request too large" (Limit below Requested)',
      new OpenAI.RateLimitError(
        429,
        {
          type: 'tokens',
          code: 'rate_limit_exceeded',
          message: 'Request too large for gpt-4o on tokens per min (TPM): Limit 10000, Requested 50000.',
        },
        undefined,
        new Headers(),
      ),
    ],
    [
      "openai's 400 context_length_exceeded",
      new OpenAI.BadRequestError(
        400,
        { type: 'invalid_request_error', code: 'context_length_exceeded', message: 'too long' },
        undefined,
        new Headers(),
      ),
    ],
  ])('%s is a call the API refused: its draws given back, no retry, no cut', (_name, error) => {
    expect(classifyThrown(error)).toEqual({ kind: 'success', refused: true });
  });

  it("keeps openai's rate-limit 429 on tokens a throttle of the tokens budget (Used and Requested within the Limit)", () => {
    const error = new OpenAI.RateLimitError(
      429,
      {
        type: 'tokens',
        code: 'rate_limit_exceeded',
        message:
          'Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.',
      },
      undefined,
      new Headers({ 'retry-after-ms': '2000' }),
    );
    expect(classifyThrown(error)).toEqual({ kind: 'throttled', retryAfterMs: 2000, budgets: ['tokens'] });
  });

  // Regression: openai's 429 for a limit per day was a throttle of the requests budget (cut), its
  // message's wait not read: without a header, the retry came soon into another 429.
  const daily = (headers: Headers) =>
    new OpenAI.RateLimitError(
      429,
      {
        type: 'requests',
        code: 'rate_limit_exceeded',
        message:
          'Rate limit reached for gpt-4o-mini in organization org-x on requests per day (RPD): Limit 200, Used 200, Requested 1. Please try again in 7m12s. Visit https://platform.openai.com/account/rate-limits to learn more.',
      },
      undefined,
      headers,
    );

  it("reads openai's 429 for a limit per day as a pause for its message's wait, no budget cut", () => {
    expect(classifyThrown(daily(new Headers()))).toStrictEqual({
      kind: 'throttled',
      retryAfterMs: 432_000,
      pauseOnly: true,
    });
  });

  it("takes the 429's Retry-After over its message's wait", () => {
    expect(classifyThrown(daily(new Headers({ 'retry-after': '2' })))).toStrictEqual({
      kind: 'throttled',
      retryAfterMs: 2000,
      pauseOnly: true,
    });
  });

  // Regression: Azure OpenAI's 429 through the openai SDK (no `error.type`, no retry-after header)
  // gave no wait and named no budget: its "Please retry after 6 seconds." was not read.
  it("reads Azure OpenAI's 429 message: its wait in seconds and the budget it names", () => {
    const error = new OpenAI.RateLimitError(
      429,
      {
        code: '429',
        message:
          'Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds.',
      },
      undefined,
      new Headers(),
    );
    expect(classifyThrown(error)).toStrictEqual({
      kind: 'throttled',
      retryAfterMs: 6_000,
      budgets: ['tokens'],
    });
  });
});

describe('wrap reads the SDKs’ errors', () => {
  // Regression: wrap cut every budget for a 429 of one (the requests budget cut for a tokens 429).
  it("cuts only the budget an openai 429 names (error.type 'tokens'), as the adapters with api do", async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      budgets: { requests: { initialUnitsPerMinute: 600 }, tokens: { initialUnitsPerMinute: 60_000 } },
    });
    let calls = 0;
    const wrapped = wrap(
      limiter,
      async () => {
        calls++;
        if (calls === 1) {
          throw new OpenAI.RateLimitError(
            429,
            {
              type: 'tokens',
              code: 'rate_limit_exceeded',
              message: 'Rate limit reached on tokens per min (TPM)',
            },
            undefined,
            new Headers({ 'retry-after-ms': '0' }),
          );
        }
        return 'ok';
      },
      { costs: { tokens: 100 } },
    );
    const result = wrapped();
    for (let i = 0; i < 50 && calls < 2; i++) {
      await flush();
      clock.advance(100);
    }
    await expect(result).resolves.toBe('ok');
    const { budgets } = limiter.snapshot();
    expect([budgets?.requests?.cuts, budgets?.tokens?.cuts]).toEqual([0, 1]);
    limiter.close();
  });

  // Regression: wrap read a spend cap as a throttle: it retried the call (2 more sends spread over
  // up to a minute), cut every budget and paused the limiter for its other callers.
  it.each(['openai', 'anthropic'] as const)(
    '%s: a spend cap ends the wrapped SDK call at once with its error: sent once, no cut, no pause',
    async (api) => {
      const clock = new ManualClock();
      const mock = await startLlmMock({ api, clock });
      mock.spendCapReached = true;
      const limiter = new AdaptiveRateLimiter({ clock, budgets: { requests: {}, tokens: {} } });
      const options = {
        apiKey: 'k',
        maxRetries: 0,
        logger: { debug() {}, info() {}, warn() {}, error() {} },
      };
      const request = { model: 'm', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 10 };
      const call: () => Promise<unknown> =
        api === 'openai'
          ? (() => {
              const openai = new OpenAI({ ...options, baseURL: `${mock.origin}/v1` });
              return () => openai.chat.completions.create(request);
            })()
          : (() => {
              const anthropic = new Anthropic({ ...options, baseURL: mock.origin });
              return () => anthropic.messages.create(request);
            })();
      try {
        // On a manual clock nothing moves: a retry would wait here until the test times out.
        await expect(wrap(limiter, call, { costs: { tokens: 10 } })()).rejects.toMatchObject({ status: 429 });
        expect(mock.hits.map((h) => h.refusedBy)).toEqual(['spend_cap']);
        const { budgets } = limiter.snapshot();
        expect([budgets?.requests, budgets?.tokens].map((b) => [b?.cuts, b?.pausedUntil])).toEqual([
          [0, undefined],
          [0, undefined],
        ]);
      } finally {
        limiter.close();
        await mock.close();
      }
    },
  );

  it('pauses for the Retry-After of a ky HTTPError it was given (not within a second)', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({ clock, initialUnitsPerMinute: 60_000, maxWait: 60_000 });
    const [, make] = throttledErrors[3] as (typeof throttledErrors)[number];
    let calls = 0;
    const wrapped = wrap(
      limiter,
      async () => {
        calls++;
        if (calls === 1) throw make();
        return 'ok';
      },
      { maxAttempts: 2 },
    );
    const result = wrapped();
    await flush();
    expect(calls).toBe(1);
    expect(limiter.snapshot()).toMatchObject({ throttles: 1, pausedUntil: 2000 });
    clock.advance(1999);
    await flush();
    expect(calls).toBe(1);
    clock.advance(1);
    await expect(result).resolves.toBe('ok');
    expect(calls).toBe(2);
  });
});

async function flush(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}
