import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { classifyResponse } from '../src/http/classify.js';
import { githubClassify, InvalidCallbackValueError } from '../src/index.js';
import { agentWith, get, limit, serve } from './helpers/interceptor-fixtures.js';

/** GitHub's primary limit: a 403 with no requests left until `reset`, stamped with a server `Date` an hour ahead of ours. */
function exhausted(status: number, resetInSeconds: number) {
  const serverNow = Math.floor(Date.now() / 1000) * 1000 + 3_600_000;
  return {
    'x-ratelimit-limit': '5000',
    'x-ratelimit-remaining': '0',
    'x-ratelimit-reset': String(serverNow / 1000 + resetInSeconds),
    date: new Date(serverNow).toUTCString(),
    status,
  };
}

describe('githubClassify', () => {
  it.each([
    [
      'a 403 with remaining 0: until reset, read against Date',
      403,
      exhausted(403, 120),
      { verdict: 'throttled', retryAfterMs: 120_000 },
    ],
    ['a 429 with remaining 0', 429, exhausted(429, 30), { verdict: 'throttled', retryAfterMs: 30_000 }],
    [
      'a reset already past: at least 1 s',
      403,
      exhausted(403, -5),
      { verdict: 'throttled', retryAfterMs: 1_000 },
    ],
    [
      'remaining 0 with no valid reset: throttled, no wait',
      403,
      { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': 'soon' },
      'throttled',
    ],
    [
      'a secondary limit: 403 with Retry-After',
      403,
      { 'retry-after': '60', 'x-ratelimit-remaining': '4999' },
      'throttled',
    ],
    ['a 403 permission error: the default rule', 403, { 'x-ratelimit-remaining': '4999' }, undefined],
    ['a 200 with remaining 0: the default rule (this one was served)', 200, exhausted(200, 60), undefined],
  ])('%s', (_name, status, headers, verdict) => {
    const { status: _s, ...record } = headers as Record<string, string>;
    expect(githubClassify(status, record)).toEqual(verdict);
  });

  it("pauses the origin until GitHub's reset (capped by maxPause) and hands back the 403 it cannot retry within maxWait", async () => {
    const { status: _s, ...headers } = exhausted(403, 120);
    const server = await serve({ capacity: 0, throttleStatus: 403, retryAfter: undefined, headers });
    const clock = new ManualClock();
    const rl = limit({ clock, classify: githubClassify });
    const agent = agentWith(rl);

    const answer = await get(agent, `${server.origin}/repos/nodejs/undici`);

    expect(answer.status).toBe(403);
    expect(server.requests).toBe(1);
    expect(rl.registry.get(server.origin)?.snapshot()).toMatchObject({
      throttles: 1,
      pausedUntil: clock.now() + 120_000,
    });
  });

  it('caps a reset an hour away by maxPause', async () => {
    const { status: _s, ...headers } = exhausted(403, 3_600);
    const server = await serve({ capacity: 0, throttleStatus: 403, retryAfter: undefined, headers });
    const clock = new ManualClock();
    const rl = limit({ clock, classify: githubClassify, default: { maxPause: 300_000 } });

    expect((await get(agentWith(rl), `${server.origin}/`)).status).toBe(403);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(clock.now() + 300_000);
  });
});

describe('classify with a wait', () => {
  const rules = (verdict: unknown) => ({
    throttleStatuses: new Set([429]),
    classify: () => verdict as never,
  });
  it('takes the wait of { verdict, retryAfterMs } over Retry-After, and names a bad one', () => {
    const headers = { 'retry-after': '5' };
    expect(
      classifyResponse(403, headers, rules({ verdict: 'throttled', retryAfterMs: 9 }), () => headers),
    ).toEqual({
      kind: 'throttled',
      retryAfterMs: 9,
    });
    expect(classifyResponse(403, headers, rules({ verdict: 'throttled' }), () => headers)).toEqual({
      kind: 'throttled',
      retryAfterMs: 5_000,
    });
    expect(() =>
      classifyResponse(403, headers, rules({ verdict: 'throttled', retryAfterMs: -1 }), () => headers),
    ).toThrow(/retryAfterMs -1/);
    expect(() =>
      classifyResponse(403, headers, rules({ verdict: 'success', retryAfterMs: 1 }), () => headers),
    ).toThrow(InvalidCallbackValueError);
  });
});
