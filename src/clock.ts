/**
 * Time, injected. Every limiter reads `now()` from a {@link Clock} and arms at most one timer
 * through it, so tests step time by hand ({@link ManualClock}) and the simulator runs on virtual
 * time. Times are milliseconds on a monotonic clock, never wall-clock dates.
 */
export interface Clock {
  /** Milliseconds on a monotonic clock (the origin is arbitrary). */
  now(): number;
  /**
   * Runs `fn` once after `ms` milliseconds; returns a handle for {@link Clock.clearTimeout}.
   * `keepAlive` asks a real clock to keep the process running until then (a request waits on
   * it); otherwise the timer must not keep it alive. Clocks without processes ignore it.
   */
  setTimeout(fn: () => void, ms: number, keepAlive?: boolean): unknown;
  clearTimeout(handle: unknown): void;
}

/** Node's timers overflow (and fire at once) past this many milliseconds. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The real clock: `performance.now()` and the global timers. A timer keeps the process alive only
 * when asked (`keepAlive`: a request is waiting on it, and must not be dropped by an exit); an
 * idle limiter's timer (the end of a pause nobody waits for) never does.
 */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout(fn, ms, keepAlive = false) {
    const handle = setTimeout(fn, Math.min(Math.max(0, ms), MAX_TIMER_MS));
    // A number where timers are not Node's (a Worker before its Node timers, a browser): nothing
    // to unref, and no process to keep alive.
    if (!keepAlive) (handle as { unref?: () => void }).unref?.();
    return handle;
  },
  clearTimeout(handle) {
    clearTimeout(handle as ReturnType<typeof setTimeout>);
  },
};

interface ManualTimer {
  readonly at: number;
  readonly seq: number;
  readonly fn: () => void;
  /** Its place in the clock's list; -1 once run or cleared. */
  index: number;
}

/**
 * A clock that moves only when told to. `advance(ms)` runs every timer that falls due, in order
 * of due time (then of creation), with `now()` set to each timer's due time while it runs.
 * Meant for tests, the library's and yours.
 */
export class ManualClock implements Clock {
  #now: number;
  #seq = 0;
  #timers: ManualTimer[] = [];

  constructor(start = 0) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const timer: ManualTimer = { at: this.#now + Math.max(0, ms), seq: this.#seq++, fn, index: 0 };
    timer.index = this.#timers.push(timer) - 1;
    return timer;
  }

  clearTimeout(handle: unknown): void {
    const timer = handle as ManualTimer | undefined;
    if (timer !== undefined && this.#timers[timer.index] === timer) this.#remove(timer);
  }

  /** Takes `timer` out of the list in O(1): the last timer takes its place (order is by due time anyway). */
  #remove(timer: ManualTimer): void {
    const last = this.#timers.pop()!;
    if (last !== timer) {
      last.index = timer.index;
      this.#timers[timer.index] = last;
    }
    timer.index = -1;
  }

  /** Timers armed and not yet run. */
  get pendingTimers(): number {
    return this.#timers.length;
  }

  /** Moves time forward by `ms`, running the timers that fall due on the way. */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError(`ManualClock.advance: ms must be >= 0, received ${ms}`);
    this.advanceTo(this.#now + ms);
  }

  /** Moves time forward to `time`, running the timers that fall due on the way. */
  advanceTo(time: number): void {
    for (;;) {
      const next = this.#nextDue(time);
      if (next === undefined) break;
      this.#remove(next);
      this.#now = next.at;
      next.fn();
    }
    if (time > this.#now) this.#now = time;
  }

  /** Runs timers until none is left, or `limit` of them have run; returns how many ran. */
  runAll(limit = 100_000): number {
    let ran = 0;
    while (ran < limit) {
      const next = this.#nextDue(Number.POSITIVE_INFINITY);
      if (next === undefined) break;
      this.advanceTo(next.at);
      ran++;
    }
    return ran;
  }

  #nextDue(limit: number): ManualTimer | undefined {
    let best: ManualTimer | undefined;
    for (const t of this.#timers) {
      if (t.at <= limit && (best === undefined || t.at < best.at || (t.at === best.at && t.seq < best.seq))) {
        best = t;
      }
    }
    return best;
  }
}
