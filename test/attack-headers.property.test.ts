import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { headerLookup } from '../src/headers.js';
import { LlmMeter } from '../src/http/llm.js';
import { readAnthropic } from '../src/http/quota-headers/anthropic.js';
import { readGithub } from '../src/http/quota-headers/github.js';
import { readIetf } from '../src/http/quota-headers/ietf.js';
import { parseGoDuration, quotaReader } from '../src/http/quota-headers/index.js';
import { readOpenai } from '../src/http/quota-headers/openai.js';
import { readShopify } from '../src/http/quota-headers/shopify.js';
import { parseRetryAfter, retryAfterFromHeaders } from '../src/http/retry-after.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { quotaProblem } from '../src/limiter/permit.js';
import type { AnnouncedQuota } from '../src/limiter/types.js';

const NOW = Date.UTC(2025, 1, 24, 22, 25, 0);
const h = (headers: Record<string, string | string[]>) => headerLookup(headers);

const WEIRD = [
  '',
  ' ',
  '\t',
  '0',
  '1',
  '-1',
  '+5',
  '1e3',
  '1e309',
  '0x10',
  '1.5',
  '.5',
  '5.',
  'Infinity',
  'NaN',
  '999999999999999',
  '9999999999999999999999',
  '1h2m3.5s',
  '-1s',
  '1e3s',
  '9999999h',
  '6m0s',
  '0s',
  '20ms',
  '1.002s',
  '2025-02-24T22:25:47Z',
  '2025-02-24T22:25:47.123456789Z',
  '+275760-09-13T00:00:00Z',
  '0000-01-01T00:00:00Z',
  'Sun, 06 Nov 1994 08:49:37 GMT',
  'Fri, 31 Dec 9999 23:59:59 GMT',
  '"default";r=0;t=30',
  '"a";q=0;w=1',
  '"a";r=5;t=999999999999999',
  'limit=100, remaining=50, reset=5',
  '32/40',
  '40/40',
  '0/0',
  'é',
  '\u0000',
  'core',
  '__proto__',
  'constructor',
];
const value = fc.oneof(
  fc.constantFrom(...WEIRD),
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.array(fc.constantFrom(...WEIRD), { minLength: 1, maxLength: 4 }).map((a) => a.join('')),
  fc.integer({ min: -5, max: 2 ** 40 }).map(String),
  fc.double().map(String),
);
const fieldValue = fc.oneof(
  { weight: 4, arbitrary: value },
  { weight: 1, arbitrary: fc.array(value, { minLength: 1, maxLength: 3 }) },
);

const NAMES = [
  'retry-after',
  'retry-after-ms',
  'x-ms-retry-after-ms',
  'ratelimit',
  'ratelimit-policy',
  'date',
  'age',
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-used',
  'x-ratelimit-reset',
  'x-ratelimit-resource',
  'x-ratelimit-limit-requests',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
  'x-ratelimit-limit-tokens',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-tokens',
  'anthropic-ratelimit-requests-limit',
  'anthropic-ratelimit-requests-remaining',
  'anthropic-ratelimit-requests-reset',
  'anthropic-ratelimit-input-tokens-limit',
  'anthropic-ratelimit-input-tokens-remaining',
  'anthropic-ratelimit-input-tokens-reset',
  'x-shopify-shop-api-call-limit',
];
const headers = fc.dictionary(fc.constantFrom(...NAMES), fieldValue, { maxKeys: 10 });
const BUDGETS = {
  openai: ['requests', 'tokens'],
  anthropic: ['requests', 'input_tokens', 'output_tokens'],
} as const;
const PROFILES = ['standard', 'github', 'openai', 'anthropic', 'shopify'] as const;

function okWait(ms: number | undefined): boolean {
  return ms === undefined || (Number.isFinite(ms) && ms >= 0);
}

