import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';
import { wrap } from '../src/wrap/wrap.js';

// classifyThrown is the default classifier of every wrapped call. A header record whose values
// are not strings (a hand-built or deserialized error's) once made it throw a TypeError, and the
// wrapped call rejected with that TypeError in place of the SDK's own 429.

const error429 = (headers: unknown) => Object.assign(new Error('429'), { status: 429, headers });

describe('classifyThrown: header values that are not strings', () => {
  it('reads a number as its text: retry-after 5 is a wait of 5 s', () => {
    expect(classifyThrown(error429({ 'retry-after': 5 }))).toEqual({
      kind: 'throttled',
      retryAfterMs: 5_000,
    });
    expect(classifyThrown(error429({ 'Retry-After': 2 }))).toEqual({
      kind: 'throttled',
      retryAfterMs: 2_000,
    });
    expect(classifyThrown(error429({ 'retry-after-ms': [250] }))).toEqual({
      kind: 'throttled',
      retryAfterMs: 250,
    });
  });

  it.each<[string, unknown]>([
    ['null', null],
    ['an object', { seconds: 5 }],
    ['true', true],
  ])('ignores a value that is %s (no wait)', (_, value) => {
    expect(classifyThrown(error429({ 'retry-after': value }))).toEqual({ kind: 'throttled' });
  });

  it('an error it cannot read (a getter that throws) gives its kind without a wait', () => {
    const error = Object.assign(new Error('429'), { status: 429 });
    Object.defineProperty(error, 'headers', {
      get() {
        throw new Error('gone');
      },
    });
    expect(classifyThrown(error)).toEqual({ kind: 'throttled' });
  });

  it("a wrapped call rejects with the SDK's own error, not a TypeError of the classifier", async () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() });
    const sdkError = error429({ 'retry-after': null });
    const call = wrap(
      limiter,
      async () => {
        throw sdkError;
      },
      { maxAttempts: 1 },
    );
    await expect(call()).rejects.toBe(sdkError);
    expect(limiter.snapshot().throttles).toBe(1);
    limiter.close();
  });
});
