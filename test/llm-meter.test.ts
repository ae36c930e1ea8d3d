import { describe, expect, it } from 'vitest';
import { LlmMeter, UsageScanner } from '../src/http/llm.js';
import { meteredBody } from '../src/http/llm-body.js';

const bytes = (text: string) => new TextEncoder().encode(text);

/** Feeds `text` to a scanner in chunks of `size` bytes (events split anywhere). */
function scan(type: string, text: string, size = 7) {
  const scanner = new UsageScanner(type);
  const all = bytes(text);
  for (let i = 0; i < all.length; i += size) scanner.push(all.subarray(i, i + size));
  return scanner.end();
}

describe('LlmMeter.estimateOf', () => {
  // Regression: a body held as a string or bytes but not parsed (no JSON content type: fetch's
  // default for a string is text/plain) was charged the running average (1,000 tokens before any
  // answer), and bytes 1 token.
  const chat = { messages: [{ role: 'user', content: 'a'.repeat(400) }], max_tokens: 50 };

  it('reads a JSON string or bytes sent with no JSON content type as the JSON it is', () => {
    for (const body of [JSON.stringify(chat), bytes(JSON.stringify(chat))]) {
      expect(new LlmMeter('openai').estimateOf(() => meteredBody(body), 'POST', '')).toEqual({
        costs: { tokens: 100 },
        maxTokens: 50,
        seen: true,
      });
      expect(new LlmMeter('anthropic').estimateOf(() => meteredBody(body), 'POST', '').costs).toEqual({
        input_tokens: 100,
        output_tokens: 50,
      });
    }
  });

  it('charges a body that is not JSON its characters/4', () => {
    for (const body of ['b'.repeat(403), bytes('b'.repeat(403))]) {
      expect(new LlmMeter('openai').estimateOf(() => meteredBody(body), 'POST', '')).toEqual({
        costs: { tokens: 101 },
        maxTokens: undefined,
        seen: false,
      });
      expect(
        new LlmMeter('anthropic').estimateOf(() => meteredBody(body), 'POST', '').costs.input_tokens,
      ).toBe(101);
    }
  });

  it('charges no tokens to a call that runs no model: a GET, a DELETE, a count of tokens', () => {
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(10_000) }] });
    for (const [method, path] of <[string, string][]>[
      ['GET', '/v1/batches/b1'],
      ['DELETE', '/v1/files/f1'],
      ['POST', '/v1/messages/count_tokens'],
      ['POST', '/v1/responses/input_tokens?x=1'],
    ]) {
      expect(new LlmMeter('openai').estimateOf(() => meteredBody(body), method, path).costs).toEqual({
        tokens: 0,
      });
      expect(new LlmMeter('anthropic').estimateOf(() => meteredBody(body), method, path).costs).toEqual({
        input_tokens: 0,
        output_tokens: 0,
      });
    }
    expect(
      new LlmMeter('anthropic').estimateOf(() => meteredBody(body), 'POST', '/v1/messages').costs
        .input_tokens,
    ).toBe(2_500);
  });

  it('charges a body it cannot see (a stream) the running average: 1,000 tokens before any answer', () => {
    expect(new LlmMeter('openai').estimateOf(() => meteredBody(undefined), 'POST', '').costs).toEqual({
      tokens: 1_000,
    });
  });
});