/** Feeds `quotas` to a real limiter as a success and as a 429, then draws; returns what is wrong. */
async function feed(
  quotas: AnnouncedQuota[],
  burst: 'paced' | 'second' | 'announced',
  retryMs?: number,
  budgets?: readonly string[],
) {
  const clock = new ManualClock(1_000);
  const maxPause = 600_000;
  const limiter = new AdaptiveRateLimiter({
    clock,
    burst,
    maxPause,
    maxWait: maxPause,
    slowStart: false,
    ...(budgets === undefined ? {} : { budgets: Object.fromEntries(budgets.map((b) => [b, { burst }])) }),
  });
  const problems: string[] = [];
  const check = (where: string) => {
    const s = limiter.snapshot();
    if (!(s.rate > 0) || Number.isNaN(s.rate)) problems.push(`${where}: rate ${s.rate}`);
    if (s.announcedRate !== undefined && !(s.announcedRate > 0 && s.announcedRate < Infinity))
      problems.push(`${where}: announcedRate ${s.announcedRate}`);
    if (Number.isNaN(s.tokens) || Number.isNaN(s.capacity))
      problems.push(`${where}: tokens ${s.tokens}/${s.capacity}`);
    if (s.pausedUntil !== undefined) {
      const wait = s.pausedUntil - clock.now();
      if (!(wait >= 0 && wait <= maxPause)) problems.push(`${where}: pause ${wait}`);
    }
  };
  limiter.tryAcquire()?.success(undefined, quotas);
  check('success');
  limiter.tryAcquire()?.throttled(retryMs, quotas);
  check('throttled');
  let settled = 0;
  for (let i = 0; i < 3; i++)
    limiter.acquire().then(
      () => settled++,
      () => settled++,
    );
  for (let i = 0; i < 5; i++) {
    clock.advance(maxPause / 2);
    await new Promise<void>((r) => setImmediate(r));
  }
  check('after');
  if (settled < 3) problems.push(`${3 - settled} acquires unsettled after 2.5 maxPause`);
  limiter.close();
  return problems;
}

