import { InvalidArgumentError } from '../errors.js';
import {
  kCanGrant,
  kGiveBack,
  kHeldBack,
  kNoAnswer,
  kNotSent,
  kPauseOnly,
  kPredictWait,
  kQuiet,
  kQuotaWait,
  kReadyAt,
  kRefused,
  kTake,
} from '../internal.js';
import type { RateGate } from './bucket.js';
import {
  checkedQuotas,
  checkQuota,
  checkUnitsUsed,
  checkWait,
  type LimiterPermit,
  quotasChecked,
} from './permit.js';
import type { AnnouncedQuota, Permit } from './types.js';

/** Units a request draws from each named budget (a budget left out: 0). */
export type Costs = Readonly<Record<string, number>>;

type Quota = readonly AnnouncedQuota[] | undefined;

/** What a budget's books answer to a {@link BudgetSet}: an `AdaptiveRateLimiter` of one budget. */
export interface BudgetBooks {
  [kCanGrant](units: number, now: number): boolean;
  [kTake](units: number, now: number, since: number): LimiterPermit;
  [kReadyAt](units: number, start: number): number;
  [kPredictWait](units: number, queuedUnits: number, now: number): number;
  /** This budget held a request back: it waited (the controllers raise only after a wait). */
  [kHeldBack](): void;
  /** Gives back `units` a request drew that the API never counted (see {@link BudgetSet.refund}). */
  [kGiveBack](units: number): void;
}

/** A waiter of the budgets' line, as {@link BudgetSet.push} names it. */
export interface BudgetWaiter {
  readonly costs: Costs;
}

interface Queued {
  readonly costs: Costs;
  dead: boolean;
  /** The budgets (the first one's name too) that could not grant it when it had to wait. */
  held: readonly string[];
  /** Stops listening to the waiter's signal, once it left the line. */
  unlisten?: () => void;
}

const CHARGE_EXPECTED = 'must be a finite number of units (a refund: below 0)';

/**
 * Checks a `charge()`: a finite number, or finite numbers by budget (`first`, the limiter's own,
 * and the others'); throws `InvalidArgumentError` naming the budget, before anything is charged.
 */
export function checkCharge(units: unknown, first: string | undefined, names: readonly string[]): void {
  if (typeof units === 'number') {
    if (!Number.isFinite(units)) throw new InvalidArgumentError('charge', 'units', CHARGE_EXPECTED, units);
    return;
  }
  if (typeof units !== 'object' || units === null || Array.isArray(units)) {
    throw new InvalidArgumentError(
      'charge',
      'units',
      `${CHARGE_EXPECTED}, or an object of them by budget`,
      units,
    );
  }
  const all = first === undefined ? [] : [first, ...names];
  for (const [name, delta] of Object.entries(units)) {
    if (!all.includes(name)) {
      const known =
        all.length === 0 ? 'the limiter has no budgets: charge a number' : `budgets: ${all.join(', ')}`;
      throw new InvalidArgumentError('charge', `units.${name}`, `no such budget (${known})`, delta);
    }
    if (typeof delta !== 'number' || !Number.isFinite(delta)) {
      throw new InvalidArgumentError('charge', `units.${name}`, CHARGE_EXPECTED, delta);
    }
  }
}

/**
 * The budgets of a limiter after its first (its own rate): each one's books (rate, controller,
 * pause, ceiling, pacing) are an `AdaptiveRateLimiter` of that budget, which never queues: the
 * limiter's one waiting line serves its waiters first in, first out, and grants the head only
 * when every budget it draws from can grant it, taking from all at once (no budget is held while
 * another is awaited). This set keeps the costs of the waiters in the line's order (the line
 * serves, expires and closes from the head; an abort is marked here before the line hears of it),
 * and which budgets held each back: only those are told a request waited, at the wait and again
 * when it is served, as a limiter of one budget is (a budget that had room is not).
 */
export class BudgetSet {
  readonly names: readonly string[];
  readonly #books: readonly (readonly [string, BudgetBooks])[];
  #queue: Queued[] = [];
  #head = 0;
  /** Waiters in `#queue` that are not dead. */
  #live = 0;
  /** Units the live waiters draw from each budget, and how many of them draw any. */
  readonly #queued = new Map<string, number>();
  readonly #waiting = new Map<string, number>();

