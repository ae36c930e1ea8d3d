import { type Clock, MAX_TIMER_MS } from '../clock.js';

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
 * Until `waiting` settles, one timer at a time of the caller's request: one that finds the
 * limiter's timer overdue (armed by a request that ended, its timers with it) does its work, and
 * the limiter arms it again from here. So a waiter is served at its turn, and its request always
 * has a timer to wait on.
 *
 * Each timer is set for `turn(now)`, the soonest the limiter sees this waiter's turn coming as if
 * one waiter ahead of it had left (an abort's, in a request that then ends), but not before the
 * limiter's next wake (a waiter behind the head goes no sooner than that wake, and one served
 * sooner is served by whoever woke the limiter), nor after `deadline`, when the limiter refuses
 * it. The head and the waiter behind it so wake with the limiter, and the others once, at the
 * turn of the one ahead, and again when theirs is next: a few timers a waiter to drain a line,
 * where one at each of the limiter's wakes for every waiter cost N²/2 for a line of N. `turn`
 * answers `undefined` once the waiter has left. With no wake armed (none while a waiter has a
 * finite deadline) the timer is a keep-alive at `deadline`, or the longest a timer may wait.
 *
 * Chosen over a timer of each waiter at each wake: a turn that comes sooner than predicted (the
 * rate rose since, or more than one waiter ahead left) is served by the limiter's timer, or, if
 * the request that armed it has ended, no later than the turn predicted.
 */
export function wakeOwn(
  clock: Clock,
  waiting: Promise<unknown>,
  limiter: OneTimer,
  deadline: number,
  turn: (now: number) => number | undefined,
): void {
  let settled = false;
  const done = (): void => {
    settled = true;
  };
  waiting.then(done, done);
  const next = (): void => {
    if (settled || limiter.closed) return;
    const now = clock.now();
    const soonest = turn(now);
    if (soonest === undefined) return;
    let at = Math.min(Math.max(limiter.timerAt, soonest), deadline);
    // Past its deadline (the limiter refuses it at its next wake): that wake.
    if (!(at > now)) at = limiter.timerAt;
    const delay =
      at === Number.POSITIVE_INFINITY ? MAX_TIMER_MS : Math.min(MAX_TIMER_MS, Math.max(0, at - now));
    clock.setTimeout(wake, delay, true);
  };
  const wake = (): void => {
    if (settled || limiter.closed) return;
    if (limiter.timerAt <= clock.now()) limiter.fire();
    next();
  };
  next();
}
