import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { feed } from '../src/attempt-loop.js';
import { ManualClock } from '../src/clock.js';
import type { HeaderProfile } from '../src/config/types.js';
import { ConfigError } from '../src/errors.js';
import { headerRecord } from '../src/headers.js';
import { classifyResponse } from '../src/http/classify.js';
import { quotaReader } from '../src/http/quota-headers/index.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AnnouncedQuota, Permit, RateLimiter } from '../src/limiter/types.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';
import { wrap } from '../src/wrap/wrap.js';

// wrap's `headers` option: the quotas an SDK's thrown error announces in its headers (an openai
// or Anthropic 429's `x-ratelimit-*`, `anthropic-ratelimit-*`) reach the limiter's ceiling, read
// by the HTTP adapters' own readers. Before it, `classifyThrown` read only the wait: a limiter
// behind `wrap` never learned the limit the API announced on every 429.

/** An openai 429 as openai's SDK throws it: `headers` a `Headers`, `error` the body's `error`. */
const OPENAI_HEADERS = {
  'x-ratelimit-limit-requests': '60',
  'x-ratelimit-remaining-requests': '0',
  'x-ratelimit-reset-requests': '1s',
  'x-ratelimit-limit-tokens': '10000',
  'x-ratelimit-remaining-tokens': '9000',
  'x-ratelimit-reset-tokens': '6s',
};
const openai429 = () =>
  new OpenAI.RateLimitError(
    429,
    {
      message: 'Rate limit reached for gpt-4o on requests per min (RPM): Limit 60, Used 60.',
      type: 'requests',
      param: null,
      code: 'rate_limit_exceeded',
    },
    undefined,
    new Headers(OPENAI_HEADERS),
  );

/** Anthropic's headers, its resets RFC 3339 instants read against the answer's `Date`. */
const ANTHROPIC_HEADERS = {
  date: 'Tue, 01 Dec 2026 12:00:00 GMT',
  'anthropic-ratelimit-requests-limit': '50',
  'anthropic-ratelimit-requests-remaining': '0',
  'anthropic-ratelimit-requests-reset': '2026-12-01T12:00:01Z',
  'retry-after': '1',
};

/** An SDK error whose `headers` is a plain record (a deserialized error, an older SDK's). */
const recordError = (headers: Record<string, string> | undefined) =>
  Object.assign(new Error('429 Too Many Requests'), { status: 429, headers });

function setup() {
  const clock = new ManualClock();
  return { clock, limiter: new AdaptiveRateLimiter({ clock }) };
}

/** Calls a wrapped function that throws `error` once, and checks that it rejects with it. */
async function throwThrough(limiter: AdaptiveRateLimiter, error: unknown, headers?: HeaderProfile) {
  const call = wrap(
    limiter,
    async () => {
      throw error;
    },
    { headers, maxAttempts: 1 },
  );
  await expect(call()).rejects.toBe(error);
}

/**
 * Feeds `limiter` an answer as the HTTP adapters feed one on a route of `profile`:
 * `classifyResponse` with the route's quota reader, then the attempt loop's `feed`.
 */
function answerByHttp(
  limiter: AdaptiveRateLimiter,
  status: number,
  profile: HeaderProfile,
  headers: Record<string, string>,
) {
  const permit = limiter.tryAcquire();
  if (permit === undefined) throw new Error('no permit');
  const rules = { throttleStatuses: new Set([429]) };
  const reader = quotaReader(profile, undefined);
  feed(
    permit,
    classifyResponse(status, headers, rules, () => headerRecord(headers), reader),
  );
}

/** A limiter of its own fed a 429 with `headers` by the HTTP adapters' path. */
function fedByHttp(profile: HeaderProfile, headers: Record<string, string>) {
  const { limiter } = setup();
  answerByHttp(limiter, 429, profile, headers);
  return limiter;
}

/** A limiter whose one permit records what it is fed. */
function recording() {
  const fed: unknown[][] = [];
  const permit: Permit = {
    units: 1,
    success: (...args) => void fed.push(['success', ...args]),
    throttled: (...args) => void fed.push(['throttled', ...args]),
    failed: (...args) => void fed.push(['failed', ...args]),
  };
  const limiter: RateLimiter = {
    name: 'recording',
    acquire: async () => permit,
    tryAcquire: () => permit,
  };
  return { fed, limiter };
}