describe('UsageScanner', () => {
  // Regression: a JSON answer was kept up to 8 MiB, a stream's event without bound (a stream with
  // no blank line was held whole in memory). An event longer than 8 MiB is dropped as it grows,
  // as a longer JSON answer is; the events after it are read.
  it('drops a stream event longer than 8 MiB, and reads the events after it', () => {
    const pad = bytes('x'.repeat(1024 * 1024));
    const long = (scanner: UsageScanner) => {
      scanner.push(bytes('data: {"usage":{"prompt_tokens":1},"pad":"'));
      for (let i = 0; i < 9; i++) scanner.push(pad);
    };
    const scanner = new UsageScanner('text/event-stream');
    long(scanner);
    scanner.push(bytes('"}\n\n'));
    expect(scanner.end()).toBeUndefined();
    const after = new UsageScanner('text/event-stream');
    long(after);
    after.push(bytes('"}\n\ndata: {"usage":{"prompt_tokens":7}}\n\n'));
    expect(after.end()).toEqual({ prompt_tokens: 7 });
  });

  it('reads every event wherever the chunks split its blank line (\\n\\n or \\r\\n\\r\\n), at every chunk size', () => {
    for (const eol of ['\n', '\r\n']) {
      const text =
        `event: a${eol}data: {"usage":{"input_tokens":5}}${eol}${eol}` +
        `data: {"x":1}${eol}${eol}` +
        `data: {"usage":{"output_tokens":9}}${eol}${eol}`;
      for (let size = 1; size <= text.length; size++) {
        expect(scan('text/event-stream', text, size)).toEqual({ input_tokens: 5, output_tokens: 9 });
      }
    }
  });

  it('reads a 6 MB event in 16 KiB chunks, each chunk searched once (the event loop was blocked 1.2 s)', () => {
    // Counted, not timed: the text the scanner's search reads over the whole stream.
    const event = `data: {"type":"response.output_item.done","image":"${'A'.repeat(6 * 1024 * 1024)}"}\n\n`;
    const done =
      'data: {"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":4}}}\n\n';
    const exec = RegExp.prototype.exec;
    let searched = 0;
    RegExp.prototype.exec = function (this: RegExp, text: string) {
      searched += text.length - this.lastIndex;
      return exec.call(this, text);
    };
    try {
      expect(scan('text/event-stream', event + done, 16 * 1024)).toEqual({
        input_tokens: 3,
        output_tokens: 4,
      });
    } finally {
      RegExp.prototype.exec = exec;
    }
    expect(searched).toBeLessThan(3 * (event.length + done.length));
  });

  it("reads OpenAI's last chunk, split anywhere, ignoring [DONE]", () => {
    const text =
      'data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}\n\n' +
      'data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}\n\n' +
      'data: [DONE]\n\n';
    expect(scan('text/event-stream', text)).toEqual({ prompt_tokens: 12, completion_tokens: 3 });
  });

  it("merges Anthropic's message_start and message_delta", () => {
    const text =
      'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":40,"output_tokens":1}}}\n\n' +
      'event: message_delta\r\ndata: {"type":"message_delta","usage":{"output_tokens":25}}\r\n\r\n';
    expect(scan('text/event-stream; charset=utf-8', text, 5)).toEqual({
      input_tokens: 40,
      output_tokens: 25,
    });
  });

  it("reads the Responses API's response.completed event and a JSON answer", () => {
    const event =
      'data: {"type":"response.completed","response":{"usage":{"input_tokens":9,"output_tokens":4}}}\n\n';
    expect(scan('text/event-stream', event)).toEqual({ input_tokens: 9, output_tokens: 4 });
    expect(scan('application/json', '{"id":"x","usage":{"prompt_tokens":5,"completion_tokens":2}}')).toEqual({
      prompt_tokens: 5,
      completion_tokens: 2,
    });
    expect(scan('application/json', '{"truncated":')).toBeUndefined();
  });
});

