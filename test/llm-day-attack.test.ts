import { describe, expect, it } from 'vitest';
import { LlmMeter } from '../src/http/llm.js';

const openai = new LlmMeter('openai');
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
