import type { IncomingMessage, ServerResponse } from 'node:http';
import { runInNewContext } from 'node:vm';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { LlmMeter } from '../src/http/llm.js';
import { classifyThrown } from '../src/index.js';
import { type LlmClientKind, serveLocal } from './helpers/llm-clients.js';
import { budgetsOf, openaiClient, refusingOnce } from './helpers/llm-refusing.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';

// Attacks on the reading of Azure OpenAI's 429 message (commit 3d790c2).

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const openai = new LlmMeter('openai');
const azure = (message: string) => ({ error: { code: '429', message } });
const azureError = (message: string, headers: Record<string, string> = {}) =>
  new OpenAI.RateLimitError(429, { code: '429', message }, undefined, new Headers(headers));

/**
 * `run()` under a watchdog: `true` when it ended within `ms`, `false` when it was cut. The bound is
 * 1,000 times what the linear reading takes: only a super-linear one can reach it.
 */
function endsWithin(ms: number, run: () => unknown): boolean {
  try {
    runInNewContext('run()', { run }, { timeout: ms });
    return true;
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') return false;
    throw error;
  }
}

describe('the message reading on a long message', () => {
  // Regression: the word after "try again in" had its full stops cut by /[.,;:]+$/, which takes
  // quadratic time on a run of them not at the end ("in ....x"): 32,000 took 0.6 s, a 64 KiB body
  // (what both adapters read) about 2 s, and a 1 MB message through wrap (an SDK keeps the whole
  // body) minutes, the event loop blocked all along.
  const hostile = `Rate limit is exceeded. Try again in ${'.'.repeat(1_000_000)}x. Please retry after 6 seconds.`;

  it('reads a 1 MB message in linear time, still finding its seconds', () => {
    let read: unknown;
    expect(endsWithin(5_000, () => (read = openai.refusal(azure(hostile))))).toBe(true);
    expect(read).toStrictEqual({ kind: 'rate', budgets: undefined, waitMs: 6_000 });
  });

  it("reads it so in wrap's classifyThrown too", () => {
    let read: unknown;
    expect(endsWithin(5_000, () => (read = classifyThrown(azureError(hostile))))).toBe(true);
    expect(read).toStrictEqual({ kind: 'throttled', retryAfterMs: 6_000 });
  });

  it('still strips the full stop after a Go duration', () => {
    expect(openai.refusal(azure('Please try again in 1.002s.;:'))).toMatchObject({ waitMs: 1_002 });
    expect(openai.refusal(azure('Please try again in 20ms,'))).toMatchObject({ waitMs: 20 });
  });

  it('other long inputs hold: digits, repeated phrases', () => {
    for (const message of [
      `try again in ${'1'.repeat(200_000)}x`,
      'retry after 1 '.repeat(50_000),
      'Please retry after '.repeat(50_000),
      `Limit ${'1'.repeat(200_000)}`,
      'exceeded token rate '.repeat(50_000),
    ]) {
      expect(endsWithin(5_000, () => openai.refusal(azure(message)))).toBe(true);
    }
  });
});

describe('a whole-seconds wait of 0', () => {
  // Regression: API Management's "Try again in 0 seconds." (under a second left, in whole
  // seconds) was read as a wait of 0: the limiter took no pause at all, not even the crowd wait
  // of a bare 429 (what it was before the change), so the calls behind it went on at the cut rate
  // into the same limit.
  it('is no wait: the 429 is a bare one', () => {
    expect(openai.refusal(azure('Rate limit is exceeded. Try again in 0 seconds.'))).toStrictEqual({
      kind: 'rate',
      budgets: undefined,
    });
    expect(
      openai.refusal(azure('... exceeded call rate limit ... Please retry after 0 seconds.')),
    ).toStrictEqual({
      kind: 'rate',
      budgets: ['requests'],
    });
    expect(classifyThrown(azureError('Rate limit is exceeded. Try again in 0 seconds.'))).toStrictEqual({
      kind: 'throttled',
    });
  });

  it('is none for a limit per day too: the daily 429 fails, as with no wait', () => {
    expect(classifyThrown(azureError('Limit per day reached. Please retry after 0 seconds.'))).toStrictEqual({
      kind: 'failed',
    });
  });
});

