import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { feed } from '../src/attempt-loop.js';
import { ManualClock } from '../src/clock.js';
import type { HeaderProfile } from '../src/config/types.js';
import { ConfigError } from '../src/errors.js';
import { headerRecord } from '../src/headers.js';
import { classifyResponse } from '../src/http/classify.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { quotaReader } from '../src/http/quota-headers/index.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { FixedWindowRateLimiter } from '../src/limiter/fixed-window.js';
import type { AdaptiveLimiterOptions } from '../src/limiter/options.js';
import type { AnnouncedQuota, Outcome, Permit, RateLimiter } from '../src/limiter/types.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';
import { wrap } from '../src/wrap/wrap.js';

// Attack on wrap's `headers` option (the quotas a thrown SDK error's headers announce reach the
// permit) and on `classifyThrown`'s 4xx-as-success. The reference for "what the limiter should
// see" is the HTTP adapters' path for the same answer: `classifyResponse` with the route's quota
// reader, then the attempt loop's `feed`. Date.now() is frozen (the readers count resets from the
// wall clock), limiters run on a ManualClock, loops are bounded, no duration is asserted.

const WALL = Date.UTC(2026, 11, 1, 12, 0, 0);

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['Date'], now: WALL });
});
afterEach(() => {
  vi.useRealTimers();
});

function limiterOf(options: Partial<AdaptiveLimiterOptions> = {}) {
  const clock = new ManualClock();
  // A fixed random: the crowd wait of a 429 without a wait is drawn from it.
  return { clock, limiter: new AdaptiveRateLimiter({ clock, random: () => 0.5, ...options }) };
}

/** An SDK-like error: a status and headers (a record, a Headers, anything). */
const sdkError = (status: number | undefined, headers: unknown, extra: Record<string, unknown> = {}) =>
  Object.assign(new Error(`${status} from the API`), { status, headers, ...extra });

/** Calls a wrapped function that throws `error` once; it must reject with `error` itself. */
async function throwThrough(
  limiter: RateLimiter,
  error: unknown,
  headers?: HeaderProfile | false,
  extra: Record<string, unknown> = {},
) {
  const call = wrap(
    limiter,
    async () => {
      throw error;
    },
    { headers, maxAttempts: 1, ...extra },
  );
  let thrown: unknown = 'nothing thrown';
  try {
    await call();
  } catch (e) {
    thrown = e;
  }
  expect(thrown).toBe(error);
}

/** The same answer fed as the HTTP adapters feed it. */
function answerByHttp(
  limiter: AdaptiveRateLimiter,
  status: number,
  profile: HeaderProfile,
  headers: Record<string, unknown>,
  classify?: () => { verdict: 'throttled'; retryAfterMs: number },
) {
  const permit = limiter.tryAcquire();
  if (permit === undefined) throw new Error('no permit');
  const rules = { throttleStatuses: new Set([429]), classify };
  const record = headers as Record<string, string>;
  feed(
    permit,
    classifyResponse(status, record, rules, () => headerRecord(record), quotaReader(profile, undefined)),
  );
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
  const limiter: RateLimiter = { name: 'recording', acquire: async () => permit, tryAcquire: () => permit };
  return { fed, limiter };
}

const OPENAI = {
  'x-ratelimit-limit-requests': '60',
  'x-ratelimit-remaining-requests': '0',
  'x-ratelimit-reset-requests': '1s',
};

// --- hostile headers: wrap must give the SDK's own error back and feed what the HTTP path feeds ---