describe('LlmMeter', () => {
  it('counts the text of contents nested 200,000 deep (no stack overflow)', () => {
    let content: unknown = [{ type: 'text', text: 'x'.repeat(4_000) }];
    for (let i = 0; i < 200_000; i++) content = [{ type: 'tool_result', content }];
    const body = { model: 'm', messages: [{ role: 'user', content }], max_tokens: 10 };
    expect(new LlmMeter('openai').estimateOf(() => meteredBody(body), 'POST', '').costs).toEqual({
      tokens: 1_000,
    });
  });

  it("a refused call's usage is what it used, not max_tokens (it was not admitted)", () => {
    const meter = new LlmMeter('openai');
    const estimate = meter.estimateOf(
      () => meteredBody({ model: 'm', messages: [], max_tokens: 1_000_000 }),
      'POST',
      '',
    );
    expect(meter.used({ prompt_tokens: 30, completion_tokens: 0 }, estimate, true)).toEqual({ tokens: 30 });
    expect(meter.used({ prompt_tokens: 30, completion_tokens: 0 }, estimate)).toEqual({ tokens: 1_000_000 });
  });

  it('OpenAI: charges the larger of max_tokens times n and characters/4, as OpenAI does, and corrects from usage', () => {
    const meter = new LlmMeter('openai');
    const body = {
      model: 'm',
      messages: [{ role: 'user', content: 'x'.repeat(4_000) }],
      max_tokens: 300,
      n: 2,
    };
    const estimate = meter.estimateOf(() => meteredBody(body), 'POST', '');
    expect(estimate.costs).toEqual({ tokens: 1_000 });
    expect(meter.used({ prompt_tokens: 1_200, completion_tokens: 50 }, estimate)).toEqual({ tokens: 1_200 });
    // The Responses API's names.
    expect(
      meter.estimateOf(() => meteredBody({ input: 'x'.repeat(40), max_output_tokens: 500 }), 'POST', '')
        .costs,
    ).toEqual({ tokens: 500 });
    expect(
      meter.used(
        { input_tokens: 10, output_tokens: 5 },
        meter.estimateOf(() => meteredBody(undefined), 'POST', ''),
      ),
    ).toEqual({
      tokens: 15,
    });
  });

  it('Anthropic: input from characters, output from the recent answers, at most max_tokens', () => {
    const meter = new LlmMeter('anthropic');
    const body = {
      system: 'x'.repeat(400),
      messages: [{ role: 'user', content: [{ type: 'text', text: 'y'.repeat(400) }] }],
      max_tokens: 100,
    };
    expect(meter.estimateOf(() => meteredBody(body), 'POST', '').costs).toEqual({
      input_tokens: 200,
      output_tokens: 100,
    });
    meter.used(
      { input_tokens: 190, cache_creation_input_tokens: 10, output_tokens: 40 },
      meter.estimateOf(() => meteredBody(body), 'POST', ''),
    );
    expect(meter.estimateOf(() => meteredBody({ ...body, max_tokens: 1_000 }), 'POST', '').costs).toEqual({
      input_tokens: 200,
      output_tokens: 40,
    });
  });

  it('reads what a 429 means: the budget it names, a spend cap, or nothing said', () => {
    const openai = new LlmMeter('openai');
    expect(openai.refusal({ error: { type: 'tokens', code: 'rate_limit_exceeded' } })).toEqual({
      kind: 'rate',
      budgets: ['tokens'],
    });
    expect(openai.refusal({ error: { type: 'insufficient_quota', code: 'insufficient_quota' } })).toEqual({
      kind: 'quota',
      reason: 'insufficient_quota',
    });
    expect(openai.refusal(undefined)).toEqual({ kind: 'rate', budgets: undefined });
    // A call alone above the whole limit: no retry can pass it (OpenAI's own wording).
    const tooLarge = (message: string) => ({
      error: { message, type: 'tokens', code: 'rate_limit_exceeded' },
    });
    const big =
      'Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 36153.';
    expect(openai.refusal(tooLarge(big))).toEqual({ kind: 'call', reason: 'request_too_large' });
    expect(openai.refusal(tooLarge('on tokens per min (TPM): Limit 10000, Requested 50000.'))).toEqual({
      kind: 'call',
      reason: 'request_too_large',
    });
    const rate =
      'Rate limit reached for gpt-4o on tokens per min (TPM): Limit 10000, Used 9000, Requested 2000.';
    expect(openai.refusal(tooLarge(rate))).toEqual({ kind: 'rate', budgets: ['tokens'] });
    const anthropic = new LlmMeter('anthropic');
    const spend = {
      type: 'error',
      error: { type: 'rate_limit_error', details: { error_code: 'enforced_spend_limit_reached' } },
    };
    expect(anthropic.refusal(spend)).toMatchObject({ kind: 'quota' });
    // Regression: a 429 without Anthropic's JSON (a proxy's HTML page) and without retry-after was
    // read as a spend cap (QuotaExhaustedError 'spend_cap', no retry). Only the body tells a cap.
    expect(anthropic.refusal(undefined)).toEqual({ kind: 'rate', budgets: undefined });
    const input = {
      type: 'error',
      error: { type: 'rate_limit_error', message: 'exceeds 40000 input tokens per minute' },
    };
    expect(anthropic.refusal(input)).toEqual({ kind: 'rate', budgets: ['input_tokens'] });
  });
});

