/** ms the limiter was paused from a time (ms) until now. */
export type PausedIn = (from: number) => number;
const NO_PAUSE: PausedIn = () => 0;

/** Width of one slot of the accepted-rate window (ms). */
const SLOT_MS = 250;
/** Slots in the window: 12 of 250 ms, a window of 3 s (2.75 s to 3 s, with the open slot). */
const SLOTS = 12;
/** Slots of {@link AcceptedRate.recent}: the last second. */
const RECENT_SLOTS = 4;
/**
 * In the first second after the first grant the accepted rate reads at least this span (ms): one
 * early answer does not make a rate of thousands. After it, at least one slot (a window that a
 * Retry-After pause took most of is read over what is left of it).
 */
const MIN_SPAN_MS = 1_000;
/**
 * In the first second, this many answers are a rate of their own: the window reads them over the
 * time since the first grant (at least {@link ENOUGH_SPAN_MS}), not over a second. At thousands
 * a second the first throttle comes within a few ms of the first grant, and a floor of a second
 * read a small part of what got through (a first cut to a tenth of the quota at 300,000 a
 * minute). The last second's rate (`recent`) keeps its floor of a slot: it is read from the first
 * answer, and answers that come together (a latency after their grants) are no rate.
 */
const ENOUGH_ANSWERS = 16;
/** The shortest span a rate is read over (ms): a timer tick. */
const ENOUGH_SPAN_MS = 4;

/** The slot (its number since time 0) that holds the time `now` (ms). */
const slotAt = (now: number): number => Math.floor(now / SLOT_MS);

/**
 * The accepted rate: units of the responses classified as success (not sent, not throttled) per
 * minute, over the last 3 s (twelve slots of 250 ms), read at `now`. While the server throttles,
 * it is what the server lets through for this process: its share of the quota, the estimate a
 * cut starts from (the idea of BBR's policer detector: under loss, the delivery rate is the
 * policer's rate). Before 3 s have passed since the first grant the span is the time since that
 * grant (at least 1 s). Times are ms on the limiter's clock.
 */
export class AcceptedRate {
  // Made at the first success: an idle limiter (one per origin in a registry) does not pay for them.
  #units: Float64Array | undefined;
  #slotOf: Float64Array | undefined;
  /** The first grant (ms); the window starts no earlier. */
  #since: number | undefined;
  #any = false;
  /** The first success (ms): answers come a latency after their grants. */
  #firstSuccess: number | undefined;
  /** Successes recorded, counted up to {@link ENOUGH_ANSWERS}. */
  #answers = 0;
  /** Units accepted since the last mark (a cut), and when that was (ms). */
  #markUnits = 0;
  #markAt: number | undefined;
  /** Units accepted before the first mark (the first cut): `undefined` until it. */
  #beforeFirstMark: number | undefined;

  /** Marks the first grant at `now`: the window does not count the idle time before it. */
  open(now: number): void {
    this.#since ??= now;
  }

  /** Counts the units of one successful response received at `now`. */
  record(units: number, now: number): void {
    const slot = slotAt(now);
    const i = slot % SLOTS;
    this.#slotOf ??= new Float64Array(SLOTS).fill(Number.NEGATIVE_INFINITY);
    this.#units ??= new Float64Array(SLOTS);
    const slotOf = this.#slotOf;
    const slotUnits = this.#units;
    if (slotOf[i] !== slot) {
      slotOf[i] = slot;
      slotUnits[i] = 0;
    }
    slotUnits[i]! += units;
    this.#markUnits += units;
    if (this.#answers < ENOUGH_ANSWERS) this.#answers++;
    this.#any = true;
    this.#since ??= now;
    this.#firstSuccess ??= now;
  }

  /** Starts counting again from `now` (a cut). */
  mark(now: number): void {
    this.#beforeFirstMark ??= this.#markUnits;
    this.#markUnits = 0;
    this.#markAt = now;
  }