describe('fuzz: readers never throw and give finite, non-negative numbers', () => {
  it('Retry-After readers', () => {
    fc.assert(
      fc.property(headers, fieldValue, (hs, v) => {
        const ms = retryAfterFromHeaders(h(hs), NOW);
        expect(okWait(ms)).toBe(true);
        expect(okWait(parseRetryAfter(v, NOW))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('parseGoDuration', () => {
    fc.assert(
      fc.property(value, (v) => {
        expect(okWait(parseGoDuration(v))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('every profile: quotas pass quotaProblem and vendor remaining <= limit', () => {
    fc.assert(
      fc.property(headers, fc.constantFrom(...PROFILES), (hs, profile) => {
        const quotas = quotaReader(profile, undefined)?.(h(hs), () => hs, NOW) ?? [];
        for (const q of quotas) expect(quotaProblem(q)).toBeUndefined();
        for (const read of [
          readGithub(h(hs), NOW),
          readOpenai(h(hs)),
          readAnthropic(h(hs), NOW),
          readShopify(h(hs)),
        ])
          for (const q of read ?? []) {
            // windowMs: readGithub's WINDOWS[resource] reads Object.prototype for `constructor`; quotaReader strips it.
            for (const k of ['remaining', 'resetMs', 'limit'] as const) expect(okWait(q[k])).toBe(true);
          }
        readIetf(h(hs));
      }),
      { numRuns: 2000 },
    );
  });

  it('LLM 429 bodies: waitMs finite, whole and >= 0', () => {
    const meter = new LlmMeter('openai');
    const msg = fc.oneof(
      fc.string(),
      fc
        .tuple(
          fc.constantFrom('Please try again in ', 'Please retry after ', 'Try again in '),
          value,
          fc.string({ maxLength: 5 }),
        )
        .map((p) => p.join('')),
    );
    fc.assert(
      fc.property(msg, (m) => {
        const r = meter.refusal({ error: { message: m, type: 'tokens' } });
        if (r.kind === 'rate' && r.waitMs !== undefined) {
          expect(Number.isInteger(r.waitMs) && r.waitMs >= 0).toBe(true);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('fuzz: what the readers give keeps a real limiter sane', () => {
  it('every profile, every burst', async () => {
    await fc.assert(
      fc.asyncProperty(
        headers,
        fc.constantFrom(...PROFILES),
        fc.constantFrom('paced', 'second', 'announced') as fc.Arbitrary<'paced' | 'second' | 'announced'>,
        async (hs, profile, burst) => {
          const quotas = quotaReader(profile, undefined)?.(h(hs), () => hs, NOW) ?? [];
          if (quotas.length === 0) return;
          const wait = retryAfterFromHeaders(h(hs), NOW);
          expect(await feed(quotas, burst, wait)).toEqual([]);
          if (profile === 'openai' || profile === 'anthropic')
            expect(await feed(quotas, burst, wait, BUDGETS[profile])).toEqual([]);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('vendor-shaped headers with any numbers', async () => {
    const n = fc.oneof(
      fc.integer({ min: 0, max: 100 }),
      fc.integer({ min: 0, max: 1e15 }),
      fc.constantFrom(0, 1, 999999999999999),
    );
    const go = fc
      .tuple(fc.nat(99999), fc.nat(59), fc.nat(999), fc.constantFrom('h', 'm', 's', 'ms'))
      .map(
        ([a, b, c, u]) =>
          fc.sample(
            fc.constantFrom(`${a}${u}`, `${a}m${b}s`, `${a}.${c}s`, `${b}h${a}m${c}.5s`, '0s', `${a}`),
            1,
          )[0] as string,
      );
    const epoch = fc.integer({ min: 0, max: 2 ** 40 }).map(String);
    const rfc3339 = fc
      .date({ min: new Date(0), max: new Date(8.64e15), noInvalidDate: true })
      .map((d) => d.toISOString());
    const vendor = fc.oneof(
      fc
        .record({
          'x-ratelimit-limit': n.map(String),
          'x-ratelimit-remaining': n.map(String),
          'x-ratelimit-reset': epoch,
          'x-ratelimit-resource': fc.constantFrom('core', 'search', 'graphql', 'other'),
        })
        .map((r) => ['github', r] as const),
      fc
        .record(
          {
            'x-ratelimit-limit-requests': n.map(String),
            'x-ratelimit-remaining-requests': n.map(String),
            'x-ratelimit-reset-requests': go,
            'x-ratelimit-limit-tokens': n.map(String),
            'x-ratelimit-remaining-tokens': n.map(String),
            'x-ratelimit-reset-tokens': go,
          },
          { requiredKeys: ['x-ratelimit-remaining-requests', 'x-ratelimit-remaining-tokens'] },
        )
        .map((r) => ['openai', r] as const),
      fc
        .record({
          'anthropic-ratelimit-requests-limit': n.map(String),
          'anthropic-ratelimit-requests-remaining': n.map(String),
          'anthropic-ratelimit-requests-reset': rfc3339,
          'anthropic-ratelimit-input-tokens-limit': n.map(String),
          'anthropic-ratelimit-input-tokens-remaining': n.map(String),
          'anthropic-ratelimit-input-tokens-reset': rfc3339,
        })
        .map((r) => ['anthropic', r] as const),
      fc
        .record({
          'x-ratelimit-remaining-requests': n.map(String),
          'x-ratelimit-remaining-tokens': n.map(String),
          'x-ratelimit-reset-tokens': fc.constantFrom('-1', '0', '60', '1s'),
        })
        .map((r) => ['openai', r] as const),
      fc
        .tuple(fc.nat(1e9), fc.nat(1e9))
        .map(
          ([a, b]) =>
            ['shopify', { 'x-shopify-shop-api-call-limit': `${Math.min(a, b)}/${Math.max(a, b)}` }] as const,
        ),
      fc
        .tuple(n, n, fc.integer({ min: 1, max: 1e15 }), n)
        .map(
          ([q, r, w, t]) =>
            [
              'standard',
              { 'ratelimit-policy': `"p";q=${q};w=${w}`, ratelimit: `"p";r=${r};t=${t}` },
            ] as const,
        ),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(vendor, fc.nat(120_000), fc.constantFrom('success', 'throttled', 'failed')), {
          minLength: 2,
          maxLength: 8,
        }),
        fc.constantFrom('paced', 'second', 'announced') as fc.Arbitrary<'paced' | 'second' | 'announced'>,
        async (steps, burst) => {
          const clock = new ManualClock(1_000);
          const limiter = new AdaptiveRateLimiter({
            clock,
            burst,
            maxPause: 600_000,
            maxWait: 600_000,
            slowStart: false,
            budgets: { requests: { burst }, tokens: { burst }, input_tokens: { burst } },
          });
          for (const [[profile, hs], dt, kind] of steps) {
            const quotas =
              quotaReader(profile, undefined)?.(h(hs as Record<string, string>), () => hs, NOW) ?? [];
            const p = limiter.tryAcquire();
            if (kind === 'success') p?.success(undefined, quotas);
            else if (kind === 'throttled') p?.throttled(undefined, quotas);
            else p?.failed(undefined, quotas);
            clock.advance(dt);
            const all = limiter.snapshot();
            for (const s of Object.values(all.budgets ?? { x: all })) {
              expect(s.rate > 0 && !Number.isNaN(s.rate)).toBe(true);
              expect(Number.isNaN(s.tokens) || Number.isNaN(s.capacity)).toBe(false);
              if (s.announcedRate !== undefined)
                expect(s.announcedRate > 0 && Number.isFinite(s.announcedRate)).toBe(true);
              if (s.pausedUntil !== undefined)
                expect(s.pausedUntil - clock.now()).toBeLessThanOrEqual(600_000);
            }
          }
          limiter.close();
        },
      ),
      { numRuns: 200 },
    );
    await fc.assert(
      fc.asyncProperty(
        vendor,
        fc.constantFrom('paced', 'second', 'announced') as fc.Arbitrary<'paced' | 'second' | 'announced'>,
        async ([profile, hs], burst) => {
          const quotas =
            quotaReader(profile, undefined)?.(h(hs as Record<string, string>), () => hs, NOW) ?? [];
          for (const q of quotas) expect(quotaProblem(q)).toBeUndefined();
          if (quotas.length === 0) return;
          expect(
            await feed(
              quotas,
              burst,
              undefined,
              profile === 'openai' || profile === 'anthropic' ? BUDGETS[profile] : undefined,
            ),
          ).toEqual([]);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('arbitrary valid quotas', async () => {
    // What the readers can give: integers (IETF, GitHub, Shopify) and ms from seconds or Go durations.
    const num = fc.oneof(
      fc.constantFrom(0, 1, 1e15, 1e18),
      fc.integer({ min: 0, max: 1e9 }),
      fc.double({ min: 1e-6, max: 1e6, noNaN: true }),
    );
    const pos = num.filter((x) => x > 0);
    const quota = fc.record(
      { policy: fc.constantFrom('a', 'b'), remaining: num, resetMs: num, limit: pos, windowMs: pos },
      { requiredKeys: ['policy'] },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(quota, { minLength: 1, maxLength: 3 }),
        fc.constantFrom('paced', 'second', 'announced') as fc.Arbitrary<'paced' | 'second' | 'announced'>,
        async (quotas, burst) => {
          expect(await feed(quotas, burst)).toEqual([]);
        },
      ),
      { numRuns: 300 },
    );
  });
});

// ---- Bugs, as plain deterministic tests ----------------------------------------------------------

const anthropic = (reset: string | undefined) => {
  const hs: Record<string, string> = {
    'anthropic-ratelimit-requests-limit': '50',
    'anthropic-ratelimit-requests-remaining': '0',
    date: 'Mon, 24 Feb 2025 22:25:00 GMT',
  };
  if (reset !== undefined) hs['anthropic-ratelimit-requests-reset'] = reset;
  return h(hs);
};

// Anthropic documents `anthropic-ratelimit-*-reset` as an RFC 3339 instant; anthropic.ts reads it
// with Date.parse, which takes "-5" as 2001-05-01, "60" as 1960, "garbage 2025" as 2025-01-01 and
// an offset-less time in the process's local zone (the very leniency retry-after.ts refuses).
// A past date gives resetMs 0: with nothing left, no pause at all, where a missing or unreadable
// reset pauses one unit's refill (60 s / 50 = 1.2 s).
describe('bug: Anthropic reset read by Date.parse, not as RFC 3339', () => {
  const absent = readAnthropic(anthropic(undefined), NOW)?.[0]?.resetMs;
  it.each(['-5', '60', 'garbage 2025', '2025', '2025-02-24T22:26:00'])(
    'a reset of %j that is no RFC 3339 instant is ignored',
    (reset) => {
      expect(absent).toBe(1_200);
      expect(readAnthropic(anthropic(reset), NOW)?.[0]?.resetMs).toBe(absent);
    },
  );

  it('still reads RFC 3339 forms (fraction, offset, lower-case t/z)', () => {
    for (const reset of [
      '2025-02-24T22:25:47Z',
      '2025-02-24T22:25:47.123456789Z',
      '2025-02-24T23:25:47+01:00',
      '2025-02-24t22:25:47z',
    ])
      expect(readAnthropic(anthropic(reset), NOW)?.[0]?.resetMs).toBeGreaterThan(0);
  });

  it('a limiter told "nothing left, reset -5" pauses as it does without the reset', () => {
    const paused = (reset: string | undefined) => {
      const clock = new ManualClock(1_000);
      const limiter = new AdaptiveRateLimiter({ clock, budgets: { requests: {} } });
      const quotas = quotaReader('anthropic', undefined)?.(anthropic(reset), () => ({}), NOW);
      limiter.tryAcquire()?.success(undefined, quotas);
      const out = limiter.tryAcquire() === undefined;
      limiter.close();
      return out;
    };
    expect(paused(undefined)).toBe(true);
    expect(paused('-5')).toBe(true);
  });
});

// llm.ts askedWait: parseGoDuration gives a finite 1e303 ms, and `Math.round(ms * 1e6) / 1e6`
// overflows to Infinity: waitMs Infinity, which is not "whole ms" (retry-after.ts clamps its
// waits to Number.MAX_SAFE_INTEGER and promises finite results).
describe('bug: an OpenAI 429 message wait can be Infinity', () => {
  it('"Please try again in 1e303ms" gives a finite waitMs or none', () => {
    const r = new LlmMeter('openai').refusal({
      error: { message: `Please try again in 1${'0'.repeat(303)}ms.`, type: 'tokens' },
    });
    expect(r.kind).toBe('rate');
    if (r.kind === 'rate' && r.waitMs !== undefined) expect(Number.isFinite(r.waitMs)).toBe(true);
  });

  it('property: every wait read from a message is finite and whole', () => {
    const meter = new LlmMeter('openai');
    fc.assert(
      fc.property(
        fc.integer({ min: 290, max: 312 }),
        fc.constantFrom('h', 'm', 's', 'ms', 'us', 'ns'),
        (digits, unit) => {
          const r = meter.refusal({
            error: { message: `Please try again in 9${'9'.repeat(digits - 1)}${unit}.`, type: 'tokens' },
          });
          if (r.kind === 'rate' && r.waitMs !== undefined) expect(Number.isInteger(r.waitMs)).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });
});