// Regression: OpenAI's 429 for a limit per day (RPD, TPD) was read as the per-minute budget its
// `error.type` names, and the "Please try again in 7m12s." of its message was not read at all:
// the budget was cut, and without a Retry-After the retry went soon into another 429.
describe("LlmMeter.refusal: an OpenAI rate limit's message", () => {
  const openai = new LlmMeter('openai');
  const refused = (message: unknown, type: unknown = 'requests') => ({
    error: { message, type, param: null, code: 'rate_limit_exceeded' },
  });
  const rpd = (limit: number, wait: string) =>
    `Rate limit reached for gpt-4o-mini in organization org-x on requests per day (RPD): Limit ${limit}, Used ${limit}, Requested 1. Please try again in ${wait}. Visit https://platform.openai.com/account/rate-limits to learn more.`;

  it.each([
    ['7m12s', 200, 432_000],
    ['1m26.4s', 1_000, 86_400],
    // Its parts apart: "1m" alone read as 60 s.
    ['1m 30s', 200, 90_000],
    ['1h 2m 3.5s', 200, 3_723_500],
  ])('reads a limit per day and the wait it asks for (%s)', (wait, limit, waitMs) => {
    expect(openai.refusal(refused(rpd(limit, wait)))).toStrictEqual({
      kind: 'rate',
      budgets: ['requests'],
      waitMs,
      daily: true,
    });
  });

  it('reads a tokens-per-day limit, named in the message alone', () => {
    const tpd =
      'Rate limit reached for gpt-4o in organization org-x on tokens per day (TPD): Limit 2000000, Used 1999000, Requested 5000. Please try again in 3m36s.';
    expect(openai.refusal(refused(tpd, null))).toStrictEqual({
      kind: 'rate',
      budgets: undefined,
      waitMs: 216_000,
      daily: true,
    });
  });

  it.each([
    ['1.002s', 1_002],
    ['20ms', 20],
    ['1s 500ms', 1_500],
  ])('reads a per-minute limit with the wait it asks for (%s), no limit per day', (wait, waitMs) => {
    const tpm = `Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in ${wait}. Visit https://platform.openai.com/account/rate-limits to learn more.`;
    expect(openai.refusal(refused(tpm, 'tokens'))).toStrictEqual({
      kind: 'rate',
      budgets: ['tokens'],
      waitMs,
    });
  });

  it('gives no wait when the message asks for none', () => {
    const noWait =
      'Rate limit reached for gpt-4o-mini in organization org-x on requests per day (RPD): Limit 200, Used 200, Requested 1.';
    expect(openai.refusal(refused(noWait))).toStrictEqual({
      kind: 'rate',
      budgets: ['requests'],
      daily: true,
    });
    const tpm =
      'Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500.';
    expect(openai.refusal(refused(tpm, 'tokens'))).toStrictEqual({ kind: 'rate', budgets: ['tokens'] });
  });

  it.each(['a moment', '-5s', '12', '7m12', '5sec', '1e3s', '1,5s', '.', '', `${'9'.repeat(400)}h`])(
    'gives no wait, and does not throw, for a duration that does not read (%j)',
    (wait) => {
      expect(openai.refusal(refused(rpd(200, wait)))).toStrictEqual({
        kind: 'rate',
        budgets: ['requests'],
        daily: true,
      });
      const tpm = `Rate limit reached on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in ${wait}.`;
      expect(openai.refusal(refused(tpm, 'tokens'))).toStrictEqual({ kind: 'rate', budgets: ['tokens'] });
    },
  );

  it('reads nothing more from a message that is no string', () => {
    for (const message of [42, null, { text: 'Please try again in 1s.' }, ['Please try again in 1s.']]) {
      expect(openai.refusal(refused(message))).toStrictEqual({ kind: 'rate', budgets: ['requests'] });
    }
  });
});