describe("wrap's headers: the quotas an SDK error announces reach the limiter", () => {
  it("reads openai's x-ratelimit-* from its RateLimitError's Headers object", async () => {
    const { limiter } = setup();
    await throwThrough(limiter, openai429(), 'openai');
    const seen = limiter.snapshot();
    expect(seen.throttles).toBe(1);
    // The limiter's ceiling is the requests' limit per minute: 60 units/min (before, undefined).
    expect(seen.announcedRate).toBe(60);
    expect(seen.rate).toBeLessThanOrEqual(60);
  });

  it('reads a plain object of headers (Anthropic, deserialized) as a Headers object', async () => {
    const { limiter } = setup();
    await throwThrough(limiter, recordError(ANTHROPIC_HEADERS), 'anthropic');
    expect(limiter.snapshot().announcedRate).toBe(50);
    // The same headers in Anthropic's own error class (a Headers object): the same ceiling.
    const other = setup().limiter;
    const sdkError = new Anthropic.RateLimitError(
      429,
      undefined,
      'slow down',
      new Headers(ANTHROPIC_HEADERS),
    );
    await throwThrough(other, sdkError, 'anthropic');
    expect(other.snapshot()).toEqual(limiter.snapshot());
  });

  it('feeds the limiter as the HTTP adapters feed it for the same 429', async () => {
    const { limiter } = setup();
    await throwThrough(limiter, recordError(ANTHROPIC_HEADERS), 'anthropic');
    expect(limiter.snapshot()).toEqual(fedByHttp('anthropic', ANTHROPIC_HEADERS).snapshot());
  });

  it('an exhausted IETF RateLimit, its only wait: pauses for one unit of a bucket', async () => {
    // A bucket of 60 refilling 1 a second, learned from two answers; then a 429 with r=0, t=60.
    const policy = { 'ratelimit-policy': '"default";q=60;w=60' };
    const viaWrap = setup();
    const viaHttp = setup();
    for (const { clock, limiter } of [viaWrap, viaHttp]) {
      answerByHttp(limiter, 200, 'standard', { ...policy, ratelimit: '"default";r=5;t=55' });
      clock.advance(1_000);
      answerByHttp(limiter, 200, 'standard', { ...policy, ratelimit: '"default";r=6;t=54' });
      clock.advance(1_000);
    }
    const headers = { ...policy, ratelimit: '"default";r=0;t=60' };
    await throwThrough(viaWrap.limiter, recordError(headers), 'standard');
    answerByHttp(viaHttp.limiter, 429, 'standard', headers);
    const paused = viaWrap.limiter.snapshot().pausedUntil;
    // One unit is 60 s / 60 = 1 s, not the whole t of 60 s.
    expect(paused).toBeDefined();
    expect((paused as number) - viaWrap.clock.now()).toBeLessThanOrEqual(1_000);
    expect(viaWrap.limiter.snapshot()).toEqual(viaHttp.limiter.snapshot());
  });

  it('an error without headers: no quota, no error of its own, still a throttle', async () => {
    const { limiter } = setup();
    const error = recordError(undefined);
    await throwThrough(limiter, error, 'openai');
    expect(limiter.snapshot()).toMatchObject({ throttles: 1, announcedRate: undefined });
  });

  it('headers that throw when read: the SDK error comes back, no quota', async () => {
    const { limiter } = setup();
    const error = Object.assign(new Error('429'), { status: 429 });
    const headers = new Proxy(
      {},
      {
        get() {
          throw new Error('gone');
        },
      },
    );
    Object.defineProperty(error, 'headers', { value: headers });
    await throwThrough(limiter, error, 'openai');
    expect(limiter.snapshot()).toMatchObject({ throttles: 1, announcedRate: undefined });
  });

  it('reads no quota without a profile, as before (the default)', async () => {
    const { limiter } = setup();
    await throwThrough(limiter, openai429());
    expect(limiter.snapshot()).toMatchObject({ throttles: 1, announcedRate: undefined });
    const off = setup().limiter;
    await throwThrough(off, openai429(), false as unknown as HeaderProfile);
    expect(off.snapshot().announcedRate).toBeUndefined();
  });

  it('openai budgets: each budget its ceiling, requests paused for one unit', async () => {
    const clock = new ManualClock();
    const limiter = new AdaptiveRateLimiter({
      clock,
      slowStart: false,
      budgets: { requests: {}, tokens: {} },
    });
    const call = wrap(
      limiter,
      async () => {
        throw openai429();
      },
      { headers: 'openai', maxAttempts: 1, costs: { tokens: 100 } },
    );
    await expect(call()).rejects.toBeInstanceOf(OpenAI.RateLimitError);
    const seen = limiter.snapshot().budgets;
    expect(seen?.requests?.announcedRate).toBe(60);
    expect(seen?.tokens?.announcedRate).toBe(10_000);
    // No request left: the next waits for one to refill (the reset, 1 s, over the 60 missing),
    // not a crowd wait of its own.
    expect(seen?.requests?.pausedUntil).toBeCloseTo(1_000 / 60);
    expect(limiter.tryAcquire(1, { tokens: 100 })).toBeUndefined();
  });

  it("passes the permit the profile's quotas, then classifyError's own", async () => {
    const { fed, limiter } = recording();
    const own: AnnouncedQuota = { policy: 'mine', remaining: 5, limit: 20, windowMs: 60_000 };
    const call = wrap(
      limiter,
      async () => {
        throw recordError(OPENAI_HEADERS);
      },
      {
        headers: 'openai',
        maxAttempts: 1,
        classifyError: (error) => ({ ...classifyThrown(error), quota: [own] }),
      },
    );
    await expect(call()).rejects.toThrow('429');
    expect(fed).toHaveLength(1);
    const [verdict, wait, quota] = fed[0] as [string, unknown, AnnouncedQuota[]];
    expect([verdict, wait]).toEqual(['throttled', undefined]);
    expect(quota.map((q) => q.policy)).toEqual(['openai:requests', 'openai:tokens', 'mine']);
    expect(quota[0]).toMatchObject({ budget: 'requests', limit: 60, remaining: 0 });
  });
});

describe("wrap's headers: bad input", () => {
  it.each<[string, unknown]>([
    ['a misspelt profile', 'opnai'],
    ['true', true],
    ['a list', ['openai']],
  ])('refuses %s with a ConfigError naming headers and the value', (_, headers) => {
    const { limiter } = setup();
    let thrown: unknown;
    try {
      wrap(limiter, async () => 1, { headers: headers as HeaderProfile });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).issues).toEqual([
      {
        path: 'headers',
        message: "must be 'standard', 'github', 'openai', 'anthropic', 'shopify' or false",
        received: headers,
      },
    ]);
    expect((thrown as Error).message).toContain(`headers: must be 'standard'`);
    expect((thrown as Error).message).toContain(`(received ${JSON.stringify(headers)})`);
  });
});