  /**
   * Units/min accepted since the last mark, over the time since it less `pausedMs` (time the
   * limiter sent nothing), at least one slot; `undefined` before any mark.
   */
  sinceMark(now: number, pausedMs = 0): number | undefined {
    if (this.#markAt === undefined) return undefined;
    return (this.#markUnits * 60_000) / Math.max(SLOT_MS, now - this.#markAt - pausedMs);
  }

  /**
   * Units/min accepted since the last mark, the bucket refill read from it: a server's bucket,
   * emptied at the mark (a first cut after a burst of calls), stores what it refills during the
   * `pausedMs` after it, at most what the burst before the mark took from it (a bucket full at
   * the start). So its refill rate is at least what got through over all the time since the mark
   * (the pause included), and at least what got through after the pause less that burst. A lower
   * bound of the server's rate (units/min), each part read over a slot at least. `undefined`
   * before any mark, and when less got through since it than that burst (nothing, or a 429 a few
   * ms after the pause: others took the bucket, or it did not refill; no reading of a refill).
   */
  refillSinceMark(now: number, pausedMs: number): number | undefined {
    const at = this.#markAt;
    const burst = this.#beforeFirstMark;
    const units = this.#markUnits;
    if (at === undefined || burst === undefined || units <= 0 || units < burst) return undefined;
    const overAll = (units * 60_000) / Math.max(SLOT_MS, now - at);
    const afterPause = ((units - burst) * 60_000) / Math.max(SLOT_MS, now - at - pausedMs);
    return Math.max(overAll, afterPause);
  }

  /**
   * Units/min accepted over the last second before `now` (four slots, the open one included), over
   * the time since the first success when that is shorter (at least one slot: answers come a
   * latency after their grants); `undefined` before the first success. At the first throttle
   * after a ramp it reads the top of the ramp, where the 3 s window still averages in its slow
   * start.
   */
  recent(now: number, pausedIn: PausedIn = NO_PAUSE): number | undefined {
    const first = slotAt(now) - RECENT_SLOTS + 1;
    return this.#perMinute(first, now, this.#firstSuccess ?? now, pausedIn, SLOT_MS);
  }

  /**
   * Units/min accepted in the window's slots that begin at or after `from`, until `now`, less the
   * time `pausedIn` says the limiter was paused from that slot; `undefined` before the first
   * success or when less than a slot of them is in the window.
   */
  since(from: number, now: number, pausedIn: PausedIn = NO_PAUSE): number | undefined {
    const first = Math.max(Math.ceil(from / SLOT_MS), slotAt(now) - SLOTS + 1);
    return this.#perMinute(first, now, Number.NEGATIVE_INFINITY, pausedIn, SLOT_MS, true);
  }

  /**
   * Units/min accepted over the window ending at `now`, less the time `pausedIn` says the limiter
   * was paused in it (a Retry-After pause sends nothing: it is no measure of the server);
   * `undefined` before the first success.
   */
  value(now: number, pausedIn: PausedIn = NO_PAUSE): number | undefined {
    const since = this.#since ?? now;
    // A second at least in the first second (one early answer is no rate) unless enough answers
    // came, a slot after it.
    let minSpan = SLOT_MS;
    if (now - since < MIN_SPAN_MS) minSpan = this.#answers >= ENOUGH_ANSWERS ? ENOUGH_SPAN_MS : MIN_SPAN_MS;
    return this.#perMinute(slotAt(now) - SLOTS + 1, now, since, pausedIn, minSpan);
  }

  /**
   * Whether fewer than {@link ENOUGH_ANSWERS} successes were ever counted: whatever rate they make
   * is no reading of the server.
   */
  get fewAnswers(): boolean {
    return this.#answers < ENOUGH_ANSWERS;
  }

  /**
   * Whether a rate read at `now` is read over the first second's floor: less than a second since
   * the first grant, and fewer than {@link ENOUGH_ANSWERS} answers. Such a rate is a floor only.
   */
  floored(now: number): boolean {
    return now - (this.#since ?? now) < MIN_SPAN_MS && this.#answers < ENOUGH_ANSWERS;
  }

  /**
   * Units/min accepted in the slots from `first` to the open one at `now`, over the time from the
   * start of slot `first` (or `notBefore` when later) to `now`, less what `pausedIn` says was
   * paused from that start. A span shorter than `minSpan` (ms) is read as `minSpan`, or with
   * `shortIsNone` gives `undefined`. `undefined` before the first success, or when `first` is
   * after the open slot. The one reading of the window that `value`, `recent` and `since` share.
   */
  #perMinute(
    first: number,
    now: number,
    notBefore: number,
    pausedIn: PausedIn,
    minSpan: number,
    shortIsNone = false,
  ): number | undefined {
    const current = slotAt(now);
    if (first > current) return undefined;
    const units = this.#unitsIn(first, current);
    if (units === undefined) return undefined;
    const start = Math.max(first * SLOT_MS, notBefore);
    const span = now - start - pausedIn(start);
    if (span < minSpan) return shortIsNone ? undefined : (units * 60_000) / minSpan;
    return (units * 60_000) / span;
  }

  /** Units recorded in the slots `first` to `last`; `undefined` before the first success. */
  #unitsIn(first: number, last: number): number | undefined {
    const slotOf = this.#slotOf;
    const slotUnits = this.#units;
    if (!this.#any || slotOf === undefined || slotUnits === undefined) return undefined;
    let units = 0;
    for (let i = 0; i < SLOTS; i++) {
      const slot = slotOf[i]!;
      if (slot >= first && slot <= last) units += slotUnits[i]!;
    }
    return units;
  }
}