describe('what held', () => {
  it.each([
    ['Please retry after 6 Seconds.', 6_000],
    ['Please retry after 1 second.', 1_000],
    ['Try again in 59 seconds', 59_000],
    ['Please retry after 06 seconds.', 6_000],
  ])('reads %j', (message, waitMs) => {
    expect(openai.refusal(azure(message))).toMatchObject({ waitMs });
  });

  it.each([
    'Please retry after 6\u00a0seconds.',
    'Please retry after 500 milliseconds.',
    'Please retry after 1,000 seconds.',
    'Please retry after 5 minutes.',
    'Please do not retry after 6 secondsx',
    'Retry after 60s',
  ])('gives no wait for %j (never a shorter one)', (message) => {
    expect(openai.refusal(azure(message))).not.toHaveProperty('waitMs');
  });

  it('names the budget by error.type first, then the message; a limit per day with seconds pauses', () => {
    expect(
      openai.refusal({
        error: { type: 'requests', message: 'exceeded token rate limit. Please retry after 6 seconds.' },
      }),
    ).toStrictEqual({ kind: 'rate', budgets: ['requests'], waitMs: 6_000 });
    expect(
      openai.refusal(azure('exceeded token rate limit per day. Please retry after 6 seconds.')),
    ).toStrictEqual({
      kind: 'rate',
      budgets: ['tokens'],
      waitMs: 6_000,
      daily: true,
    });
    expect(
      classifyThrown(azureError('exceeded token rate limit per day. Please retry after 6 seconds.')),
    ).toStrictEqual({ kind: 'throttled', retryAfterMs: 6_000, pauseOnly: true });
  });

  it("takes wrap's headers over the message (retry-after-ms, x-ms-retry-after-ms, Retry-After)", () => {
    const message = 'exceeded call rate limit. Please retry after 6 seconds.';
    for (const [headers, retryAfterMs] of [
      [{ 'retry-after-ms': '1500' }, 1_500],
      [{ 'x-ms-retry-after-ms': '2500' }, 2_500],
      [{ 'retry-after': '9' }, 9_000],
    ] as const) {
      expect(classifyThrown(azureError(message, headers))).toStrictEqual({
        kind: 'throttled',
        retryAfterMs,
        budgets: ['requests'],
      });
    }
  });
});

const client = (adapter: LlmClientKind, origin: string, clock: ManualClock) =>
  openaiClient(adapter, origin, clock, cleanups);

// Regression: Azure OpenAI's 429 (no `error.type`; it has been sent without a Retry-After header)
// was a bare 429 in both adapters: its "Please retry after 6 seconds." was not read, and every
// budget the call drew from was cut, not the one its "token rate limit" names.
describe.each(['fetch wrapper', 'interceptor'] as const)(
  "api: 'openai', the %s: Azure OpenAI's 429",
  (adapter) => {
    it.each([
      ['no header: the wait its message asks for', {}, 6_000],
      ['a Retry-After header over the message', { 'retry-after': '2' }, 2_000],
    ] as const)('%s, and a cut of the budget it names', async (_name, headers, wait) => {
      const { origin, server } = await refusingOnce(
        azure('Requests ... have exceeded token rate limit ... Please retry after 6 seconds.'),
        cleanups,
        headers,
      );
      const clock = new ManualClock();
      const { registry, post } = client(adapter, origin, clock);
      const call = settled(post());
      await until(() => budgetsOf(registry).tokens?.[1] !== undefined, 'the 429 judged');
      expect(budgetsOf(registry)).toEqual({ requests: [0, undefined], tokens: [1, wait] });
      clock.advance(wait);
      await until(() => call.done, 'the retry');
      expect(call.value).toBe(200);
      expect(server.attempts).toBe(2);
    });
  },
);

