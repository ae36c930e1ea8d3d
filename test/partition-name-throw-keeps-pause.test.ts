import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { kHoldOrigin, kKeepPause, kPartitionForOrigin } from '../src/internal.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { OVERFLOW, RateLimiterRegistry } from '../src/registry/index.js';

// Regression (a review): `partitionName` is asked only when a partition's limiter is made, which
// is after the registry took the pause kept for the partition (its server's 429 answered through
// the overflow limiter). A `partitionName` that threw there (returned '' or a number for that
// request) failed the request and lost the pause: the partition's next request got a limiter of
// its own that was not paused, and went out at once where its server had asked it to wait.

const registries: RateLimiterRegistry[] = [];
afterEach(() => {
  for (const registry of registries.splice(0)) registry.close();
});

describe('a partitionName that throws as a paused partition leaves the overflow limiter', () => {
  it('keeps the pause for its next request', () => {
    const clock = new ManualClock();
    const registry = new RateLimiterRegistry({ clock, maxOriginLimiters: 1 });
    registries.push(registry);
    const origin = 'https://api.test';
    const own = registry.limiterFor(origin) as AdaptiveRateLimiter;
    registry[kPartitionForOrigin](origin, { id: 'first' }); // meters through the origin's limiter
    // The origin's limiter busy: no room for another, partition B goes to (overflow).
    registry[kHoldOrigin](origin, own);
    const onOverflow = registry[kPartitionForOrigin](origin, { id: 'idB', name: () => 'customer-b' });
    expect(onOverflow?.limiter).toBe(registry.get(OVERFLOW));
    // B's server answers 429 Retry-After: 30 through (overflow): kept for B's own next limiter.
    registry[kKeepPause](onOverflow?.key as string, 30_000);

    const bad = () => {
      throw new TypeError('partitionName: no name for this request');
    };
    expect(() => registry[kPartitionForOrigin](origin, { id: 'idB', name: bad })).toThrow(TypeError);

    const next = registry[kPartitionForOrigin](origin, { id: 'idB', name: () => 'customer-b' });
    expect(next?.limiter).not.toBe(registry.get(OVERFLOW));
    expect(next?.limiter?.snapshot().pausedUntil).toBe(30_000);
  });
});
