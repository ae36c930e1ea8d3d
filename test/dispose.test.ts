import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';

// `using` and `await using` close what they hold at the end of their block, as close() does.

const closedRefusal = { reason: 'closed' };

describe('explicit resource management: using and await using', () => {
  it('closes a limiter at the end of a using block: a later acquire is refused as closed', async () => {
    let kept: AdaptiveRateLimiter | undefined;
    {
      using limiter = new AdaptiveRateLimiter({ clock: new ManualClock(), initialUnitsPerMinute: 60 });
      kept = limiter;
    }
    const refused = kept.acquire().catch((e: unknown) => e);
    expect(await refused).toBeInstanceOf(RateLimitRejectedError);
    expect(await refused).toMatchObject(closedRefusal);
  });

  it('closes a registry and the limiters it made', async () => {
    let kept: RateLimiterRegistry | undefined;
    {
      using registry = new RateLimiterRegistry({ clock: new ManualClock() });
      kept = registry;
    }
    expect(() => kept.add('late', {})).toThrow();
    const refused = await kept
      .limiterFor('https://a.test')
      ?.acquire()
      .catch((e: unknown) => e);
    expect(refused).toMatchObject(closedRefusal);
  });

  it('closes the registry of a fetch wrapper and of an interceptor', async () => {
    let wrapper: ReturnType<typeof rateLimitedFetch> | undefined;
    let interceptor: ReturnType<typeof adaptiveRateLimit> | undefined;
    {
      using f = rateLimitedFetch({ clock: new ManualClock() });
      using rl = adaptiveRateLimit({ clock: new ManualClock() });
      wrapper = f;
      interceptor = rl;
    }
    // Refused before anything is sent: nothing listens there.
    const refused = await wrapper('http://127.0.0.1:9/').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RateLimitRejectedError);
    expect(refused).toMatchObject(closedRefusal);
    expect(() => wrapper.registry.add('late', {})).toThrow();
    expect(() => interceptor.registry.add('late', {})).toThrow();
  });

  it('closes a shared budget at the end of an await using block, as its close() does', async () => {
    const clock = new ManualClock();
    let kept: ReturnType<typeof createSharedBudget> | undefined;
    {
      await using budget = createSharedBudget({
        name: 'api',
        store: new MemoryBudgetStore({ clock }),
        clock,
      });
      kept = budget;
    }
    const refused = await kept.acquire().catch((e: unknown) => e);
    expect(refused).toMatchObject(closedRefusal);
  });
});
