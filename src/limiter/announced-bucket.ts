import { TokenBucket } from './bucket.js';
import type { AnnouncedQuota } from './types.js';

/**
 * The bucket an API announces (`burst: 'announced'`), for APIs that meter a continuously refilling
 * bucket and say how full it is (LLM APIs: `limit` per minute and `remaining`). Before any
 * announcement it is the one-second bucket (unlimited while the rate is). Once a quota with a
 * `limit` and a `remaining` arrives, it holds the announced `limit` less a reserve (`reserveMs` of
 * the rate, at most half the `limit`: calls granted in one order reach the server in another, and
 * a bucket spent to its last unit would draw 429s), starts at `remaining` less that reserve (not
 * below 0) and less the units still in flight, and refills at min(rate, ceiling); with several
 * policies, the binding one counts (the smallest `limit`, the lowest `remaining`), whatever order
 * they are listed in. The full bucket is spent at the start, then grants are paced by the refill.
 * Each later announcement lowers the level to its `remaining` less the reserve (not below 0) and
 * less the units granted after the answered request and still in flight (the API had not counted
 * them), when that is lower (other clients drain the same quota); a refund never lifts it above
 * that `remaining` less those units (refilled since) plus what was taken after it, and a charge
 * lowers it only by what the announcements did not already take off. A request larger than the
 * bucket is served once the bucket is full and leaves it in debt, so the long-run rate holds for
 * any size. Rates are units/min; times ms on the limiter's clock.
 */
export class AnnouncedBucket extends TokenBucket {
  readonly #reserveMs: number;
  /** The announced bucket size (units); `undefined` until announced. */
  #limit: number | undefined;
  /**
   * How far a refund may lift the level: the last announced level (less the units granted after
   * the answered call and still in flight, at a later announcement; refilled since) less the level,
   * plus what was taken or charged since (the API had not counted it when it announced). Unknown
   * (no bound) until the first announcement.
   */
  #headroom = Number.POSITIVE_INFINITY;
  /**
   * What a later announcement's level took off for the units granted after the answered call and
   * still in flight (the API had not counted them): a refund of one of those calls that the API
   * never counts (a refused call's draw, given back before its answer) may lift the level by it,
   * a refund of a call the API counted (the answered one's `usage`) may not.
   */
  #uncounted = 0;
  /**
   * How far a charge may go without lowering the level: how far this process's own count of the
   * bucket (what it drew, charged and was given back, refilled) is above the level, because the
   * announcements took off what the API had counted and this process had not yet. An
   * announcement's `remaining` counted the real cost of the calls the API had admitted, and a
   * call's `usage` comes after its answer's headers (at the end of its body): a `usage` above the
   * estimate is already off the level those headers set. Charged again, the excess was counted
   * twice: an LLM call whose prompt used 4,000 tokens for an estimate of 2,000 left the level 2,000
   * tokens below the API's `remaining`. An `uncounted` charge (a refused call's `usage`, which the
   * API did not admit) lowers the level whole. What other processes on the same key drew is in it
   * too, and a charge the API had not counted yet (output streamed after the headers) may then go
   * unseen until the next answer's `remaining` counts it: never above what the API announced.
   */
  #counted = 0;

  constructor(rate: number, now: number, reserveMs: number) {
    super(rate, now);
    this.#reserveMs = reserveMs;
  }

  /** Units kept back from the announced bucket: `reserveMs` of the refill rate. */
  get reserve(): number {
    return this.free ? 0 : this.#reserveOf(this.sendRate);
  }

  /**
   * `reserveMs` of `rate` in units, at most half the announced bucket: a bucket of 10 a second at
   * 600/min would otherwise keep back 15, more than it holds, and stay in debt.
   */
  #reserveOf(rate: number): number {
    const units = (this.#reserveMs * rate) / 60_000;
    return this.#limit === undefined ? units : Math.min(units, this.#limit / 2);
  }

