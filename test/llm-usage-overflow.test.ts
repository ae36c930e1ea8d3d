import { afterEach, describe, expect, it } from 'vitest';
import { anthropicCall, anthropicServer } from './helpers/anthropic-server.js';

// An Anthropic answer whose `usage` adds up past the largest number (input_tokens and
// cache_creation_input_tokens of 1e308 each: each one a finite count, their sum Infinity).
// Regression: the correction charged Infinity, which charge() refuses (InvalidArgumentError):
// through the fetch wrapper the caller's read of a whole 200 ended with that error, through the
// interceptor the call never ended. A usage that cannot be charged keeps the estimate.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Each count finite, their sum Infinity. */
const OVERFLOWING = { input_tokens: 1e308, cache_creation_input_tokens: 1e308, output_tokens: 5 };

describe("api: 'anthropic': a usage that adds up past the largest number", () => {
  it('the fetch wrapper: the caller reads the whole answer; the estimate is kept', async () => {
    const origin = await anthropicServer(OVERFLOWING, cleanups);
    const answer = await anthropicCall(origin, 'fetch wrapper', cleanups);
    expect(answer.status).toBe(200);
    expect(JSON.parse(await answer.text()).usage.output_tokens).toBe(5);
  });

  it('the interceptor: the call ends with the answer', async () => {
    const origin = await anthropicServer(OVERFLOWING, cleanups);
    const answer = await anthropicCall(origin, 'interceptor', cleanups);
    expect(answer.status).toBe(200);
    expect(JSON.parse(await answer.text()).usage.output_tokens).toBe(5);
  });
});
