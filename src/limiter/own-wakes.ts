import type { Clock } from '../clock.js';

/**
 * Whether this runs in a Cloudflare Worker (workerd). There a timer belongs to the request that
 * armed it and ends with it, and a request that waits with no timer of its own is cancelled as
 * hung. A limiter kept across requests (in module scope) arms its one timer from whichever
 * request came last, so each of its waiters also wakes it by a timer of its own request's
 * ({@link wakeOwn}).
 */
export const OWN_WAKES =
  (globalThis as { navigator?: { userAgent?: unknown } }).navigator?.userAgent === 'Cloudflare-Workers';

/** What {@link wakeOwn} asks of a limiter with one timer. Times are ms on its clock. */
export interface OneTimer {
  /** When its timer is due (ms); `Infinity` when none is armed. */
  readonly timerAt: number;
  /** Whether it is closed: no wake is armed again. */
  readonly closed: boolean;
  /** Does what its timer would, now, in place of a timer left behind, which then must do nothing. */
  fire(): void;
}

/**
 * Until `waiting` settles, a timer of the caller's request at each of the limiter's timer's
 * times: one that finds that timer overdue (armed by a request that ended, its timers with it)
 * does its work, and the limiter arms it again from here. So a waiter is served at its turn, and
 * its request always has a timer to wait on.
 */
export function wakeOwn(clock: Clock, waiting: Promise<unknown>, limiter: OneTimer): void {
  let settled = false;
  const done = (): void => {
    settled = true;
  };
  waiting.then(done, done);
  const next = (): void => {
    if (!settled && !limiter.closed && limiter.timerAt !== Number.POSITIVE_INFINITY)
      clock.setTimeout(wake, Math.max(0, limiter.timerAt - clock.now()), true);
  };
  const wake = (): void => {
    if (settled || limiter.closed) return;
    if (limiter.timerAt <= clock.now()) limiter.fire();
    next();
  };
  next();
}
