import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';
import { type WrapOptions, wrap } from '../src/wrap/wrap.js';

// wrap's `headers` option read a thrown error's headers a second time after `classifyError` (the
// default `classifyThrown`, or a caller's own falling back to it) had read them: an SDK's lazy
// `headers` getter ran twice, and a get-only holder was listed twice, for one error.

/** An openai-like 429 whose `headers` getter, and its holder's listing, count their reads. */
function countingError() {
  const counts = { reads: 0, listings: 0 };
  const fields = new Map([
    ['Retry-After', '2'],
    ['X-RateLimit-Limit-Requests', '60'],
    ['X-RateLimit-Remaining-Requests', '0'],
    ['X-RateLimit-Reset-Requests', '1s'],
  ]);
  // An SDK's own class: a case-sensitive get, listed by entries().
  const headers = {
    get: (name: string) => fields.get(name) ?? null,
    entries() {
      counts.listings++;
      return fields.entries();
    },
  };
  const error = Object.assign(new Error('429 Too Many Requests'), { status: 429 });
  Object.defineProperty(error, 'headers', {
    get() {
      counts.reads++;
      return headers;
    },
  });
  return { error, counts };
}

async function throwOnce(options: WrapOptions<unknown, []>) {
  const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
  const { error, counts } = countingError();
  const call = wrap(
    limiter,
    async () => {
      throw error;
    },
    { ...options, maxAttempts: 1 },
  );
  await expect(call()).rejects.toBe(error);
  return { counts };
}

describe("wrap's headers read a thrown error's headers once", () => {
  it('with the default classifyThrown: one read of `headers`, one listing', async () => {
    const { counts } = await throwOnce({ headers: 'openai' });
    expect(counts).toEqual({ reads: 1, listings: 1 });
  });

  it("with a classifyError of the caller's own that falls back to classifyThrown", async () => {
    const seen: unknown[] = [];
    const { counts } = await throwOnce({
      headers: 'openai',
      classifyError: (error) => {
        const outcome = classifyThrown(error);
        seen.push(outcome);
        return outcome;
      },
    });
    expect(seen).toEqual([{ kind: 'throttled', retryAfterMs: 2_000 }]);
    expect(counts).toEqual({ reads: 1, listings: 1 });
  });

  it("with a classifyError of the caller's own that reads no headers: read once, for the quota", async () => {
    const { counts } = await throwOnce({ headers: 'openai', classifyError: () => ({ kind: 'throttled' }) });
    expect(counts).toEqual({ reads: 1, listings: 1 });
  });

  it('reads the same error anew on its next throw (a getter may answer otherwise)', async () => {
    const { error, counts } = countingError();
    for (let i = 0; i < 2; i++) {
      // A limiter each: the first 429's pause holds no second call.
      const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
      const call = wrap(
        limiter,
        async () => {
          throw error;
        },
        { headers: 'openai', maxAttempts: 1 },
      );
      await expect(call()).rejects.toBe(error);
    }
    expect(counts).toEqual({ reads: 2, listings: 2 });
  });
});
