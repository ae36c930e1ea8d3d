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
 * Tells a waiter woken by {@link wakeOwn} that it is the head or the one behind it, or that the
 * limiter's timer moved.
 */
export type Nudge = () => void;

/** The delay (ms) of a timer for `at`, `now` being the clock's time. */
function delayTo(at: number, now: number): number {
  return at === Number.POSITIVE_INFINITY ? MAX_TIMER_MS : Math.min(MAX_TIMER_MS, Math.max(0, at - now));
}

/**
 * Until `waiting` settles, timers of the caller's request: one that finds the limiter's timer
 * overdue (armed by a request that ended, its timers with it) does its work, and the limiter arms
 * it again from here. So a waiter is served at its turn, and its request always has a timer to
 * wait on.
 *
 * The head of the line and the waiter behind it (`isHead()`: the next two to be served) each
 * keep a timer at the limiter's, set again after each wake while they are, as every waiter once
 * did (N timers a wake, about N²/2 to drain a line of N). A waiter behind them keeps one timer at
 * `turn(now)`, the turn of the waiter ahead of it as the limiter predicts it, but not before the
 * limiter's timer nor after `deadline` (when the limiter refuses it), set again when it fires;
 * `turn` answers `undefined` once it has left. With no wake armed it is a keep-alive at
 * `deadline`, or the longest a timer may wait. Chosen over a keep-alive at `deadline`: a head
 * whose request ended while it waited (it answered without its call, which stays in the line)
 * takes its timers with it, and the waiters behind it waited to their deadline. The one behind
 * the head keeps the limiter's time too because a prediction is of the rate when it was made:
 * behind such a head, a waiter woke as the rate predicted it at its last wake, not as it rose
 * since, and the line served every waiter late (up to 8.5 s in random lines, with one such head
 * each). The limiter calls the {@link Nudge} this returns when that waiter becomes the head or
 * the one behind it, and when it sets its timer for another time while it is (the rate rose): it
 * resolves a promise made in the waiter's request, whose continuation workerd runs in that
 * request (V8's promise context tags), which sets its timer there, at the limiter's. So a line
 * drains at the rate as it rises, with about 4 timers a waiter (its predicted turn's is not set
 * again once it is one of the two).
 */
export function wakeOwn(
  clock: Clock,
  waiting: Promise<unknown>,
  limiter: OneTimer,
  deadline: number,
  isHead: () => boolean,
  turn: (now: number) => number | undefined,
): Nudge {
  let settled = false;
  let keepAlive: unknown;
  let headTimer: unknown;
  /** Resolves the promise the next nudge ends; `undefined` once settled. */
  let nudged: (() => void) | undefined;
  const done = (): void => {
    settled = true;
    nudged = undefined;
    if (keepAlive !== undefined) clock.clearTimeout(keepAlive);
    if (headTimer !== undefined) clock.clearTimeout(headTimer);
    keepAlive = headTimer = undefined;
  };
  waiting.then(done, done);
  /** Does the limiter's timer's work when it is overdue; whether the waiter still waits. */
  const wake = (): boolean => {
    if (settled || limiter.closed) return false;
    if (limiter.timerAt <= clock.now()) limiter.fire();
    return !settled && !limiter.closed;
  };
  /** When `headTimer` is due (ms). */
  let headAt = Number.NaN;
  const armHead = (): void => {
    const near = !settled && !limiter.closed && isHead();
    const at = limiter.timerAt;
    // Already due then (it moved up from behind the head): kept.
    if (near && headTimer !== undefined && headAt === at) return;
    if (headTimer !== undefined) clock.clearTimeout(headTimer);
    headTimer = undefined;
    if (!near) return;
    headAt = at;
    // No wake armed (only an answer lets it go): its keep-alive holds its request.
    if (at !== Number.POSITIVE_INFINITY) headTimer = clock.setTimeout(onHead, delayTo(at, clock.now()), true);
    else if (keepAlive === undefined) armKeepAlive();
  };
  const onHead = (): void => {
    headTimer = undefined;
    if (wake()) armHead();
  };
  const armKeepAlive = (): void => {
    const now = clock.now();
    const soonest = turn(now);
    if (soonest === undefined) return;
    let at = Math.min(Math.max(limiter.timerAt, soonest), deadline);
    // Past its deadline (the limiter refuses it at its next wake): that wake.
    if (!(at > now)) at = limiter.timerAt;
    keepAlive = clock.setTimeout(onKeepAlive, delayTo(at, now), true);
  };
  const onKeepAlive = (): void => {
    keepAlive = undefined;
    // Near the head, its timer at the limiter's holds its request and wakes it in time.
    if (wake() && headTimer === undefined) armKeepAlive();
  };
  const listen = (): void => {
    new Promise<void>((resolve) => (nudged = resolve)).then(onNudge);
  };
  const onNudge = (): void => {
    if (settled) return;
    listen();
    armHead();
  };
  armKeepAlive();
  listen();
  armHead();
  return () => nudged?.();
}

/**
 * Which waiters a limiter last nudged as its head and the one behind it (see {@link wakeOwn}), and
 * for which time of its timer: after each arming of its timer, {@link tell} nudges each when it is
 * another, or when the timer moved.
 */
export class HeadNudges {
  #head: object | undefined;
  #second: object | undefined;
  #at = Number.NaN;

  /**
   * `head` (its `nudge`, if it has one) is the head and `second` (`nudgeSecond`) the one behind
   * it, the limiter's timer due at `timerAt`.
   */
  tell(
    head: object | undefined,
    nudge: Nudge | undefined,
    timerAt: number,
    second: object | undefined,
    nudgeSecond: Nudge | undefined,
  ): void {
    const moved = timerAt !== this.#at;
    this.#at = timerAt;
    if (moved || head !== this.#head) {
      this.#head = nudge === undefined ? undefined : head;
      nudge?.();
    }
    if (moved || second !== this.#second) {
      this.#second = nudgeSecond === undefined ? undefined : second;
      nudgeSecond?.();
    }
  }
}
