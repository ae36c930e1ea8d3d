import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { type RateLimitedFetch, type RateLimitedFetchOptions, rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { wrap } from '../src/wrap/wrap.js';
import { advanceUntil, NEVER_BINDS } from './helpers/interceptor-fixtures.js';

// Attacks on `wrap` and `rateLimitedFetch`: each test below fails on the code it was written
// against, because of a bug against what the docs promise ("nothing is lost silently: every
// request ends as sent, rejected with a typed error, or returned as the server's last answer";
// "the fetch's own errors reject as they are").

const wrappers: RateLimitedFetch[] = [];
afterEach(() => {
  for (const w of wrappers.splice(0)) w.close();
});
function limited(options: RateLimitedFetchOptions): RateLimitedFetch {
  const f = rateLimitedFetch({ clock: new ManualClock(), ...options });
  wrappers.push(f);
  return f;
}

/** A 429 (`Retry-After: 0`) whose body a fetch middleware already read (to log it), then 200s. */
function readFirst429(body = 'slow down') {
  let calls = 0;
  const fetch = (async () => {
    calls++;
    if (calls > 1) return new Response('ok');
    const response = new Response(body, { status: 429, headers: { 'retry-after': '0' } });
    await response.text(); // e.g. a logging fetch that read the 429's body
    return response;
  }) as typeof globalThis.fetch;
  return { fetch, calls: () => calls };
}

describe('rateLimitedFetch: a throttled response whose body was already read', () => {
  it('is retried (or handed back), not turned into "ReadableStream is locked"', async () => {
    const { fetch, calls } = readFirst429();
    const f = limited({ fetch, default: NEVER_BINDS });
    const result = await f('https://api.test/items').then(
      (r) => r.status,
      (e: unknown) => e,
    );
    // With maxAttempts: 1 the same response is returned as it is; with retries left the caller
    // got a TypeError from holdResponse's getReader() and lost the server's answer.
    expect(result).toBe(200);
    expect(calls()).toBe(2);
  });

  it("with api: 'openai', the 429's read body does not fail the call either", async () => {
    const { fetch } = readFirst429('{"error":{"type":"requests","message":"Rate limit reached"}}');
    const clock = new ManualClock();
    const f = limited({
      fetch,
      clock,
      limiters: { openai: { origins: ['https://api.openai.com'], api: 'openai' } },
    });
    let result: unknown;
    void f('https://api.openai.com/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ model: 'gpt-4o', max_tokens: 5, messages: [] }),
    }).then(
      (r) => {
        result = r.status;
      },
      (e: unknown) => {
        result = String(e);
      },
    );
    // The retry waits for the cut rate's next slot: the clock moves a second at a time.
    await advanceUntil(clock, () => result !== undefined, 'the call settled');
    expect(result).toBe(200);
  });
});

describe('rateLimitedFetch: a Request whose body was already used', () => {
  it("rejects with fetch's own clear TypeError and gives its units back", async () => {
    const f = limited({
      fetch: async () => new Response('ok'),
      default: { initialUnitsPerMinute: 60, maxUnitsPerMinute: 60 },
    });
    const limiter = f.registry.limiterFor('https://api.test');
    const before = limiter?.snapshot().tokens;
    const request = new Request('https://api.test/upload', { method: 'POST', body: 'payload' });
    await request.text();
    const error = await f(request).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    // Node's fetch says "Cannot construct a Request with a Request object that has already been
    // used."; the wrapper said "unusable" (undici's internal text from Request.clone()).
    expect.soft((error as Error).message).toMatch(/used|consumed/i);
    // Nothing was sent: the unit it took is given back.
    expect.soft(limiter?.snapshot().tokens).toBe(before);
  });
});

describe("rateLimitedFetch: the fetch's own rejection, whatever it is", () => {
  it('is rethrown as the same object even when reading it throws (a Proxy)', async () => {
    const odd = new Proxy(
      {},
      {
        get() {
          throw new Error('trap');
        },
      },
    );
    const f = limited({
      fetch: async () => {
        throw odd;
      },
      default: NEVER_BINDS,
    });
    // Kept in an object: a promise resolved with the Proxy itself would read its `then`.
    const caught = await f('https://api.test/').catch((e: unknown) => ({ e }));
    expect((caught as { e: unknown }).e).toBe(odd);
  });
});

describe('wrap: a classifyError that rethrows the call’s own error', () => {
  it('leaves that error as it was: no cause pointing at itself', async () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
    const fatal = new Error('401 bad credentials');
    const call = wrap(
      limiter,
      async () => {
        throw fatal;
      },
      {
        classifyError: (e) => {
          throw e; // "not mine to judge: fail the call with it"
        },
      },
    );
    const error = await call().catch((e: unknown) => e);
    expect(error).toBe(fatal);
    // It was given `cause = itself`: a cycle that a root-cause loop (while (e.cause) e = e.cause)
    // never leaves, written into the SDK's own error object.
    expect(fatal.cause).toBeUndefined();
  });

  it('rethrows a frozen error as it is, not a TypeError about adding `cause`', async () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
    const frozen = Object.freeze(new Error('frozen SDK error'));
    const call = wrap(
      limiter,
      async () => {
        throw frozen;
      },
      {
        classifyError: (e) => {
          throw e;
        },
      },
    );
    await expect(call()).rejects.toBe(frozen);
  });

  it('a frozen error a classifyError throws of its own is the one the caller gets', async () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
    const mine = Object.freeze(new TypeError('classifier bug'));
    const call = wrap(
      limiter,
      async () => {
        throw new Error('the call failed');
      },
      {
        classifyError: () => {
          throw mine;
        },
      },
    );
    await expect(call()).rejects.toBe(mine);
  });
});
