import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { LlmMeter, rateLimitOutcome } from '../src/http/llm.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';
import { serveLocal } from './helpers/llm-clients.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const openai = new LlmMeter('openai');
const rpd = (wait: string) =>
  `Rate limit reached for gpt-4o-mini in organization org-x on requests per day (RPD): Limit 200, Used 200, Requested 1. Please try again in ${wait}. Visit https://platform.openai.com/account/rate-limits to learn more.`;
const tpm = (wait: string) =>
  `Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in ${wait}. Visit https://platform.openai.com/account/rate-limits to learn more.`;
const refused = (message: string, type: string) => ({
  error: { message, type, param: null, code: 'rate_limit_exceeded' },
});

// Regression: the wait an OpenAI 429's message asks for was its Go duration times a float
// ("1.005s" is 1004.9999999999999 ms, "20us" 0.02 ms): a wait shorter than the one asked, and
// not whole ms, where a header's wait is rounded up to whole ms (retry-after.ts).
describe("an OpenAI 429's message wait: whole ms, never below the one asked", () => {
  it.each([
    ['1.005s', 1_005],
    ['1.015s', 1_015],
    ['20us', 1],
    ['1.0021s', 1_003],
    ['1.002s', 1_002],
  ])('%s', (wait, waitMs) => {
    expect(openai.refusal(refused(tpm(wait), 'tokens'))).toStrictEqual({
      kind: 'rate',
      budgets: ['tokens'],
      waitMs,
    });
  });
});

// Regression: a 429 for a limit per day whose wait is 0 (its message's "0s", or a header's
// `retry-after-ms: 0`) was retried at once, maxAttempts times in a row, into the same daily limit:
// a daily 429 without a wait fails (no retry) because a retry sent at once meets the same limit.
describe('a 429 for a limit per day with a wait of 0', () => {
  it('fails as one without a wait: no pause, no retry (outcome)', () => {
    const message = openai.refusal(refused(rpd('0s'), 'requests'));
    if (message.kind !== 'rate') throw new Error('not a rate limit');
    expect(rateLimitOutcome({ kind: 'throttled' }, message)).toStrictEqual({ kind: 'failed' });
    const later = openai.refusal(refused(rpd('7m12s'), 'requests'));
    if (later.kind !== 'rate') throw new Error('not a rate limit');
    // The header wins (its 0 over the message's 7m12s), and a 0 is no wait.
    expect(rateLimitOutcome({ kind: 'throttled', retryAfterMs: 0 }, later)).toStrictEqual({ kind: 'failed' });
    const error = Object.assign(new Error('429'), {
      status: 429,
      headers: { 'retry-after-ms': '0' },
      error: { message: rpd('7m12s'), type: 'requests', code: 'rate_limit_exceeded' },
    });
    expect(classifyThrown(error)).toStrictEqual({ kind: 'failed' });
  });

  it.each([
    ['its message says 0s', {}],
    ['retry-after-ms: 0', { 'retry-after-ms': '0' }],
  ])('the fetch wrapper sends it once and hands back the 429 (%s)', async (_, headers) => {
    const server = { attempts: 0 };
    const sent = JSON.stringify(refused(rpd('0s'), 'requests'));
    const origin = await serveLocal((req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      server.attempts++;
      res.writeHead(429, { 'content-type': 'application/json', ...headers }).end(sent);
    }, cleanups);
    const fetch = rateLimitedFetch({
      limiters: { llm: { origins: [origin], api: 'openai' } },
      rejection: 'error',
      clock: new ManualClock(),
    });
    cleanups.push(() => fetch.close());
    const body = JSON.stringify({
      model: 'gpt-4o-mini',
      max_tokens: 10,
      messages: [{ role: 'user', content: 'hi' }],
    });
    const call = settled(
      fetch(`${origin}/v1/chat/completions`, { method: 'POST', body }).then(async (res) => [
        res.status,
        await res.text(),
      ]),
    );
    await until(() => call.done, 'the 429 handed back');
    expect(call.value).toEqual([429, sent]);
    expect(server.attempts).toBe(1);
  });
});
