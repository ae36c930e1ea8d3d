import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { LlmClientKind } from './helpers/llm-clients.js';
import { budgetsOf, CHAT_BODY, openaiClient, refusingOnce } from './helpers/llm-refusing.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';

// Regression: with `api: 'openai'`, OpenAI's 429 for a limit per day (RPD, TPD) was read as the
// per-minute budget its `error.type` names: that budget was cut, and without a Retry-After the
// retry went after a bare 429's short wait into another 429. Its message's "Please try again in
// 7m12s." was not read, nor a per-minute 429's "Please try again in 1.002s.".

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const RPD =
  'Rate limit reached for gpt-4o-mini in organization org-x on requests per day (RPD): Limit 200, Used 200, Requested 1. Please try again in 7m12s. Visit https://platform.openai.com/account/rate-limits to learn more.';
const TPM =
  'Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in 1.002s. Visit https://platform.openai.com/account/rate-limits to learn more.';

/** The API answers its first call with OpenAI's 429 of `message` (`type` its `error.type`) and `headers`. */
function refusingWith(message: string, type: string, headers: Record<string, string> = {}) {
  const error = { message, type, param: null, code: 'rate_limit_exceeded' };
  return refusingOnce({ error }, cleanups, headers);
}

const client = (adapter: LlmClientKind, origin: string, clock: ManualClock) =>
  openaiClient(adapter, origin, clock, cleanups);

describe.each(['fetch wrapper', 'interceptor'] as const)(
  "api: 'openai', the %s: a 429 for a limit per day without Retry-After",
  (adapter) => {
    it('pauses every budget for the wait its message asks for, cuts none, and hands the 429 back past maxWait', async () => {
      const { origin, server } = await refusingWith(RPD, 'requests');
      const clock = new ManualClock();
      const { registry, post, told } = client(adapter, origin, clock);
      const events: string[] = [];
      // 7m12s is past maxWait (60 s): the retry is refused, and the caller gets the API's 429.
      const first = settled(post());
      registry.get('llm')?.on('throttled', (e) => events.push(`throttled ${e.budget} cut=${e.cut}`));
      registry.get('llm')?.on('failed', (e) => events.push(`failed ${e.budget}`));
      await until(() => first.done, 'the 429 handed back');
      expect(first.value).toBe(429);
      // An SDK is told not to retry it: its retry within seconds would meet the limiter's pause.
      expect(told).toEqual(['false']);
      expect(server.attempts).toBe(1);
      expect(budgetsOf(registry)).toEqual({ requests: [0, 432_000], tokens: [0, 432_000] });
      // A throttle of each budget that pauses, in the events, the snapshot and so the metrics, with
      // no cut: not a failed answer.
      expect(events).toEqual(['throttled requests cut=false', 'throttled tokens cut=false']);
      const all = registry.get('llm')?.snapshot().budgets ?? {};
      expect(Object.values(all).map((b) => [b.throttles, b.cuts])).toEqual([
        [1, 0],
        [1, 0],
      ]);
      // A call while the pause lasts is refused before it is sent, as behind a long Retry-After.
      await expect(post()).rejects.toBeInstanceOf(RateLimitRejectedError);
      expect(server.attempts).toBe(1);
      clock.advance(432_000);
      expect(await post()).toBe(200);
      expect(server.attempts).toBe(2);
    });
  },
);

describe("api: 'openai', the fetch wrapper: the wait a 429's message asks for", () => {
  it('times the retry of a per-minute 429 without Retry-After, and cuts the budget it names', async () => {
    const { origin, server } = await refusingWith(TPM, 'tokens');
    const clock = new ManualClock();
    const { registry, post } = client('fetch wrapper', origin, clock);
    const call = settled(post());
    await until(() => budgetsOf(registry).tokens?.[1] !== undefined, 'the 429 judged');
    expect(budgetsOf(registry)).toEqual({ requests: [0, undefined], tokens: [1, 1_002] });
    expect(server.attempts).toBe(1);
    clock.advance(1_002);
    await until(() => call.done, 'the retry');
    expect(call.value).toBe(200);
    expect(server.attempts).toBe(2);
  });

  it("takes the 429's Retry-After over its message's wait, and cuts no budget for a limit per day", async () => {
    const { origin, server } = await refusingWith(RPD, 'requests', { 'retry-after': '2' });
    const clock = new ManualClock();
    const { registry, post } = client('fetch wrapper', origin, clock);
    const call = settled(post());
    await until(() => budgetsOf(registry).requests?.[1] !== undefined, 'the 429 judged');
    expect(budgetsOf(registry)).toEqual({ requests: [0, 2_000], tokens: [0, 2_000] });
    clock.advance(2_000);
    await until(() => call.done, 'the retry');
    expect(call.value).toBe(200);
    expect(server.attempts).toBe(2);
  });
});

describe("api: 'openai', the fetch wrapper: a daily wait longer than maxPause", () => {
  const TWO_HOURS = RPD.replace('7m12s', '2h0m0s');

  it('pauses for maxPause (10 min by default), as behind a long Retry-After, and for the whole wait with a larger maxPause', async () => {
    for (const [maxPause, paused] of [
      [undefined, 600_000],
      [3 * 3_600_000, 7_200_000],
    ] as const) {
      const { origin } = await refusingWith(TWO_HOURS, 'requests');
      const clock = new ManualClock();
      const fetch = rateLimitedFetch({
        limiters: {
          llm: { origins: [origin], api: 'openai', ...(maxPause === undefined ? {} : { maxPause }) },
        },
        clock,
      });
      cleanups.push(() => fetch.close());
      const res = await fetch(`${origin}/v1/chat/completions`, { method: 'POST', body: CHAT_BODY });
      await res.text();
      expect(res.status).toBe(429);
      expect(budgetsOf(fetch.registry)).toEqual({ requests: [0, paused], tokens: [0, paused] });
    }
  });
});