const HOSTILE: [string, HeaderProfile, Record<string, unknown>][] = [
  ['negative remaining', 'openai', { ...OPENAI, 'x-ratelimit-remaining-requests': '-1' }],
  ['NaN remaining (a number)', 'openai', { ...OPENAI, 'x-ratelimit-remaining-requests': Number.NaN }],
  [
    'Infinity limit (a number)',
    'openai',
    { ...OPENAI, 'x-ratelimit-limit-requests': Number.POSITIVE_INFINITY },
  ],
  ['a 16-digit limit', 'openai', { ...OPENAI, 'x-ratelimit-limit-requests': '9999999999999999' }],
  ['a 15-digit limit', 'openai', { ...OPENAI, 'x-ratelimit-limit-requests': '999999999999999' }],
  ['remaining above limit', 'openai', { ...OPENAI, 'x-ratelimit-remaining-requests': '61' }],
  ['a huge Go-duration reset', 'openai', { ...OPENAI, 'x-ratelimit-reset-requests': '99999999999h' }],
  ['array values', 'openai', { ...OPENAI, 'x-ratelimit-remaining-requests': ['0', '59'] }],
  ['array of objects', 'openai', { ...OPENAI, 'x-ratelimit-remaining-requests': [{}, null] }],
  [
    'null and objects',
    'openai',
    { ...OPENAI, 'x-ratelimit-limit-requests': null, 'x-ratelimit-reset-requests': {} },
  ],
  [
    'anthropic reset in the past',
    'anthropic',
    {
      'anthropic-ratelimit-requests-limit': '50',
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': '2000-01-01T00:00:00Z',
    },
  ],
  [
    'anthropic reset in year 9999',
    'anthropic',
    {
      'anthropic-ratelimit-requests-limit': '50',
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': '9999-12-31T23:59:59Z',
    },
  ],
  [
    'vendor and IETF disagreeing',
    'openai',
    { ...OPENAI, 'ratelimit-policy': '"default";q=6000;w=60', ratelimit: '"default";r=5999;t=1' },
  ],
  [
    'IETF r=0 with a 10-year t',
    'standard',
    { 'ratelimit-policy': '"d";q=10;w=60', ratelimit: '"d";r=0;t=315360000' },
  ],
  ['IETF decimal', 'standard', { 'ratelimit-policy': '"d";q=10.5;w=60', ratelimit: '"d";r=0.0;t=1' }],
  [
    'IETF duplicate names',
    'standard',
    { 'ratelimit-policy': '"d";q=10;w=60, "d";q=1;w=60', ratelimit: '"d";r=3;t=5, "d";r=0;t=9' },
  ],
  [
    'github epoch reset far ahead',
    'github',
    { 'x-ratelimit-limit': '60', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '99999999999' },
  ],
  [
    'github reset in the past',
    'github',
    { 'x-ratelimit-limit': '60', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1' },
  ],
  [
    'a header named __proto__',
    'openai',
    JSON.parse('{"__proto__": {"x-ratelimit-limit-requests": "1"}, "x-ratelimit-remaining-requests": "0"}'),
  ],
];

describe('wrap headers: hostile header values feed the limiter as the HTTP path does', () => {
  for (const status of [429, 404, 503]) {
    it.each(HOSTILE)(`${status}, %s`, async (_, profile, headers) => {
      const viaWrap = limiterOf();
      const viaHttp = limiterOf();
      await throwThrough(viaWrap.limiter, sdkError(status, headers), profile);
      answerByHttp(viaHttp.limiter, status, profile, headers);
      const a = viaWrap.limiter.snapshot();
      expect(a).toEqual(viaHttp.limiter.snapshot());
      // Whatever the headers say, the pause stays within maxPause (600 s by default).
      if (a.pausedUntil !== undefined)
        expect(a.pausedUntil - viaWrap.clock.now()).toBeLessThanOrEqual(600_000);
    });
  }
});

describe('wrap headers: header containers that misbehave', () => {
  const containers: [string, () => unknown][] = [
    [
      'a Proxy whose every get throws',
      () =>
        new Proxy(
          {},
          {
            get() {
              throw new Error('get trap');
            },
            ownKeys() {
              throw new Error('ownKeys trap');
            },
            getOwnPropertyDescriptor() {
              throw new Error('gOPD trap');
            },
            has() {
              throw new Error('has trap');
            },
          },
        ),
    ],
    [
      'a Headers-like whose get returns numbers',
      () => ({ get: (n: string) => (n === 'x-adaptive-rate-limit' ? null : n.endsWith('requests') ? 0 : 7) }),
    ],
    ['a Headers-like whose get returns objects', () => ({ get: () => ({ toString: () => '0' }) })],
    [
      'a Headers-like whose get throws',
      () => ({
        get() {
          throw new Error('get threw');
        },
      }),
    ],
    ['a raw array with numbers in it', () => ['x-ratelimit-remaining-requests', 0, 42, 'x']],
    ['a Map', () => new Map(Object.entries(OPENAI))],
    ['a frozen record', () => Object.freeze({ ...OPENAI })],
    ['a function carrying headers', () => Object.assign(() => 1, OPENAI)],
  ];
  it.each(containers)('%s: the SDK error comes back, the permit is settled', async (_, make) => {
    for (const status of [429, 404, 500]) {
      const { fed, limiter } = recording();
      await throwThrough(limiter, sdkError(status, make()), 'openai');
      // Settled once, as classifyThrown judges the status alone.
      expect(fed.map((f) => f[0])).toEqual([
        status === 429 ? 'throttled' : status === 404 ? 'success' : 'failed',
      ]);
      const real = limiterOf();
      await throwThrough(real.limiter, sdkError(status, make()), 'openai');
    }
  });

  it('a getter on the error itself that throws for headers: still the SDK error, a throttle counted', async () => {
    const { limiter } = limiterOf();
    const error = Object.assign(new Error('429'), { status: 429 });
    Object.defineProperty(error, 'headers', {
      get() {
        throw new Error('headers getter');
      },
    });
    await throwThrough(limiter, error, 'openai');
    expect(limiter.snapshot().throttles).toBe(1);
  });

  it('a Headers-like whose get always answers: the refusal header is "present", read as failed, no cut', async () => {
    const { limiter } = limiterOf();
    await throwThrough(limiter, sdkError(429, { get: () => '0' }), 'openai');
    expect(limiter.snapshot().throttles).toBe(0);
  });
});

// --- non-objects thrown ---

describe('wrap headers: a wrapped function that throws non-objects', () => {
  it.each<[string, unknown]>([
    ['a string', 'boom'],
    ['a number', 429],
    ['null', null],
    ['undefined', undefined],
    ['a symbol', Symbol('s')],
    ['a bigint', 429n],
    ['false', false],
  ])('%s: rethrown as is, no throttle, no quota, no pause', async (_, value) => {
    for (const profile of ['openai', 'standard', false] as const) {
      const { limiter } = limiterOf();
      await throwThrough(limiter, value, profile);
      expect(limiter.snapshot()).toMatchObject({
        throttles: 0,
        announcedRate: undefined,
        pausedUntil: undefined,
      });
    }
  });
});

// --- budgets ---

describe('wrap headers: a multi-budget limiter and quotas of budgets it lacks', () => {
  it('anthropic input/output token quotas on a { requests, tokens } limiter: ignored, no throw', async () => {
    const { limiter } = limiterOf({ slowStart: false, budgets: { requests: {}, tokens: {} } });
    const headers = {
      'anthropic-ratelimit-requests-limit': '50',
      'anthropic-ratelimit-requests-remaining': '40',
      'anthropic-ratelimit-input-tokens-limit': '40000',
      'anthropic-ratelimit-input-tokens-remaining': '0',
      'anthropic-ratelimit-input-tokens-reset': '2026-12-01T12:00:30Z',
      date: 'Tue, 01 Dec 2026 12:00:00 GMT',
    };
    await throwThrough(limiter, sdkError(429, headers), 'anthropic', { costs: { tokens: 10 } });
    const seen = limiter.snapshot().budgets;
    expect(seen?.requests?.announcedRate).toBe(50);
    expect(seen?.tokens?.announcedRate).toBeUndefined();
  });

  it('openai tokens quota on a limiter without budgets: the tokens policy is ignored, requests read', async () => {
    const { limiter } = limiterOf();
    const headers = {
      'x-ratelimit-limit-tokens': '100',
      'x-ratelimit-remaining-tokens': '0',
      'x-ratelimit-reset-tokens': '60s',
    };
    await throwThrough(limiter, sdkError(404, headers), 'openai');
    // A limiter of one budget counts requests: a tokens quota does not pause it.
    expect(limiter.snapshot()).toMatchObject({ announcedRate: undefined, pausedUntil: undefined });
  });

  it("a custom classifyError's quota naming an unknown budget: the SDK's error, permit settled", async () => {
    const { limiter } = limiterOf({ slowStart: false, budgets: { requests: {}, tokens: {} } });
    const own: AnnouncedQuota = { policy: 'x', budget: 'nope', remaining: 0, limit: 5, windowMs: 60_000 };
    await throwThrough(limiter, sdkError(429, OPENAI), 'openai', {
      classifyError: (e: unknown) => ({ ...classifyThrown(e), quota: [own] }),
    });
    expect(limiter.snapshot().budgets?.requests?.announcedRate).toBe(60);
  });
});

// --- the option itself ---

describe('wrap headers: option values', () => {
  it.each<[string, unknown]>([
    ['a profile with a space', ' openai'],
    ['null', null],
    ['0', 0],
    ["the string 'false'", 'false'],
    ['a String object', new String('openai')],
    ['an object', { profile: 'openai' }],
    ['a symbol', Symbol('openai')],
    ['a function', () => 'openai'],
  ])('%s is a ConfigError naming headers and the value', (_, headers) => {
    const { limiter } = limiterOf();
    let thrown: unknown;
    try {
      wrap(limiter, async () => 1, { headers: headers as HeaderProfile });
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    const issues = (thrown as ConfigError).issues;
    expect(issues).toHaveLength(1);
    expect(issues[0]?.path).toBe('headers');
    expect(issues[0]?.received).toBe(headers);
    expect((thrown as Error).message).toContain('headers');
  });

  // A BigInt `headers` value (which JSON.stringify cannot print) is a ConfigError too, not a TypeError.
  it('a bigint is a ConfigError naming headers', () => {
    const { limiter } = limiterOf();
    let thrown: unknown;
    try {
      wrap(limiter, async () => 1, { headers: 10n as unknown as HeaderProfile });
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).issues[0]?.path).toBe('headers');
  });

  it.each(['STANDARD', 'OpenAI', 'Anthropic', 'gitHub', 'SHOPIFY'])(
    '%s is refused, as the limiters refuse it in code',
    (profile) => {
      const { limiter } = recording();
      let thrown: unknown;
      try {
        wrap(limiter, async () => 1, { headers: profile as HeaderProfile });
      } catch (e) {
        thrown = e;
      }
      expect(thrown).toBeInstanceOf(ConfigError);
      const issue = (thrown as ConfigError).issues[0];
      expect([issue?.path, issue?.received]).toEqual(['headers', profile]);
    },
  );

  it('undefined is the default (no quota read)', async () => {
    const { fed, limiter } = recording();
    await throwThrough(limiter, sdkError(429, OPENAI), undefined);
    expect(fed[0]?.[2]).toBeUndefined();
  });
});

// --- classifyError and its own quota ---

describe("wrap headers: a custom classifyError's quota with the profile's", () => {
  it('the profile first, then its own; the own quota is not dropped when the headers read nothing', async () => {
    const own: AnnouncedQuota = { policy: 'mine', remaining: 3, limit: 10, windowMs: 1_000 };
    for (const headers of [OPENAI, {}, undefined]) {
      const { fed, limiter } = recording();
      await throwThrough(limiter, sdkError(429, headers), 'openai', {
        classifyError: () => ({ kind: 'throttled', quota: [own] }),
      });
      const quota = fed[0]?.[2] as AnnouncedQuota[];
      expect(quota.at(-1)).toBe(own);
    }
  });

  it('a classifyError that says noAnswer-less failed on a 404 with quota headers: the quota still read', async () => {
    const { fed, limiter } = recording();
    await throwThrough(limiter, sdkError(404, OPENAI), 'openai', {
      classifyError: () => ({ kind: 'failed' }),
    });
    expect(fed[0]?.[0]).toBe('failed');
    expect(((fed[0]?.[2] ?? []) as AnnouncedQuota[]).map((q) => q.policy)).toEqual(['openai:requests']);
  });

  it("a classifyError's invalid quota is an InvalidCallbackValueError with the SDK error as cause, permit failed", async () => {
    const { fed, limiter } = recording();
    const error = sdkError(429, OPENAI);
    const call = wrap(
      limiter,
      async () => {
        throw error;
      },
      {
        headers: 'openai',
        maxAttempts: 1,
        classifyError: () => ({ kind: 'throttled', quota: [{ remaining: -1 }] }),
      },
    );
    const thrown = await call().catch((e: unknown) => e);
    expect((thrown as Error).name).toBe('InvalidCallbackValueError');
    expect((thrown as Error).cause).toBe(error);
    expect(fed.map((f) => f[0])).toEqual(['failed']);
  });

  // A bug this attack found: classifyThrown returned shared module-level outcome objects; a
  // classifyError that added its quota to classifyThrown's answer in place changed the answer of
  // every later call. Now a new object each time.
  it('mutating the outcome classifyThrown returned for one 404 does not change the next 404', () => {
    const first = classifyThrown(sdkError(404, {})) as Outcome & { quota?: AnnouncedQuota[] };
    const before = { ...first };
    try {
      first.quota = [{ policy: 'leaked', remaining: 0, limit: 1, windowMs: 60_000 }];
      const second = classifyThrown(sdkError(404, {}));
      expect(second.quota).toBeUndefined();
    } finally {
      // Restore the shared object whatever happened, for the other tests of this process.
      delete (first as { quota?: unknown }).quota;
      Object.assign(first, before);
    }
  });
});

// --- 4xx + quota headers: a success carrying a quota ---

describe('wrap headers: a 4xx success carrying quota headers', () => {
  it('a 404 announcing a limit moves the ceiling as the same 404 through the HTTP path does', async () => {
    const headers = {
      'x-ratelimit-limit-requests': '30',
      'x-ratelimit-remaining-requests': '29',
      'x-ratelimit-reset-requests': '2s',
    };
    const viaWrap = limiterOf();
    const viaHttp = limiterOf();
    await throwThrough(viaWrap.limiter, sdkError(404, headers), 'openai');
    answerByHttp(viaHttp.limiter, 404, 'openai', headers);
    expect(viaWrap.limiter.snapshot().announcedRate).toBe(30);
    expect(viaWrap.limiter.snapshot()).toEqual(viaHttp.limiter.snapshot());
  });

  it('a 404 with remaining 0 pauses (the same pause as the HTTP path), no throttle counted', async () => {
    const headers = { 'ratelimit-policy': '"d";q=10;w=60', ratelimit: '"d";r=0;t=30' };
    const viaWrap = limiterOf();
    const viaHttp = limiterOf();
    await throwThrough(viaWrap.limiter, sdkError(404, headers), 'standard');
    answerByHttp(viaHttp.limiter, 404, 'standard', headers);
    const seen = viaWrap.limiter.snapshot();
    expect(seen.throttles).toBe(0);
    expect(seen.pausedUntil).toBeDefined();
    expect(seen).toEqual(viaHttp.limiter.snapshot());
  });

  it('a 400 with an LLM error body and quota headers: refused call, quota still read', async () => {
    const { fed, limiter } = recording();
    const error = sdkError(400, OPENAI, {
      error: { message: 'context too long', type: 'invalid_request_error', param: null, code: null },
    });
    await throwThrough(limiter, error, 'openai');
    expect(fed[0]?.[0]).toBe('success');
    expect(((fed[0]?.[2] ?? []) as AnnouncedQuota[]).map((q) => q.policy)).toEqual(['openai:requests']);
  });

  it('a 403 (GitHub secondary) with github headers: a success carrying the quota, no throttle', async () => {
    const { limiter } = limiterOf();
    await throwThrough(
      limiter,
      sdkError(403, {
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': '4000',
        'x-ratelimit-reset': String(WALL / 1000 + 3600),
      }),
      'github',
    );
    expect(limiter.snapshot()).toMatchObject({ throttles: 0 });
    expect(limiter.snapshot().announcedRate).toBeDefined();
  });
});

// --- quotaWait ---

describe('wrap headers: quotaWait', () => {
  it('an exhausted IETF policy, its only wait: marked quotaWait (as the HTTP path)', async () => {
    const { fed, limiter } = recording();
    const headers = { 'ratelimit-policy': '"d";q=10;w=60', ratelimit: '"d";r=0;t=30' };
    await throwThrough(limiter, sdkError(429, headers), 'standard');
    // A plain RateLimiter's permit: throttledByQuota falls back to throttled(ms, quota, budgets).
    expect(fed[0]?.slice(0, 2)).toEqual(['throttled', 30_000]);
  });

  it('same headers with Retry-After: not a quotaWait (the HTTP path agrees)', async () => {
    const headers = { 'ratelimit-policy': '"d";q=10;w=60', ratelimit: '"d";r=0;t=30', 'retry-after': '30' };
    const viaWrap = limiterOf();
    const viaHttp = limiterOf();
    await throwThrough(viaWrap.limiter, sdkError(429, headers), 'standard');
    answerByHttp(viaHttp.limiter, 429, 'standard', headers);
    expect(viaWrap.limiter.snapshot()).toEqual(viaHttp.limiter.snapshot());
  });

  it("the error's own retryAfterMs equal to the reset, no header wait: the HTTP path has no such wait", async () => {
    // An IETF r=0 policy without t: rateLimitWait is undefined; the error's own retryAfterMs used.
    const headers = { 'ratelimit-policy': '"d";q=10;w=60', ratelimit: '"d";r=0' };
    const { fed, limiter } = recording();
    await throwThrough(limiter, sdkError(429, headers, { retryAfterMs: 5_000 }), 'standard');
    expect(fed[0]?.slice(0, 2)).toEqual(['throttled', 5_000]);
  });

  // A bug this attack found: wrap marked quotaWait whenever the outcome's wait equaled the exhausted
  // policy's reset, even when a custom classifyError asked for that wait itself; the HTTP adapters count a `classify`
  // callback's wait as asked (never quotaWait) and pause for it whole. Through wrap the limiter
  // paused for one unit of the learned bucket (1 s) instead of the 60 s the callback asked for.
  it("a custom classifyError's own wait equal to the reset pauses as the HTTP adapters' classify does", async () => {
    const policy = { 'ratelimit-policy': '"default";q=60;w=60' };
    const viaWrap = limiterOf();
    const viaHttp = limiterOf();
    for (const { clock, limiter } of [viaWrap, viaHttp]) {
      answerByHttp(limiter, 200, 'standard', { ...policy, ratelimit: '"default";r=5;t=55' });
      clock.advance(1_000);
      answerByHttp(limiter, 200, 'standard', { ...policy, ratelimit: '"default";r=6;t=54' });
      clock.advance(1_000);
    }
    const headers = { ...policy, ratelimit: '"default";r=0;t=60' };
    await throwThrough(viaWrap.limiter, sdkError(429, headers), 'standard', {
      classifyError: () => ({ kind: 'throttled', retryAfterMs: 60_000 }),
    });
    answerByHttp(viaHttp.limiter, 429, 'standard', headers, () => ({
      verdict: 'throttled',
      retryAfterMs: 60_000,
    }));
    const paused = viaWrap.limiter.snapshot().pausedUntil as number;
    expect(paused - viaWrap.clock.now()).toBeGreaterThan(1_000);
    expect(viaWrap.limiter.snapshot()).toEqual(viaHttp.limiter.snapshot());
  });

  it('the same callback wait one ms off the reset: paused whole (the control of the test above)', async () => {
    const policy = { 'ratelimit-policy': '"default";q=60;w=60' };
    const viaWrap = limiterOf();
    const viaHttp = limiterOf();
    for (const { clock, limiter } of [viaWrap, viaHttp]) {
      answerByHttp(limiter, 200, 'standard', { ...policy, ratelimit: '"default";r=5;t=55' });
      clock.advance(1_000);
      answerByHttp(limiter, 200, 'standard', { ...policy, ratelimit: '"default";r=6;t=54' });
      clock.advance(1_000);
    }
    const headers = { ...policy, ratelimit: '"default";r=0;t=60' };
    await throwThrough(viaWrap.limiter, sdkError(429, headers), 'standard', {
      classifyError: () => ({ kind: 'throttled', retryAfterMs: 60_001 }),
    });
    answerByHttp(viaHttp.limiter, 429, 'standard', headers, () => ({
      verdict: 'throttled',
      retryAfterMs: 60_001,
    }));
    expect(viaWrap.limiter.snapshot()).toEqual(viaHttp.limiter.snapshot());
  });
});

describe('wrap headers: more hostile errors', () => {
  it('an error that is a Proxy whose every trap throws: rethrown as is, the permit failed', async () => {
    const { fed, limiter } = recording();
    const trap = () => {
      throw new Error('trap');
    };
    const error = new Proxy(
      {},
      { get: trap, has: trap, ownKeys: trap, getOwnPropertyDescriptor: trap, getPrototypeOf: trap },
    );
    await throwThrough(limiter, error, 'openai');
    expect(fed.map((f) => f[0])).toEqual(['failed']);
  });

  it("a classifyError's quota with a budget that is not a string: the call's outcome", async () => {
    const { limiter } = limiterOf({ slowStart: false, budgets: { requests: {}, tokens: {} } });
    const error = sdkError(429, OPENAI);
    const call = wrap(
      limiter,
      async () => {
        throw error;
      },
      {
        headers: 'openai',
        maxAttempts: 1,
        classifyError: () => ({
          kind: 'throttled',
          quota: [{ budget: 42 as unknown as string, remaining: 0, limit: 1, windowMs: 1_000 }],
        }),
      },
    );
    const thrown = await call().catch((e: unknown) => e);
    // Not checked by checkedOutcome; the limiter reads a budget it lacks as none: the SDK's error.
    expect(thrown).toBe(error);
    expect(limiter.snapshot().budgets?.requests?.announcedRate).toBe(60);
  });
});

// --- 4xx storm: rate raising ---

/** Runs `n` calls of `call` at once on `clock`, stepping it until all settle (bounded). */
async function storm(clock: ManualClock, call: () => Promise<unknown>, n: number, stepMs: number) {
  let left = n;
  const all = Array.from({ length: n }, () =>
    call().then(
      () => left--,
      () => left--,
    ),
  );
  for (let i = 0; i < 2_000 && left > 0; i++) {
    await new Promise((r) => setImmediate(r));
    clock.advance(stepMs);
  }
  await Promise.all(all);
  expect(left).toBe(0);
}

describe('wrap headers: a 404 storm raises the rate as a 200 storm does', () => {
  for (const [what, n, stepMs] of [
    ['calls that queue', 40, 50],
    ['calls one at a time (none waits)', 1, 0],
  ] as const) {
    it(`${what}: the 404s through wrap leave the limiter the resolved calls leave`, async () => {
      const opts = { initialUnitsPerMinute: 120, slowStart: false } as const;
      const ok = limiterOf(opts);
      const notFound = limiterOf(opts);
      const resolving = wrap(ok.limiter, async () => 'ok', { headers: 'openai' });
      const rejecting = wrap(
        notFound.limiter,
        async () => {
          throw sdkError(404, {});
        },
        { headers: 'openai' },
      );
      for (let round = 0; round < 10; round++) {
        await storm(ok.clock, resolving, n, stepMs);
        await storm(notFound.clock, rejecting, n, stepMs);
        ok.clock.advance(2_000);
        notFound.clock.advance(2_000);
      }
      const a = ok.limiter.snapshot();
      const b = notFound.limiter.snapshot();
      expect(b.throttles).toBe(0);
      expect(b).toEqual(a);
      if (n === 1)
        expect(b.rate).toBe(120); // nothing waited: no raise
      else expect(b.rate).toBeGreaterThan(120); // calls waited: the 404s raised it
    });
  }
});

describe('wrap vs rateLimitedFetch on the same 404s from a real node:http server', () => {
  it('both count the 404s as successes; neither cuts', async () => {
    const server = createServer((_req, res) => {
      res.writeHead(404, { 'x-ratelimit-limit-requests': '120', 'x-ratelimit-remaining-requests': '100' });
      res.end('nope');
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/x`;
    try {
      const viaFetch = limiterOf({ initialUnitsPerMinute: 6_000 });
      const viaWrap = limiterOf({ initialUnitsPerMinute: 6_000 });
      vi.useRealTimers();
      const origin = new URL(url).origin;
      const f = rateLimitedFetch({
        limiters: { x: { origins: [origin], limiter: viaFetch.limiter, headers: 'openai' } },
      });
      const call = wrap(
        viaWrap.limiter,
        async () => {
          const r = await fetch(url);
          await r.arrayBuffer();
          if (!r.ok)
            throw Object.assign(new Error(String(r.status)), { status: r.status, headers: r.headers });
          return r;
        },
        { headers: 'openai', maxAttempts: 1 },
      );
      for (let i = 0; i < 5; i++) {
        const r = await f(url);
        await r.arrayBuffer();
        expect(r.status).toBe(404);
        await expect(call()).rejects.toMatchObject({ status: 404 });
        // The announced 120 a minute caps both: a second refills two units.
        viaFetch.clock.advance(1_000);
        viaWrap.clock.advance(1_000);
      }
      const a = viaWrap.limiter.snapshot();
      const b = viaFetch.limiter.snapshot();
      expect(a.throttles).toBe(0);
      expect(b.throttles).toBe(0);
      expect(a.announcedRate).toBe(120);
      expect(b.announcedRate).toBe(120);
      expect(a.rate).toBe(b.rate);
    } finally {
      server.close();
    }
  });
});

// --- other limiters ---

describe('wrap headers: a fixed window or a shared budget as the limiter', () => {
  it('a fixed window limiter: quota passed, ignored, the SDK error comes back, the window counts the call', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindowRateLimiter({
      limitForPeriod: 2,
      limitRefreshPeriod: 1_000,
      timeoutDuration: 0,
      clock,
    });
    await throwThrough(limiter, sdkError(429, OPENAI), 'openai');
    await throwThrough(
      limiter,
      sdkError(404, { ...OPENAI, 'x-ratelimit-remaining-requests': '-5' }),
      'openai',
    );
    expect(limiter.tryAcquire()).toBeUndefined();
  });

  it('a shared budget (memory store): announced quota reaches its local limiter', async () => {
    const clock = new ManualClock();
    const budget = createSharedBudget({
      name: 'wrap-headers',
      store: new MemoryBudgetStore({ clock }),
      clock,
      initialUnitsPerMinute: 600,
    });
    try {
      for (const error of [
        sdkError(429, OPENAI),
        sdkError(404, { ...OPENAI, 'x-ratelimit-remaining-requests': '30' }),
      ]) {
        const call = wrap(
          budget,
          async () => {
            throw error;
          },
          { headers: 'openai', maxAttempts: 1 },
        );
        let settled: unknown = 'pending';
        const p = call().then(
          () => (settled = 'resolved'),
          (e: unknown) => (settled = e),
        );
        for (let i = 0; i < 200 && settled === 'pending'; i++) {
          await Promise.resolve();
          await new Promise((r) => setImmediate(r));
          clock.advance(100);
        }
        await p;
        expect(settled).toBe(error);
      }
      expect(budget.limiter.snapshot().announcedRate).toBe(60);
    } finally {
      await budget.close();
    }
  });
});
