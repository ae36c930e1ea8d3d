import { describe, expect, it } from 'vitest';
import { runAttempts } from '../src/attempt-loop.js';
import { ManualClock } from '../src/clock.js';
import { InvalidArgumentError, InvalidCallbackValueError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { AnnouncedQuota } from '../src/limiter/types.js';
import { wrap } from '../src/wrap/wrap.js';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

// A classify whose quota list has a hole (`quota: [quotaOf(result)]` with a helper that found no
// headers) once failed the call with a TypeError after its permit was marked settled: the cold
// start's slot was never freed, and after 10 such calls every call of the limiter was refused.

describe('wrap: a classify whose quota list holds a hole', () => {
  it.each<[string, unknown]>([
    ['undefined', undefined],
    ['null', null],
  ])(
    'quota [%s]: the call fails with InvalidCallbackValueError, and the limiter stays usable',
    async (_, hole) => {
      const clock = new ManualClock();
      const limiter = new AdaptiveRateLimiter({ clock }); // cold start: 10 in flight at most
      const call = wrap(limiter, async () => 'answer', {
        classify: () => ({ kind: 'success', quota: [hole as AnnouncedQuota] }),
      });
      const first = await call().catch((e: unknown) => e);
      expect(first).toBeInstanceOf(InvalidCallbackValueError);
      expect((first as InvalidCallbackValueError).callback).toBe('classify');
      expect((first as Error).message).toMatch(
        /quota an array of \{ policy, remaining, resetMs, limit, windowMs \}/,
      );
      for (let i = 0; i < 9; i++) await call().catch(() => undefined);
      // Another caller of the same limiter, with nothing wrong in it.
      const plain = wrap(limiter, async () => 'plain');
      let later: unknown = 'pending';
      plain().then(
        (v) => (later = v),
        (e: unknown) => (later = e),
      );
      for (let i = 0; i < 20 && later === 'pending'; i++) {
        await flush();
        clock.advance(10_000);
      }
      expect(later).toBe('plain');
    },
  );
});

describe('runAttempts: an outcome its permit refuses', () => {
  it('fails the request with the permit’s error and answers the permit (its cold start slot freed)', async () => {
    const limiter = new AdaptiveRateLimiter({ clock: new ManualClock() }); // 10 in flight at most
    for (let i = 0; i < 10; i++) {
      const run = runAttempts({
        limiter,
        units: 1,
        maxAttempts: 1,
        send: async () => 'answer',
        classify: () => ({ kind: 'success', quota: [null as unknown as AnnouncedQuota] }),
      });
      await expect(run).rejects.toThrow(InvalidArgumentError);
      await expect(run).rejects.toThrow(
        'success(): quota[0]: must be an announced quota { policy, remaining, resetMs, limit, windowMs }: null is not an object (received null)',
      );
    }
    expect(limiter.tryAcquire()).toBeDefined();
  });
});
