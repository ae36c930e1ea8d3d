import { afterEach, describe, expect, it, vi } from 'vitest';
import { HANDLER_THREW_WARNING } from '../src/http/handler-threw.js';
import { LlmMeter } from '../src/http/llm.js';
import { anthropicCall, anthropicServer } from './helpers/anthropic-server.js';

// The correction of a call's estimate by the usage its answer told runs at the answer's end,
// before the caller is told it. Regression: a throw there skipped the caller's onResponseEnd, and
// a call through the interceptor never ended (a lost request). The caller is told the end; the
// throw is reported as an ARL_HANDLER_THREW warning.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Makes the meter's reading of the usage throw `thrown`; resolves with the warning reporting it. */
function correctionThrows(thrown: Error): Promise<Error> {
  vi.spyOn(LlmMeter.prototype, 'used').mockImplementation(() => {
    throw thrown;
  });
  return new Promise((resolve) => {
    const onWarning = (warning: Error) => {
      if ((warning as { code?: string }).code !== HANDLER_THREW_WARNING || warning.cause !== thrown) return;
      process.off('warning', onWarning);
      resolve(warning);
    };
    process.on('warning', onWarning);
    cleanups.push(() => process.off('warning', onWarning));
  });
}

describe('a throw of the correction of an LLM call by its usage', () => {
  it('the interceptor: the call ends with the answer; the throw is reported', async () => {
    const thrown = new Error('correction failed');
    const warned = correctionThrows(thrown);
    const origin = await anthropicServer({ input_tokens: 7, output_tokens: 5 }, cleanups);
    const answer = await anthropicCall(origin, 'interceptor', cleanups);
    expect(answer.status).toBe(200);
    expect(JSON.parse(await answer.text()).usage.output_tokens).toBe(5);
    const warning = await warned;
    expect(warning.message).toContain('"llm"');
    expect(warning.message).toContain('correction failed');
  });

  it('the fetch wrapper: the caller reads the whole answer; the throw is reported', async () => {
    const thrown = new Error('correction failed');
    const warned = correctionThrows(thrown);
    const origin = await anthropicServer({ input_tokens: 7, output_tokens: 5 }, cleanups);
    const answer = await anthropicCall(origin, 'fetch wrapper', cleanups);
    expect(answer.status).toBe(200);
    expect(JSON.parse(await answer.text()).usage.output_tokens).toBe(5);
    expect((await warned).cause).toBe(thrown);
  });
});