describe("api: 'openai', the fetch wrapper: API Management's \"Try again in 0 seconds.\"", () => {
  it('pauses as after a bare 429 (its crowd wait), not at all', async () => {
    const { origin, server } = await refusingOnce(
      azure('Rate limit is exceeded. Try again in 0 seconds.'),
      cleanups,
    );
    const clock = new ManualClock();
    const { registry, post } = client('fetch wrapper', origin, clock);
    const call = settled(post());
    await until(
      () => (registry.get('llm')?.snapshot().budgets?.requests?.throttles ?? 0) > 0,
      'the 429 judged',
    );
    const paused = Object.values(registry.get('llm')?.snapshot().budgets ?? {}).map((b) => b.pausedUntil);
    expect(paused.every((until) => until !== undefined && until > 0)).toBe(true);
    clock.advance(60_000);
    await until(() => call.done, 'the retry');
    expect(call.value).toBe(200);
    expect(server.attempts).toBe(2);
  });
});

// Regression: Azure API Management's own 429 body is `{ "statusCode": 429, "message": "Rate limit
// is exceeded. Try again in 59 seconds." }`, with no `error`: its message was not read (the docs
// said it was), so without a Retry-After header the 429 was a bare one. wrap cannot read it: the
// openai SDK keeps only a body's `error`. And the budget it is about was not read either: its
// `llm-token-limit` policy's "Token limit is exceeded." (tokens a minute) cut the requests budget
// too, and its `rate-limit` policy's "Rate limit is exceeded." (calls) the tokens budget.
describe.each(['fetch wrapper', 'interceptor'] as const)(
  "api: 'openai', the %s: API Management's 429 body",
  (adapter) => {
    it.each([
      ['Rate limit is exceeded. Try again in 59 seconds.', { requests: [1, 59_000], tokens: [0, undefined] }],
      [
        'Token limit is exceeded. Try again in 41 seconds.',
        { requests: [0, undefined], tokens: [1, 41_000] },
      ],
    ] as const)('times the retry by %j, and cuts the budget it names', async (message, judged) => {
      const { origin, server } = await refusingOnce({ statusCode: 429, message }, cleanups);
      const clock = new ManualClock();
      const { registry, post } = client(adapter, origin, clock);
      const call = settled(post());
      const budget = judged.requests[0] === 1 ? 'requests' : 'tokens';
      await until(() => budgetsOf(registry)[budget]?.[1] !== undefined, 'the 429 judged');
      expect(budgetsOf(registry)).toEqual(judged);
      clock.advance(Math.max(judged.requests[1] ?? 0, judged.tokens[1] ?? 0));
      await until(() => call.done, 'the retry');
      expect(call.value).toBe(200);
      expect(server.attempts).toBe(2);
    });
  },
);

describe.each(['fetch wrapper', 'interceptor'] as const)(
  "api: 'openai', the %s: a gzipped Azure 429",
  (adapter) => {
    it('reads its message as the plain one (both adapters alike)', async () => {
      const { gzipSync } = await import('node:zlib');
      const json = azure('Requests ... have exceeded call rate limit ... Please retry after 7 seconds.');
      let attempts = 0;
      const origin = await serveLocal((req: IncomingMessage, res: ServerResponse) => {
        req.resume();
        attempts++;
        const type = { 'content-type': 'application/json' };
        if (attempts === 1)
          res.writeHead(429, { ...type, 'content-encoding': 'gzip' }).end(gzipSync(JSON.stringify(json)));
        else res.writeHead(200, type).end('{"usage":{"prompt_tokens":3,"completion_tokens":2}}');
      }, cleanups);
      const clock = new ManualClock();
      const { registry, post } = client(adapter, origin, clock);
      const call = settled(post());
      await until(() => budgetsOf(registry).requests?.[1] !== undefined, 'the 429 judged');
      expect(budgetsOf(registry)).toEqual({ requests: [1, 7_000], tokens: [0, undefined] });
      clock.advance(7_000);
      await until(() => call.done, 'the retry');
      expect(call.value).toBe(200);
    });
  },
);