  /**
   * Reads an announcement: of the quotas with a `limit` and a `remaining`, the binding one sizes
   * the bucket (whatever order they are listed in): its size is the smallest `limit`, and the
   * level becomes the lowest `remaining` less the reserve and less `inFlight` (units granted and
   * not yet answered) at the first announcement; afterwards at most the `remaining` less the
   * reserve and less `sentAfter`: the units granted after the answered request and still in flight.
   * Those reach the API after it, so its `remaining` has not counted them (the units granted before
   * it had, in the common order: the reserve covers the others). Left out, the level forgot them
   * whenever another process's drain lowered `remaining` below it: two processes starting together
   * on one key each granted the whole `remaining` again, and every call they had in flight beyond
   * it drew a 429.
   */
  sync(quotas: readonly AnnouncedQuota[], inFlight: number, now: number, sentAfter = 0): void {
    let limit = Number.POSITIVE_INFINITY;
    let remaining = Number.POSITIVE_INFINITY;
    for (const q of quotas) {
      if (!finite(q.limit) || (q.limit as number) <= 0 || !finite(q.remaining)) continue;
      limit = Math.min(limit, q.limit as number);
      remaining = Math.min(remaining, q.remaining as number);
    }
    if (limit === Number.POSITIVE_INFINITY) return;
    this.refill(now);
    const first = this.#limit === undefined;
    this.#limit = limit;
    this.resize();
    if (this.free) return;
    // The announcement alone never puts the bucket in debt (units in flight may).
    const announced = Math.max(0, remaining - this.reserve);
    const level = announced - (first ? inFlight : sentAfter);
    // This process's own count: before the first announcement, a full bucket less the units in
    // flight (the API's buckets start full); afterwards, the level plus what was set aside.
    const own = first ? this.capacity - inFlight : this.tokens + this.#counted;
    this.tokens = Math.min(this.capacity, first ? level : Math.min(this.tokens, level));
    // What the announcement took off below that count, the API had counted and this process had
    // not yet: the `usage` above the estimate of a call it admitted, charged at its body's end.
    this.#counted = Math.max(0, Math.min(this.capacity, own) - this.tokens);
    // A later answer's level already counts the units granted after its call: a refund (of the
    // answered call, which the API counted) lifting past it sends them again. Only a refused
    // call's draw, given back, may lift it by what that took off (`#uncounted`).
    this.#headroom = Math.max(0, (first ? announced : level) - this.tokens);
    this.#uncounted = Math.max(0, announced - this.tokens - this.#headroom);
  }

  override take(units: number, now?: number): void {
    super.take(units, now);
    if (!this.free) this.#headroom += units;
  }

  /**
   * Charges `delta` units (more used than drawn) beyond what the announcements already took off
   * the level, or refunds them (negative) up to the headroom: a refund never lifts the level above
   * what the API last announced, refilled since, plus what this process took after that
   * announcement. The announcement counted what the API had charged by then: the real cost of the
   * calls it had admitted (an LLM call whose `usage` came under or over its estimate, in the same
   * answer's headers), nothing for the calls it refused. A refund on top of a level the
   * announcement lowered counted the difference twice: 3,000 input tokens above the API's
   * `remaining`, with other processes on the same key, and the calls went into 429s. A charge
   * taken off it again counted the excess twice too, below the API's `remaining` (see
   * `#counted`). A later announcement's level counts the units in flight it had not (see `sync`):
   * only an `uncounted` refund (a refused call's draw, given back) may lift it by those.
   */
  override charge(delta: number, now: number, uncounted = false): void {
    if (this.free) return;
    this.refill(now);
    // This process's own count is never above a full bucket, nor the API's level above it.
    const room = Math.max(0, this.capacity - this.tokens);
    this.#headroom = Math.min(this.#headroom, room);
    this.#counted = Math.min(this.#counted, room);
    if (delta >= 0) {
      const counted = uncounted ? 0 : Math.min(delta, this.#counted);
      this.#counted -= counted;
      if (delta > counted) {
        super.charge(delta - counted, now);
        this.#headroom += delta - counted;
      }
      return;
    }
    let lift = Math.min(-delta, this.#headroom);
    this.#headroom -= lift;
    if (uncounted) {
      const more = Math.min(-delta - lift, this.#uncounted);
      this.#uncounted -= more;
      lift += more;
    }
    if (lift > 0) super.charge(-lift, now);
    // What the level could not take back, this process's own count did: a later charge (another
    // call's `usage` above its estimate, in the same `remaining`) is set against it first.
    this.#counted = Math.min(this.#counted - delta - lift, Math.max(0, this.capacity - this.tokens));
  }

  protected override resize(): void {
    const wasFree = this.free;
    super.resize();
    // Leaving "free": the level is unknown until announced; a full bucket of the new size.
    if (wasFree && !this.free) this.tokens = this.capacity;
  }

  protected override capacityOf(rate: number): number {
    if (rate === Number.POSITIVE_INFINITY || this.#limit === undefined) return super.capacityOf(rate);
    return Math.max(this.#limit - this.#reserveOf(rate), 1);
  }
}

function finite(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}
