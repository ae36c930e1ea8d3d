/**
 * The wait after a 429 that says nothing (no `Retry-After`, no quota headers) while the limiter
 * has not learned the server's rate yet: a fresh process, maybe one of a crowd of short-lived
 * ones (serverless functions, CI jobs, cron workers) sharing one quota. None of them lives long
 * enough to learn the quota alone, and all of them meet the empty bucket at about the same time,
 * so each waits a random time drawn over a window (exponential backoff with full jitter, as in the
 * adaptive token bucket of Farkiani, Liu and Crowley): the crowd's retries spread over the time
 * the quota needs to serve them. A 429 that answers a request sent before the wait began (one
 * answered while it runs, when nothing is sent, or a slow answer after it: `sentBefore`, by the
 * permit's grant time) was sent with the first and is not another in a row: the limiter asks for no
 * wait; likewise such a success does not end the row (the bucket that 429 emptied has not been
 * seen to refill).
 *
 * The first window is {@link CROWD_FIRST_WINDOW} for a limiter with no success yet, shorter by
 * the part of {@link CROWD_LEARNED} successes it has had (what got through says the quota is not
 * that scarce), and the wait is drawn from {@link CROWD_MIN_WAIT} to its end. A second such 429 in
 * a row says the crowd did not fit the window: the window grows by a slice of
 * {@link CROWD_SLICE} of the first window, and the wait ends in that slice, after the first
 * window's end (drawing over the whole window again, or a doubled one, sends the retry back
 * among the crowd's first retries, or past what the crowd needs). The third and fourth in a row
 * add slices of {@link CROWD_LATER_SLICE} of the first slice: those left after it are the excess
 * of the excess, fewer at each slice, and slices that grew would send the last of them far past
 * the time the bucket needs to serve them (a crowd's completion is its last process's). From the
 * fifth in a row (a crowd several times the window) each slice is {@link CROWD_SLICE_GROWTH}
 * times the last, so a crowd of any size spreads out. No wait is more than the cap (the lower of
 * `maxWait`, so the wait alone never makes a retry refused, and `maxPause`, so no draw is cut to
 * the same end as the others) nor {@link CROWD_MAX_WINDOW}. Once the limiter has had
 * {@link CROWD_LEARNED} successes it has learned a rate: its cut and pacing recover from a 429
 * without this wait.
 *
 * A limiter served after such a wait has seen the bucket refill, and a bare 429 soon after that
 * says it has just emptied the bucket itself (a process sending one request at a time, taking what
 * refilled while it waited): its next window ends where its last one (with its slices) ended, or
 * after {@link CROWD_AGAIN_WINDOW} of the first window its successes give if that is later (never
 * later than that first window), and the wait is drawn from {@link CROWD_AGAIN_FROM} of it on
 * (a retry sooner meets the bucket it emptied). A fresh first window from now sent the process
 * with the most work left to the end of a crowd's run. A limiter whose only success came after
 * such a wait has not emptied the bucket itself: it took the one request's worth that had
 * refilled, as each of the crowd still waiting does (a process that started late, met the empty
 * bucket with its first request, and was served after the crowd's window). It stays in that
 * window: the next ends where its last one did, or a slice from now if that is later, the wait is
 * drawn from {@link CROWD_AGAIN_FROM} of it on, and its slices go on as they were. A later window
 * sent it 19-32 s past the rest of the crowd, which set the crowd's completion.
 *
 * "Soon" is within that fresh first window of the end of its last wait. Such a process empties
 * what refilled within a few round trips of its retry (in the simulator's crowds, 0.1-3 s after
 * its wait, against a window of 42-54 s); a first window is the time a crowd wait gives the quota
 * to serve a crowd, so a 429 later than that comes from a bucket that has refilled since at the
 * quota's pace, and what the last window said about it is stale: the wait is a fresh draw, as for
 * a first 429 (a quiet process that met one bare 429 an hour ago does not wait 0.33-0.55 of a
 * window on its next). The successes since the wait do not tell the two apart (a process that
 * emptied the bucket had as many as it held, which may be few; a quiet one a few over an hour):
 * the time does. Times are ms.
 */
export class CrowdWait {
  /** Successes of the limiter so far. */
  #successes: number;
  /** Such 429s since the last success. */
  #inARow = 0;

