import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { InvalidCallbackValueError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import { wrap } from '../src/wrap/wrap.js';

// Attack on wrap() with a limiter of several budgets, as an LLM SDK call uses it. SDK errors are
// the SDKs' own classes (openai's RateLimitError: status, headers a Headers, error the body's
// `error`; Anthropic's: error the whole body).

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

function setup(budgets: AdaptiveLimiterOptions['budgets']) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, slowStart: false, budgets });
  return { clock, limiter };
}

/** Settles `p` on the manual clock: `step` ms a round, at most `rounds` rounds. */
async function settle<T>(p: Promise<T>, clock: ManualClock, step: number, rounds: number) {
  let out: { value?: T; error?: unknown } | undefined;
  p.then(
    (value) => (out = { value }),
    (error: unknown) => (out = { error }),
  );
  for (let i = 0; i < rounds && out === undefined; i++) {
    await flush();
    clock.advance(step);
  }
  return out;
}

const openai429 = (error: Record<string, unknown>, headers: Record<string, string> = {}) =>
  new OpenAI.RateLimitError(429, error, undefined, new Headers(headers));

describe('wrap with budgets: bugs', () => {
  it('an async costs function (a Promise) is refused with InvalidCallbackValueError naming costs, not run drawing no tokens', async () => {
    const { clock, limiter } = setup({
      requests: { initialUnitsPerMinute: 600 },
      tokens: { initialUnitsPerMinute: 60_000, burst: 'second' },
    });
    let sent = 0;
    const call = wrap(
      limiter,
      async (_request: { max_tokens: number }) => {
        sent++;
        return 'answer';
      },
      // A costs function that looks the prompt's tokens up (a tokenizer loaded lazily).
      { costs: (async (r: { max_tokens: number }) => ({ tokens: r.max_tokens })) as never },
    );
    const before = limiter.snapshot().budgets?.tokens?.tokens;
    const out = await settle(call({ max_tokens: 800 }), clock, 0, 5);
    // Today: the call is sent, and the tokens budget never sees its 800 tokens.
    expect({ sent, tokens: limiter.snapshot().budgets?.tokens?.tokens, before }).toMatchObject({ sent: 0 });
    expect(out?.error).toBeInstanceOf(InvalidCallbackValueError);
    expect((out as { error: InvalidCallbackValueError }).error.callback).toBe('costs');
  });

  it('openai\'s "Request too large" 429 gives its tokens back (no retry, no cut, and no debt), as with api', async () => {
    const { clock, limiter } = setup({
      requests: { initialUnitsPerMinute: 600 },
      tokens: { initialUnitsPerMinute: 10_000 },
    });
    const tooLarge = openai429({
      message:
        'Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 10000, Requested 50000. The input or output tokens must be reduced in order to run successfully.',
      type: 'tokens',
      param: null,
      code: 'rate_limit_exceeded',
    });
    let sent = 0;
    const call = wrap(
      limiter,
      async (tokens: number) => {
        sent++;
        if (tokens > 10_000) throw tooLarge;
        return 'ok';
      },
      { costs: (tokens: number) => ({ tokens }) },
    );
    const big = await settle(call(50_000), clock, 0, 5);
    expect(big?.error).toBe(tooLarge); // held: the SDK's own error, sent once, no cut
    expect(sent).toBe(1);
    expect(limiter.snapshot().budgets?.tokens?.cuts).toBe(0);
    // The API did no work: the 50,000 tokens must not stay drawn. Today the budget is left at
    // -49,831 tokens, so the next small call waits 5 minutes: past maxWait (60 s), it is refused.
    expect(limiter.snapshot().budgets?.tokens?.tokens).toBeGreaterThan(-1_000);
    const next = await settle(call(100), clock, 1_000, 30);
    expect(next).toEqual({ value: 'ok' });
  });

  it("openai's 400 context_length_exceeded (refused, no work done) gives its tokens back, as with api", async () => {
    const { clock, limiter } = setup({
      requests: { initialUnitsPerMinute: 600 },
      tokens: { initialUnitsPerMinute: 60_000, burst: 'second' },
    });
    const refused = new OpenAI.BadRequestError(
      400,
      {
        message: "This model's maximum context length is 8192 tokens.",
        type: 'invalid_request_error',
        param: 'messages',
        code: 'context_length_exceeded',
      },
      undefined,
      new Headers({ 'x-request-id': 'req_1' }),
    );
    const before = limiter.snapshot().budgets?.tokens?.tokens ?? Number.NaN;
    const call = wrap(
      limiter,
      async () => {
        throw refused;
      },
      { costs: { tokens: 900 } },
    );
    expect((await settle(call(), clock, 0, 5))?.error).toBe(refused);
    // Today 100: the 900 tokens stay drawn for a call the API refused before doing any work.
    expect(limiter.snapshot().budgets?.tokens?.tokens).toBeCloseTo(before);
  });
});