  constructor(books: readonly (readonly [string, BudgetBooks])[]) {
    this.#books = books;
    this.names = books.map(([name]) => name);
  }

  /** Checks `costs` against the budgets (`first`: the limiter's own, drawn through `units`). */
  check(costs: unknown, first: string, method: string): Costs {
    if (costs === undefined) return EMPTY;
    if (typeof costs !== 'object' || costs === null || Array.isArray(costs)) {
      throw new InvalidArgumentError(method, 'costs', 'must be an object of units per budget', costs);
    }
    for (const [name, units] of Object.entries(costs)) {
      if (name === first) {
        // Drawn through `units`: a cost named for it was taken as 1 unit, with no error.
        throw new InvalidArgumentError(
          method,
          `costs.${name}`,
          `the first budget draws the units argument, not costs (budgets: ${[first, ...this.names].join(', ')})`,
          units,
        );
      }
      if (!this.names.includes(name)) {
        throw new InvalidArgumentError(
          method,
          `costs.${name}`,
          `no such budget (budgets: ${[first, ...this.names].join(', ')})`,
          units,
        );
      }
      if (typeof units !== 'number' || !(units >= 0) || !Number.isFinite(units)) {
        throw new InvalidArgumentError(method, `costs.${name}`, 'must be a finite number >= 0', units);
      }
    }
    return costs as Costs;
  }

  canGrant(costs: Costs, now: number): boolean {
    for (const [name, books] of this.#books) {
      const units = costs[name];
      if (units !== undefined && units > 0 && !books[kCanGrant](units, now)) return false;
    }
    return true;
  }

  /** The budgets that cannot grant `costs` at `now` (every one is asked). */
  refusing(costs: Costs, now: number): string[] {
    const names: string[] = [];
    for (const [name, books] of this.#books) {
      const units = costs[name];
      if (units !== undefined && units > 0 && !books[kCanGrant](units, now)) names.push(name);
    }
    return names;
  }