  /** Where the last window ends (clock ms; 0: none yet), grown while 429s come in a row. */
  #end = 0;
  /** The length of the next slice the window grows by (ms). */
  #slice = 0;
  /** Where the last wait ends (clock ms). */
  #waited = 0;
  /** Where the last wait began (clock ms; -Infinity: none yet). */
  #began = Number.NEGATIVE_INFINITY;

  /** `successes`: the limiter's before its first 429 that said nothing. */
  constructor(successes = 0) {
    this.#successes = successes;
  }

  /**
   * A success: the next 429 starts the windows again, unless `sentBefore` (answered during a
   * wait: its request was sent before the wait began, so it says nothing of whether the bucket
   * has refilled since, and the next 429 is still one more in a row). Either counts toward
   * learning the rate.
   */
  success(sentBefore = false): void {
    this.#successes++;
    if (!sentBefore) this.#inARow = 0;
  }

  /** Whether a request granted at `grantedAt` (clock ms) was sent before the last wait began. */
  sentBefore(grantedAt: number): boolean {
    return grantedAt <= this.#began;
  }

  /** Whether the limiter has learned the server's rate (a 429 then needs no crowd wait). */
  get learned(): boolean {
    return this.#successes >= CROWD_LEARNED;
  }

  /**
   * A 429 that said nothing at `now` (clock ms): the ms to wait (0 once learned), `random` in
   * [0, 1) placing it in the window's newest part, no longer than `cap` ms.
   */
  throttled(random: number, cap: number, now: number): number {
    if (this.learned) return 0;
    const longest = Math.min(CROWD_MAX_WINDOW, cap);
    let from: number;
    let to: number;
    if (this.#inARow++ === 0) {
      let first = Math.min(longest, CROWD_FIRST_WINDOW * (1 - this.#successes / CROWD_LEARNED));
      from = CROWD_MIN_WAIT;
      let slice: number | undefined;
      if (this.#end > 0 && now - this.#waited <= first) {
        if (this.#successes <= 1) {
          // Its only success came after its wait: it took the one request's worth that had
          // refilled, as the crowd still waiting does, one at a time: it stays in the crowd's
          // window (where the last one ends, or a slice from now), its slices going on.
          first = Math.min(first, Math.max(this.#end - now, this.#slice));
          slice = this.#slice;
        } else {
          // Served after its last wait, within a fresh window: it has seen the bucket refill,
          // and has just emptied it.
          first = Math.min(first, Math.max(this.#end - now, first * CROWD_AGAIN_WINDOW));
        }
        from = Math.max(from, first * CROWD_AGAIN_FROM);
      }
      this.#end = now + first;
      this.#slice = slice ?? first * CROWD_SLICE;
      to = first;
    } else {
      // After the window's end, within the slice it grows by (a slice from now if the window
      // has ended already).
      const start = this.#end;
      this.#end += this.#slice;
      from = Math.max(CROWD_MIN_WAIT, start - now);
      to = Math.max(this.#end - now, this.#slice);
      const inARow = this.#inARow;
      if (inARow === 2) this.#slice *= CROWD_LATER_SLICE;
      else if (inARow > CROWD_SHORT_SLICES + 1) this.#slice *= CROWD_SLICE_GROWTH;
    }
    to = Math.min(to, longest);
    const wait = to <= from ? Math.max(to, 0) : from + random * (to - from);
    this.#waited = now + wait;
    if (wait > 0) this.#began = now;
    return wait;
  }
}

/** Successes after which a limiter has learned the server's rate. */
export const CROWD_LEARNED = 30;
/** The window of the first crowd wait of a limiter with no success (ms). */
const CROWD_FIRST_WINDOW = 60_000;
/** The part of the first window its first growth is. */
const CROWD_SLICE = 0.2;
/** The part of the first slice the next (short) slices are. */
const CROWD_LATER_SLICE = 0.5;
/** The short slices after the first, before the slices grow. */
const CROWD_SHORT_SLICES = 2;
/** How much longer each slice after the short ones is than the last. */
const CROWD_SLICE_GROWTH = 1.3;
/** A later row's window, at least: the part of the first window. */
const CROWD_AGAIN_WINDOW = 0.55;
/** Where in a later row's window its wait begins: the part of it. */
const CROWD_AGAIN_FROM = 0.6;
/** The longest wait (ms). */
const CROWD_MAX_WINDOW = 60_000;
/** The shortest crowd wait (ms), unless the cap is shorter. */
const CROWD_MIN_WAIT = 1_000;
