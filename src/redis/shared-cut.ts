import type { SharedCut } from './share-controller.js';

/**
 * The last cut of the whole rate made by another member, as a member's controller counts from it
 * (see share-controller.ts): when this member learned of it, the whole rate before it, and the ms
 * the local limiter was paused since (CUBIC does not count time paused). Times are ms on the
 * local limiter's clock.
 */
export class LastSharedCut {
  readonly #now: () => number;
  #cut: { at: number; rateBefore: number } | undefined;
  /** The local limiter's pauses, as CUBIC counts them: ms banked since the shared cut, and the last. */
  #pausedBanked = 0;
  #pauseFrom = Number.NEGATIVE_INFINITY;
  #pauseUntil = Number.NEGATIVE_INFINITY;

  constructor(now: () => number) {
    this.#now = now;
  }

  /** The local limiter paused from `from` until `until` (its `paused` event). */
  paused(from: number, until: number): void {
    if (from >= this.#pauseUntil) {
      this.#pausedBanked += this.#pausedSinceCut(this.#pauseFrom, this.#pauseUntil);
      this.#pauseFrom = from;
    }
    this.#pauseUntil = until;
  }

  /** Another member cut the whole rate, from `rateBefore` (units/min): counted from now. */
  learned(rateBefore: number): void {
    this.#cut = { at: this.#now(), rateBefore };
    this.#pausedBanked = 0;
  }

  /** This member's own cut is the last one (or the rate is not known): none to count from. */
  clear(): void {
    this.#cut = undefined;
  }

  /** The cut as the member's controller sees it; `undefined`: none. */
  seen(): SharedCut | undefined {
    const cut = this.#cut;
    if (cut === undefined) return undefined;
    return {
      since: this.#now() - cut.at,
      paused: this.#pausedBanked + this.#pausedSinceCut(this.#pauseFrom, this.#pauseUntil),
      rateBefore: cut.rateBefore,
    };
  }

  /** ms of the pause [from, until) after the shared cut, up to now. */
  #pausedSinceCut(from: number, until: number): number {
    const cutAt = this.#cut?.at ?? Number.POSITIVE_INFINITY;
    return Math.max(0, Math.min(until, this.#now()) - Math.max(from, cutAt));
  }
}