  /** Tells the budgets `names` (those of this set among them) that they held a request back. */
  heldBack(names: readonly string[]): void {
    for (const [name, books] of this.#books) if (names.includes(name)) books[kHeldBack]();
  }

  /** The budgets `names` held the head back: it keeps them, to tell them again when it is served. */
  holdHead(names: readonly string[]): void {
    this.#skipDead();
    const entry = this.#queue[this.#head];
    if (entry === undefined) return;
    const added = names.filter((name) => !entry.held.includes(name));
    if (added.length > 0) entry.held = [...entry.held, ...added];
  }

  /** The budgets that held the head back so far (the first one's name too). */
  headHeld(): readonly string[] {
    this.#skipDead();
    return this.#queue[this.#head]?.held ?? NONE;
  }

  /** Takes each budget's units at once; the permits of the budgets drawn from. */
  take(costs: Costs, now: number, since: number): [string, LimiterPermit][] {
    const permits: [string, LimiterPermit][] = [];
    for (const [name, books] of this.#books) {
      const units = costs[name];
      if (units !== undefined && units > 0) permits.push([name, books[kTake](units, now, since)]);
    }
    return permits;
  }

  /** Gives `units` back to budget `name`: what a refused request drew from it (see {@link BudgetedPermit}). */
  refund(name: string, units: number): void {
    for (const [n, books] of this.#books) if (n === name) books[kGiveBack](units);
  }

  readyAt(costs: Costs, start: number): number {
    let at = start;
    for (const [name, books] of this.#books) {
      const units = costs[name];
      if (units !== undefined && units > 0) at = Math.max(at, books[kReadyAt](units, start));
    }
    return at;
  }

  /** The longest predicted wait of the budgets drawn, behind the units queued in each (ms). */
  predictWait(costs: Costs, now: number, queued: boolean): number {
    let wait = 0;
    for (const [name, books] of this.#books) {
      const units = costs[name];
      // As the other readers: a cost left out of `costs` may read a member of Object.prototype
      // (`{}.constructor`, a function, for a budget of that name), which is no units.
      if (!(units !== undefined && units > 0)) continue;
      const ahead = queued ? (this.#queued.get(name) ?? 0) : 0;
      wait = Math.max(wait, books[kPredictWait](units, ahead, now));
    }
    return wait;
  }

  /**
   * A waiter joins the end of the line (`held`: the budgets that held it back, when it heads it);
   * an abort of `signal` marks it dead before the line hears of it.
   */
  push(costs: Costs, signal: AbortSignal | undefined, held: readonly string[]): BudgetWaiter {
    const entry: Queued = { costs, dead: false, held };
    if (signal !== undefined) {
      // Removed when the waiter leaves the line: a long-lived signal (an app's shutdown) passed to
      // every call kept one listener, and its waiter, per call served. Before the entry joins: a
      // signal whose addEventListener throws leaves no entry behind.
      const onAbort = () => this.#kill(entry);
      signal.addEventListener('abort', onAbort, { once: true });
      entry.unlisten = () => signal.removeEventListener('abort', onAbort);
    }
    this.#compact();
    this.#queue.push(entry);
    this.#live++;
    this.#count(costs, 1);
    return entry;
  }

  /** Waiter `entry` (what {@link push} returned) left from behind the head (its deadline passed). */
  drop(entry: BudgetWaiter): void {
    this.#kill(entry as Queued);
  }

  /**
   * Drops the dead entries when they are at least half of those held (waiters that aborted
   * behind a head that waits: they leave the line only when the head passes them), so that they
   * do not grow its memory, as the line's own ring does not grow for them.
   */
  #compact(): void {
    const held = this.#queue.length - this.#head;
    if (held < COMPACT_AT || this.#live * 2 > held) return;
    this.#queue = this.#queue.slice(this.#head).filter((entry) => !entry.dead);
    this.#head = 0;
  }

  /** The costs of the waiter at the head of the line. */
  head(): Costs {
    this.#skipDead();
    return this.#queue[this.#head]?.costs ?? EMPTY;
  }

  /** The head left the line (served, expired or closed out). */
  shift(): void {
    this.#skipDead();
    const entry = this.#queue[this.#head];
    if (entry === undefined) return;
    this.#leave(entry);
    this.#head++;
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
  }

  #kill(entry: Queued): void {
    if (entry.dead) return;
    this.#leave(entry);
  }

  /** A live entry leaves: its costs are no longer queued, and it lets go of its signal. */
  #leave(entry: Queued): void {
    entry.dead = true;
    this.#live--;
    entry.unlisten?.();
    // A dead entry may be held until the head passes it: not its waiter's signal too.
    entry.unlisten = undefined;
    this.#count(entry.costs, -1);
  }

  #skipDead(): void {
    while (this.#queue[this.#head]?.dead === true) this.#head++;
    if (this.#head >= this.#queue.length) {
      this.#queue = [];
      this.#head = 0;
    }
  }

  #count(costs: Costs, sign: 1 | -1): void {
    for (const name of this.names) {
      const units = costs[name];
      if (units !== undefined && units > 0) {
        const waiting = (this.#waiting.get(name) ?? 0) + sign;
        this.#waiting.set(name, waiting);
        // None left: 0, not what rounding left of fractional costs added and taken away.
        this.#queued.set(name, waiting === 0 ? 0 : (this.#queued.get(name) ?? 0) + sign * units);
      }
    }
  }

  /** The live waiters that draw from budget `name`, and the units they draw (its snapshot's). */
  queuedOf(name: string): { queued: number; queuedUnits: number } {
    return { queued: this.#waiting.get(name) ?? 0, queuedUnits: this.#queued.get(name) ?? 0 };
  }
}

/** Entries held (live and dead) from which dead ones are dropped once they are half of them. */
const COMPACT_AT = 64;

const EMPTY: Costs = Object.freeze({});
const NONE: readonly string[] = Object.freeze([]);

/**
 * The line's gate when a limiter has several budgets: the first budget's gate, with the head's
 * turn and a waiter's predicted wait taken over every budget it draws from.
 */
export function budgetsGate(first: RateGate, set: BudgetSet): RateGate {
  return new Proxy(first, {
    get(target, key) {
      if (key === 'readyAt') {
        return (units: number, start: number) =>
          Math.max(target.readyAt(units, start), set.readyAt(set.head(), start));
      }
      if (key === 'predictWait') {
        return (units: number, queuedUnits: number, pause: number, now: number) =>
          Math.max(
            target.predictWait(units, queuedUnits, pause, now),
            set.predictWait(set.head(), now, false),
          );
      }
      const value = Reflect.get(target, key);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * The permit of a request that drew from several budgets: settles the first budget's permit and
 * each other budget's. A throttled answer cuts only the budgets that ran out: those `budgets`
 * names, else those whose announced quota has nothing left, else every budget drawn from; the
 * others end quietly (neither cut nor raised, and no `failed` event: metrics count no failed
 * answer for a budget the API did not refuse). Each quota goes to the budget it
 * names (`AnnouncedQuota.budget`; none: the first).
 *
 * A throttled request gives back what it drew from the other budgets that did not run out (the
 * tokens of an LLM call refused for its requests per minute), before the answer's quotas are
 * read, so that a quota the answer announces wins: the API refused it before doing the work, and
 * its retry draws them again. A budget that ran out keeps the draw, as a 429 keeps its units in a
 * limiter of one budget: the refusal shows the budget's level was at least that much above the
 * API's, and keeping the draw is the correction (given back, the next request in line goes at
 * once into the next 429: the simulator's `llm` scenario drew 28 429s instead of 5). The first
 * budget, the request itself, always keeps it: APIs count the requests they refuse ("unsuccessful
 * requests contribute to your per-minute limit", OpenAI). A success keeps its draws (corrected
 * by `charge` from what the answer reports it used), and so does a failure (the API may have
 * done the work).
 *
 * A request the API refused without doing it for another reason (an LLM API's 400
 * `invalid_request_error`: `max_tokens` too large; told by `kRefused`) gives back what it drew from
 * every budget but the first, by the same rule: none of them ran out. The first is told a
 * success (the server answered), the others end quietly (neither cut nor raised, no event).
 *
 * A request that never reached the API (its connection refused or timed out, DNS failed, its
 * `maxConcurrent` slot refused, a retry whose body could no longer be sent; told by `kNotSent`)
 * gives back what it drew from every budget but the first too: the API did no work for it. The
 * first keeps its draw and is told a failure (no cut), as a limiter of one budget is.
 */
export class BudgetedPermit implements Permit {
  readonly #first: LimiterPermit;
  readonly #firstName: string;
  readonly #others: readonly [string, LimiterPermit][];
  readonly #settled: () => void;
  readonly #refund: (name: string, units: number) => void;
  #refunded = false;

  constructor(
    first: LimiterPermit,
    firstName: string,
    others: readonly [string, LimiterPermit][],
    settled: () => void,
    refund: (name: string, units: number) => void,
  ) {
    this.#first = first;
    this.#firstName = firstName;
    this.#others = others;
    this.#settled = settled;
    this.#refund = refund;
  }

  get units(): number {
    return this.#first.units;
  }

  get waitedMs(): number {
    return this.#first.waitedMs;
  }

  success(unitsUsed?: number, quota?: Quota): void {
    checkUnitsUsed(unitsUsed);
    checkQuota('success', quota);
    this.#first.success(unitsUsed, this.#quotaOf(this.#firstName, quota));
    for (const [name, permit] of this.#others) permit.success(undefined, this.#quotaOf(name, quota));
    this.#settled();
  }

  throttled(retryAfterMs?: number, quota?: Quota, budgets?: readonly string[]): void {
    checkWait('throttled', retryAfterMs);
    checkQuota('throttled', quota);
    if (budgets !== undefined && !(Array.isArray(budgets) && budgets.every((b) => typeof b === 'string')))
      throw new InvalidArgumentError(
        'throttled',
        'budgets',
        'must be an array of budget names (strings), or undefined',
        budgets,
      );
    this.#throttled(retryAfterMs, quota, budgets, false);
  }

  /**
   * No budget's throttle, with a wait (see `throttledWithoutCut`): every budget the request drew
   * from pauses for it and counts a throttle, none is cut, and each keeps its draw (as `failed()`).
   */
  [kPauseOnly](retryAfterMs: number | undefined, quota?: Quota): void {
    checkWait('throttled', retryAfterMs);
    checkQuota('throttled', quota);
    this.#first[kPauseOnly](retryAfterMs, this.#quotaOf(this.#firstName, quota));
    for (const [name, permit] of this.#others) permit[kPauseOnly](retryAfterMs, this.#quotaOf(name, quota));
    this.#settled();
  }

  /** A throttle whose wait is only an exhausted policy's reset (see `throttledByQuota`). */
  [kQuotaWait](retryAfterMs: number | undefined, quota: Quota, budgets?: readonly string[]): void {
    this.#throttled(retryAfterMs, quota, budgets, true);
  }

  #throttled(
    retryAfterMs: number | undefined,
    quota: Quota,
    budgets: readonly string[] | undefined,
    quotaWait: boolean,
  ): void {
    const all = [[this.#firstName, this.#first] as const, ...this.#others];
    let out = all.filter(([name]) => budgets?.includes(name));
    if (out.length === 0) {
      out = all.filter(([name, permit]) => exhausted(this.#quotaOf(name, quota), permit.units));
    }
    if (out.length === 0) out = all;
    this.#giveBack((name) => !out.some(([n]) => n === name));
    for (const [name, permit] of all) {
      if (!out.some(([n]) => n === name)) permit[kQuiet](this.#quotaOf(name, quota));
      else if (quotaWait) permit[kQuotaWait](retryAfterMs, this.#quotaOf(name, quota));
      else permit.throttled(retryAfterMs, this.#quotaOf(name, quota));
    }
    this.#settled();
  }

  /** The API refused the request without doing it, and not for a budget: see the class. */
  [kRefused](quota?: Quota): void {
    checkQuota('success', quota);
    this.#giveBack(() => true);
    this.#first.success(undefined, this.#quotaOf(this.#firstName, quota));
    for (const [name, permit] of this.#others) permit[kQuiet](this.#quotaOf(name, quota));
    this.#settled();
  }

  /** The request never reached the API: see the class. */
  [kNotSent](): void {
    this.#giveBack(() => true);
    this.#first[kQuiet](undefined, false);
    for (const [, permit] of this.#others) permit[kQuiet](undefined, false);
    this.#settled();
  }

  /** The request got no HTTP answer: failed as `failed()` is, no answer counted (see `noAnswer`). */
  [kNoAnswer](): void {
    this.#first[kNoAnswer]();
    for (const [, permit] of this.#others) permit[kNoAnswer]();
    this.#settled();
  }

  /**
   * Gives back the draws of the budgets after the first that `back` names: once, and only for a
   * permit not settled yet (a permit settles once), before the answer's quotas are applied.
   */
  #giveBack(back: (name: string) => boolean): void {
    if (this.#refunded || !this.#first.unsettled) return;
    this.#refunded = true;
    for (const [name, permit] of this.#others) if (back(name)) this.#refund(name, permit.units);
  }

  failed(retryAfterMs?: number, quota?: Quota): void {
    checkWait('failed', retryAfterMs);
    checkQuota('failed', quota);
    this.#first.failed(retryAfterMs, this.#quotaOf(this.#firstName, quota));
    for (const [name, permit] of this.#others) permit.failed(retryAfterMs, this.#quotaOf(name, quota));
    this.#settled();
  }

  #quotaOf(name: string, quota: Quota): Quota {
    if (quota === undefined) return undefined;
    const own = quota.filter((q) => (q.budget ?? this.#firstName) === name);
    if (own.length === 0) return undefined;
    // Part of a list checked where it was read: its budget's permit does not check it again.
    return quotasChecked(quota) ? checkedQuotas(own) : own;
  }
}

/** An announced quota has less left than the request drew. */
function exhausted(quota: Quota, units: number): boolean {
  return quota?.some((q) => q.remaining !== undefined && q.remaining < units) ?? false;
}
