import { afterAll, beforeAll, vi } from 'vitest';
import type { Clock } from '../../src/clock.js';
import type { kWaitCancel as WaitCancelKey } from '../../src/internal.js';
import type { AdaptiveRateLimiter as Limiter } from '../../src/limiter/adaptive.js';
import type { FixedWindowRateLimiter as WindowLimiter } from '../../src/limiter/fixed-window.js';
import type { Permit } from '../../src/limiter/types.js';

// The Worker tests' limiters: loaded afresh with `navigator.userAgent` a Cloudflare Worker's (the
// limiter reads where it runs when it loads), in the importing file's `beforeAll`.

/** A line (the adaptive limiter) or a fixed window. */
export type Kind = 'line' | 'window';

export interface WorkerLimiters {
  AdaptiveRateLimiter: typeof Limiter;
  FixedWindowRateLimiter: typeof WindowLimiter;
  kWaitCancel: typeof WaitCancelKey;
  /** A limiter of one grant a second, in module scope, whose calls may wait `maxWait` ms. */
  oneASecond(kind: Kind, clock: Clock, maxWait: number): Limiter | WindowLimiter;
}

/**
 * Registers, in the calling test file, a `beforeAll` that loads the limiters as a Worker does
 * and an `afterAll` that puts `navigator` back; returns them (filled in by the `beforeAll`).
 */
export function limitersInWorker(): WorkerLimiters {
  const loaded = {
    oneASecond(kind: Kind, clock: Clock, maxWait: number): Limiter | WindowLimiter {
      return kind === 'line'
        ? new loaded.AdaptiveRateLimiter({ name: 'worker', initialUnitsPerMinute: 60, maxWait, clock })
        : new loaded.FixedWindowRateLimiter({
            name: 'worker',
            limitForPeriod: 1,
            limitRefreshPeriod: 1000,
            timeoutDuration: maxWait,
            clock,
          });
    },
  } as WorkerLimiters;
  beforeAll(async () => {
    vi.stubGlobal('navigator', { userAgent: 'Cloudflare-Workers' });
    vi.resetModules();
    ({ AdaptiveRateLimiter: loaded.AdaptiveRateLimiter } = await import('../../src/limiter/adaptive.js'));
    ({ FixedWindowRateLimiter: loaded.FixedWindowRateLimiter } = await import(
      '../../src/limiter/fixed-window.js'
    ));
    ({ kWaitCancel: loaded.kWaitCancel } = await import('../../src/internal.js'));
  });
  afterAll(() => {
    vi.unstubAllGlobals();
  });
  return loaded;
}

/** A clock whose timers belong to the request running when they were armed. */
interface RequestTimers {
  /** Runs `fn` as request `request` would. */
  in<T>(request: string, fn: () => T): T;
  /** Request `request` ended: its timers end with it. */
  end(request: string): void;
}

/**
 * `n` calls to `limiter`, each from a request of its own (`r0`, `r1`, ...) that answers as soon
 * as its call is served (a success, from the request) and ends: `served` counts them.
 */
export function callsEndingWhenServed(
  clock: RequestTimers,
  limiter: { acquire(): Promise<Permit> },
  n: number,
): { readonly served: number } {
  let served = 0;
  for (let i = 0; i < n; i++) {
    const request = `r${i}`;
    clock
      .in(request, () => limiter.acquire())
      .then((permit) => {
        clock.in(request, () => permit.success());
        clock.end(request);
        served++;
      });
  }
  return {
    get served() {
      return served;
    },
  };
}
