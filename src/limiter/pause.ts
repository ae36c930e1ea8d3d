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

  /** ms of the current or last pause between `from` and `to` (earlier pauses are not kept). */
  within(from: number, to: number): number {
    return Math.max(0, Math.min(to, this.until) - Math.max(from, this.#start));
  }

  /** The start of the increase clock: `lastIncreaseAt`, or the end of a later pause (now while paused). */
  increaseClockFrom(now: number, lastIncreaseAt: number): number {
    return Math.max(lastIncreaseAt, Math.min(this.until, now));
  }
}
