/**
 * The Retry-After pause of a limiter and the bookkeeping the controllers need: how much of the
 * time since the last cut was paused (CUBIC's t leaves it out), and when the last pause ended
 * (the increase clock counts from there). Times are ms on the limiter's clock.
 */
export class Pause {
  /** End of the current or last pause; `-Infinity` before any. */
  until = Number.NEGATIVE_INFINITY;
  /** A pause ended or will end, and nobody has been told (the `resumed` event). */
  resumePending = false;
  #start = Number.NEGATIVE_INFINITY;
  /** ms of the earlier pauses since the last cut. */
  #before = 0;
  /**
   * The pauses before the current one, [start, end] pairs, newest first, at most
   * {@link PAUSES_KEPT}: made at the second pause (one pause costs an idle limiter nothing).
   */
  #earlier: number[] | undefined;

  active(now: number): boolean {
    return now < this.until;
  }

  /** ms left of the pause at `now` (0 when not paused). */
  left(now: number): number {
    return Math.max(0, this.until - now);
  }

  /** Pauses until `until`; a pause that ends sooner than the current one changes nothing. */
  extend(now: number, until: number, lastCutAt: number): boolean {
    if (until <= this.until) return false;
    if (this.until <= now) {
      // A new pause: bank the previous one's overlap with the time since the last cut.
      this.#before += Math.max(0, this.until - Math.max(this.#start, lastCutAt));
      if (this.#start !== Number.NEGATIVE_INFINITY) this.#keep(this.#start, this.until);
      this.#start = now;
    }
    this.until = until;
    this.resumePending = true;
    return true;
  }

  /** A cut happened: pauses before it no longer count. */
  cut(): void {
    this.#before = 0;
  }

  /** ms paused between `lastCutAt` and `now`. */
  sinceCut(now: number, lastCutAt: number): number {
    return this.#before + Math.max(0, Math.min(now, this.until) - Math.max(this.#start, lastCutAt));
  }

  /**
   * ms paused between `from` and `to`: the current or last pause and (`all`) the {@link PAUSES_KEPT}
   * before it. A 429 that pauses again soon after a pause (a second Retry-After) must not make the
   * accepted-rate window read the first pause as time the server let nothing through.
   */
  within(from: number, to: number, all = true): number {
    let ms = Math.max(0, Math.min(to, this.until) - Math.max(from, this.#start));
    const earlier = this.#earlier;
    if (earlier === undefined || !all) return ms;
    for (let i = 0; i < earlier.length; i += 2) {
      ms += Math.max(0, Math.min(to, earlier[i + 1]!) - Math.max(from, earlier[i]!));
    }
    return ms;
  }

  /** Keeps the ended pause [start, end] for {@link within}. */
  #keep(start: number, end: number): void {
    this.#earlier ??= [];
    const earlier = this.#earlier;
    earlier.unshift(start, end);
    if (earlier.length > 2 * PAUSES_KEPT) earlier.length = 2 * PAUSES_KEPT;
  }

  /** The start of the increase clock: `lastIncreaseAt`, or the end of a later pause (now while paused). */
  increaseClockFrom(now: number, lastIncreaseAt: number): number {
    return Math.max(lastIncreaseAt, Math.min(this.until, now));
  }
}

/** Ended pauses {@link Pause.within} counts besides the current one: the 3 s accepted-rate window holds a few 1 s pauses at most. */
const PAUSES_KEPT = 3;