describe('wrap with budgets: what held (pinned)', () => {
  it('20 calls in flight meet openai tokens 429s: one tokens cut, requests untouched, each retried once after retry-after-ms', async () => {
    const { clock, limiter } = setup({
      requests: { initialUnitsPerMinute: 60_000, burst: 'second' },
      tokens: { initialUnitsPerMinute: 6_000_000, burst: 'second' },
    });
    const tries = new Map<number, number>();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const call = wrap(
      limiter,
      async (i: number) => {
        const n = (tries.get(i) ?? 0) + 1;
        tries.set(i, n);
        if (n > 1) return i;
        await gate;
        throw openai429(
          {
            message:
              'Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.',
            type: 'tokens',
            param: null,
            code: 'rate_limit_exceeded',
          },
          {
            'retry-after-ms': '1500',
            'x-ratelimit-reset-tokens': '6m0s',
            'x-ratelimit-remaining-tokens': '0',
          },
        );
      },
      { costs: { tokens: 1_000 } },
    );
    const all = Promise.all(Array.from({ length: 20 }, (_, i) => call(i)));
    for (let i = 0; i < 50 && tries.size < 20; i++) await flush();
    expect(tries.size).toBe(20);
    const at = clock.now();
    release();
    for (let i = 0; i < 5; i++) await flush();
    const s = limiter.snapshot();
    expect([s.cuts, s.throttles, s.pausedUntil]).toEqual([0, 0, undefined]);
    expect(s.budgets?.tokens?.cuts).toBe(1);
    expect(s.budgets?.tokens?.pausedUntil).toBe(at + 1_500); // the header's wait: not 2 s, not 6 min
    const out = await settle(all, clock, 100, 100);
    expect(out?.value).toHaveLength(20);
    expect([...tries.values()]).toEqual(Array(20).fill(2));
  });

  it("a daily (TPD) 429 asking 2h13m pauses every budget drawn for maxPause, cuts none; the caller gets the SDK's error", async () => {
    const { clock, limiter } = setup({ requests: {}, tokens: {} });
    const daily = openai429({
      message:
        'Rate limit reached for gpt-4o in organization org-x on tokens per day (TPD): Limit 1000000, Used 999000, Requested 2000. Please try again in 2h13m.',
      type: 'tokens',
      code: 'rate_limit_exceeded',
    });
    let sent = 0;
    const call = wrap(
      limiter,
      async () => {
        sent++;
        throw daily;
      },
      { costs: { tokens: 100 } },
    );
    const out = await settle(call(), clock, 0, 5);
    expect(out?.error).toBe(daily);
    expect(sent).toBe(1);
    const s = limiter.snapshot();
    expect([s.cuts, s.budgets?.tokens?.cuts]).toEqual([0, 0]);
    expect([s.pausedUntil, s.budgets?.tokens?.pausedUntil]).toEqual([600_000, 600_000]);
  });

  it("an abort while an Anthropic requests-429's retry waits: rejected with the reason, the call's tokens given back", async () => {
    const { clock, limiter } = setup({
      requests: { initialUnitsPerMinute: 600 },
      input_tokens: { initialUnitsPerMinute: 60_000, burst: 'second' },
      output_tokens: { initialUnitsPerMinute: 60_000, burst: 'second' },
    });
    const refusal = new Anthropic.RateLimitError(
      429,
      {
        type: 'error',
        error: {
          type: 'rate_limit_error',
          message:
            'This request would exceed the rate limit for your organization of 50 requests per minute.',
        },
      },
      undefined,
      new Headers({ 'retry-after': '20' }),
    );
    const controller = new AbortController();
    const call = wrap(
      limiter,
      async () => {
        throw refusal;
      },
      { costs: { input_tokens: 700, output_tokens: 300 }, signal: controller.signal },
    );
    const level = () => {
      const b = limiter.snapshot().budgets;
      return [b?.input_tokens?.tokens, b?.output_tokens?.tokens];
    };
    const before = level();
    const pending = call();
    pending.catch(() => undefined);
    for (let i = 0; i < 5; i++) await flush();
    expect(limiter.snapshot().queued).toBe(1); // the retry waits out the 20 s pause
    expect(limiter.snapshot().budgets?.requests?.cuts).toBe(1);
    const reason = new Error('user left');
    controller.abort(reason);
    expect((await settle(pending, clock, 0, 5))?.error).toBe(reason);
    expect(level()).toEqual(before);
    expect(limiter.snapshot().budgets?.input_tokens?.queuedUnits).toBe(0);
  });
});
