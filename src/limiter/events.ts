import type { RejectionReason } from '../errors.js';

/** The typed events of a limiter; payloads are plain objects, rates in units/min, times in ms. */
export interface LimiterEventMap {
  /** Units granted; `waited` is how long the request waited (0 when granted at once). */
  acquired: [{ limiter: string; units: number; waited: number }];
  /** A request refused without being sent. */
  rejected: [{ limiter: string; units: number; reason: RejectionReason; message: string }];
  /** A throttled response; `cut` says whether it cut the rate. */
  throttled: [{ limiter: string; retryAfterMs: number | undefined; cut: boolean }];
  /** The rate went down (a cut, or a controller's success answer below the rate). */
  decreased: [{ limiter: string; from: number; to: number; cause: 'throttle' | 'success' | 'update' }];
  /** The rate went up. */
  increased: [{ limiter: string; from: number; to: number; cause: 'success' | 'update' }];
  /** Sends paused until `until` (on the limiter's clock) for `ms`, after a Retry-After. */
  paused: [{ limiter: string; until: number; ms: number; requestedMs: number }];
  /** A pause ended. */
  resumed: [{ limiter: string }];
}

export type LimiterEventName = keyof LimiterEventMap;