// Regression: Azure OpenAI's 429 (no `error.type`; it has been sent without a `retry-after`
// header) says its wait as "Please retry after 6 seconds." and its budget as "token rate limit" or
// "call rate limit": neither was read, so its retry went after a bare 429's short wait, and every
// budget the call drew from was cut.
describe("LlmMeter.refusal: Azure OpenAI's 429 message, read with api: 'openai'", () => {
  const openai = new LlmMeter('openai');
  const azure = (message: string) => ({ error: { code: '429', message } });
  const tokens =
    'Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.';
  const calls =
    'Requests to the Embeddings_Create Operation under Azure OpenAI API version 2023-07-01-preview have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after 1 second. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.';

  it('reads the wait in seconds and the budget its message names', () => {
    expect(openai.refusal(azure(tokens))).toStrictEqual({ kind: 'rate', budgets: ['tokens'], waitMs: 6_000 });
    expect(openai.refusal(azure(calls))).toStrictEqual({
      kind: 'rate',
      budgets: ['requests'],
      waitMs: 1_000,
    });
  });

  it('reads Azure API Management\'s "Try again in 59 seconds." in front of it', () => {
    const apim = 'Rate limit is exceeded. Try again in 59 seconds.';
    expect(openai.refusal(azure(apim))).toStrictEqual({ kind: 'rate', budgets: undefined, waitMs: 59_000 });
  });

  // API Management's own body (`{ statusCode: 429, message }`, no `error`): its `llm-token-limit`
  // policy limits tokens a minute, its `rate-limit` policies count calls. "Rate limit is exceeded."
  // names the requests only in that body: other gateways say it of any limit (above).
  it.each([
    ['Token limit is exceeded. Try again in 41 seconds.', ['tokens'], 41_000],
    ['Rate limit is exceeded. Try again in 5 seconds.', ['requests'], 5_000],
    ['Token limit is exceeded.', ['tokens'], undefined],
  ] as const)("reads API Management's own body: %j", (message, budgets, waitMs) => {
    const expected = waitMs === undefined ? { kind: 'rate', budgets } : { kind: 'rate', budgets, waitMs };
    expect(openai.refusal({ statusCode: 429, message })).toStrictEqual(expected);
    // The same body kept as an error's `error` (the shape `wrap` hands an SDK error's body in).
    expect(openai.refusal({ error: { statusCode: 429, message } })).toStrictEqual(expected);
  });

  it('reads "Token limit is exceeded" in any body, "Rate limit is exceeded" in no other', () => {
    expect(openai.refusal(azure('Token limit is exceeded. Try again in 3 seconds.'))).toStrictEqual({
      kind: 'rate',
      budgets: ['tokens'],
      waitMs: 3_000,
    });
    expect(openai.refusal({ statusCode: 503, message: 'Rate limit is exceeded.' })).toStrictEqual({
      kind: 'rate',
      budgets: undefined,
    });
  });

  it.each([
    'Please retry after a while.',
    'Please retry after -6 seconds.',
    'Please retry after 6.5 seconds.',
    'Please retry after 6s.',
    `Please retry after ${'9'.repeat(12)} seconds.`,
  ])('gives no wait for a wait that does not read (%j)', (message) => {
    expect(openai.refusal(azure(message))).toStrictEqual({ kind: 'rate', budgets: undefined });
  });

  it("keeps OpenAI's own Go duration first when a message has both", () => {
    const both =
      'Rate limit reached on tokens per min (TPM). Please try again in 1.5s. Or retry after 9 seconds.';
    expect(openai.refusal(azure(both))).toStrictEqual({ kind: 'rate', budgets: ['tokens'], waitMs: 1_500 });
  });
});
