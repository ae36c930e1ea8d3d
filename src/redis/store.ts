import type { DecreaseRecord } from '../controllers/types.js';
import { CUTS_KEPT, clampRate } from '../limiter/rate-book.js';

/**
 * The seam between a {@link SharedBudget} and where the shared state lives. A store holds ONE
 * budget's state: its generation, whole rate, cut epoch, the books of the budget's controller
 * (one for the budget: the last cut, the rate before it, the pause since, the last change,
 * whether requests waited; {@link ControllerBooks}), the pause, and the members with their
 * reports (demand, accepted rate, measured rate).
 * Two stores implement it with the same rules: Redis (Lua scripts, see scripts.ts) for
 * processes, and memory (memory-store.ts) for members in one process, such as the simulator's.
 *
 * Rates are units/min of the whole budget; durations are ms on the store's clock (the Redis
 * server's `TIME`, or the clock given to the memory store). A store may answer synchronously
 * (memory) or with a promise (Redis): a budget applies a synchronous answer in the same call.
 *
 * The state can be lost (a Redis restart without persistence, a failover, an eviction, a
 * FLUSHDB, its ttl after a long outage): it then starts again at epoch 0 and the initial rate.
 * So that the members notice, the state carries a **generation**: a random id made when the
 * state is created (by whichever call finds none), answered by every heartbeat and cut. A member
 * that sees another generation than the one it knew takes the store's epoch and rate as they are
 * (its own epoch may be higher: epochs of two generations do not compare).
 */
export interface BudgetStore {
  /**
   * One heartbeat of a member: registers it (now), drops the members silent for longer than
   * their own `memberTimeout` (each member's, kept with its report; one with no report is judged
   * by this request's), sets its proposal when the books are still at the version it was
   * computed from ({@link isCurrent}), records its report with its `memberTimeout`, and answers
   * the shared state with the members' sums and this member's share ({@link demandWeightedShare}).
   */
  heartbeat(request: HeartbeatRequest): Answer<HeartbeatReply>;
  /**
   * A throttle that cut a member's share asks to cut the whole rate: only when the request was
   * sent in the current epoch and `cooldown` has passed since the last cut ({@link mayCut}), and
   * the cut was computed from the current books (else `stale`: compute it again; a state with no
   * rate, made again after it was lost, has no books to be stale against). A request sent
   * in another generation counts as sent at this one's start ({@link sentEpochIn}).
   */
  cut(request: CutRequest): Answer<CutReply>;
  /**
   * A Retry-After a member shares pauses all: the pause ends at the later of its current end and
   * now + `ms`.
   * (Creates the state, with a new generation, when there is none.)
   */
  pause(request: PauseRequest): Answer<number>;
  /** A member leaves at once; answers the members left. */
  leave(id: string): Answer<number>;
  /** Round trips to a server so far (a store in memory makes none). */
  readonly roundTrips: number;
  /** Called once by the budget's `close()`: release what the store opened for it. */
  close?(): Promise<void>;
}

/** A store's answer: a value, or a promise of one. */
export type Answer<T> = T | Promise<T>;

export interface HeartbeatRequest {
  id: string;
  /** The member's demand: its measured send rate plus its backlog, units/min. */
  demand: number;
  /**
   * The member's accepted rate: units/min of its responses classified as success over the last
   * couple of seconds (its local limiter's `snapshot().acceptedRate`). The store answers the members' sum.
   */
  accepted: number;
  /** The member's measured send rate (responses of any kind), units/min; 0 before any. */
  measured: number;
  /**
   * Units of this member's responses classified as success since its previous heartbeat: the
   * store adds them up since the last cut (the books' `acceptedSinceLastDecrease`).
   */
  acceptedUnits: number;
  /** Whether a request of this member waited (or was turned away) since its last heartbeat. */
  waited: boolean;
  /**
   * The budget's controller's new whole rate, computed by this member from the state at
   * `version` of `generation` (an increase, or any change on a success): set only when the state
   * is still at that version (compare-and-set), so one change is made per version, whichever
   * member proposes it. `undefined`: none.
   */
  proposal?: Proposal | undefined;
  /**
   * ms without a heartbeat after which THIS member is dropped: kept with its report, the others'
   * heartbeats judge it by this, so members with different heartbeat intervals (each timeout
   * fitting its own) share one budget. Also what a member with no report is judged by here.
   */
  memberTimeout: number;
  /** Part of the rate kept as a floor, split between the members (0 to 1). */
  floorFraction: number;
  /**
   * The whole rate to start from when the store has none: the member's `initialUnitsPerMinute`,
   * or, without one, the rate it last knew (a state lost and made again); `undefined`: unlimited
   * until a cut. While the state's rate is seeded (since it was made again, until a proposal or a
   * member heard a second time, once every live member was heard since: scripts.ts, SEEDED), the
   * store keeps the lowest rate offered.
   */
  initialRate: number | undefined;
  minRate: number;
  /** `undefined`: no maximum. */
  maxRate: number | undefined;
  /** The state expires after this many ms without a heartbeat. */
  ttl: number;
  /**
   * The longest pause (the limiter's `maxPause`, ms): a stored pause ending later than this and
   * {@link STORED_PAUSE_BOUND_MS} from now fails its check.
   */
  maxPause?: number | undefined;
}

/** A whole rate computed from the state at one version (see {@link HeartbeatRequest.proposal}). */
export interface Proposal {
  generation: string;
  version: number;
  /** The new whole rate, units/min (clamped by the store). */
  rate: number;
}

/**
 * The budget's controller's books, kept once for the budget in the store (what a single
 * limiter's controller state holds, `RateControllerState`, for the whole budget), as of the
 * store's now. A member rebuilds its controller's state from them (budget-controller.ts).
 * Durations are ms on the store's clock.
 */
export interface ControllerBooks {
  /** Bumped by every change of the controller's decisions (a cut, an applied proposal). */
  version: number;
  /** The whole rate just before the last cut; `undefined` before any cut (the initial rate). */
  rateBeforeLastDecrease: number | undefined;
  /** The measured (accepted) whole rate the last cut started from; `undefined` before any. */
  measuredRateAtLastDecrease: number | undefined;
  /** ms since the last cut; before any, since the state was created. */
  sinceLastDecrease: number;
  /** ms of shared pause since the last cut. */
  pauseSinceLastDecrease: number;
  /** ms since the last change of the controller (cut or proposal); a pause counts from its end. */
  sinceLastIncrease: number;
  /** True when a member's request waited since the last change. */
  waited: boolean;
  /** The last cuts of the whole rate, oldest first, at most {@link DECREASES_KEPT}. */
  decreases: readonly DecreaseRecord[];
  /** The random number drawn at the last cut, in [0, 1); `undefined` before any cut. */
  random: number | undefined;
  /** Units the members reported accepted since the last cut (since the state's creation before any). */
  acceptedSinceLastDecrease: number;
}

/** Cuts the books keep, as a single limiter's state does. */
export const DECREASES_KEPT = CUTS_KEPT;

export interface HeartbeatReply {
  /** The state's generation: a new one when the state was lost and created again. */
  generation: string;
  /** The whole rate; `undefined` while unlimited (no initial rate, no cut yet). */
  rate: number | undefined;
  /** Shared cuts so far, in this generation. */
  epoch: number;
  /** ms left of the shared pause (0: none). */
  pauseRemaining: number;
  /** Live members, this one included. */
  members: number;
  /** This member's share of the rate; `undefined` while unlimited. */
  share: number | undefined;
  /** The live members' accepted rates added up, units/min. */
  accepted: number;
  /** The live members' measured send rates added up, units/min. */
  measured: number;
  /**
   * The longest `memberTimeout` among the live members (ms): each one's as sent with its report,
   * the request's for one without (a report of the build before). A member back from an outage
   * holds its part for this long at least (member-state.ts, `#rejoined`): a slower member heard
   * before the outage may take that long to be heard again. `undefined` (a store that does not
   * answer it): the request's own.
   */
  longestMemberTimeout?: number | undefined;
  /**
   * What the store found broken and repaired before answering, each as `"key field"` (a key of
   * the wrong type, a state field that failed its check, a report dropped); none: `undefined` or
   * empty. Never a value.
   */
  repaired?: readonly string[] | undefined;
  /**
   * This member's place among the live members (0 to members - 1, by id): distinct while the
   * membership holds, so members can take turns (a phase each).
   */
  index: number;
  /** Whether this heartbeat's proposal was applied. */
  proposed: boolean;
  /**
   * Whether this member was not among the members when the heartbeat ran: dropped by the others
   * after a silence longer than its `memberTimeout` (a process stopped, a long pause), or the
   * members lost (a `maxmemory` eviction, a `FLUSHDB`, a failover), so it joined again. The
   * others count it again only at their next heartbeats (member-state.ts holds its share
   * meanwhile). `undefined` (a store that does not answer it): `false`.
   */
  rejoined?: boolean | undefined;
  /**
   * Live members without a report (the reports lost to an eviction, one dropped as broken): each
   * counts as one with no demand ({@link demandWeightedShare}) while it may still send at the share
   * it was answered last, up to nearly the whole rate, until its next heartbeat reports again
   * (member-state.ts holds the share meanwhile). `undefined` (a store that does not answer it): 0.
   */
  unreported?: number | undefined;
  /**
   * Members dropped by this heartbeat without a report (the reports lost to an eviction, one
   * dropped as broken): judged by this member's `memberTimeout`, not their own, a member of a
   * slower heartbeat is dropped while it still sends at its last share until its next heartbeat
   * (member-state.ts holds the share meanwhile, as for {@link rejoined}). `undefined` (a store
   * that does not answer it): 0.
   */
  droppedUnreported?: number | undefined;
  /**
   * Reports dropped because the members' key was missing (Redis evicted it alone, as
   * `allkeys-lru` or `allkeys-random` may, or it was deleted) while the reports were kept: each
   * of their members joins again at its next heartbeat ({@link rejoined}). A key lost is not a
   * broken store: not in {@link repaired}; member-state.ts says it as a debug line
   * (`NODE_DEBUG=adaptive-rate-limit`). `undefined` (a store that does not answer it): 0.
   */
  membersLost?: number | undefined;
  /** The store's clock at the answer, ms (Redis: the server's `TIME`). */
  now: number;
  books: ControllerBooks;
}

export interface CutRequest {
  /** The shared epoch the throttled request was sent in. */
  sentEpoch: number;
  /**
   * The generation `sentEpoch` belongs to; `undefined`: none known yet (the member's first
   * heartbeat is not answered), taken as the current one.
   */
  generation?: string | undefined;
  /**
   * The state the cut was computed from (its generation and books' version): the cut is made
   * only from the current one; else the reply is `stale`, with the current books, and the
   * member computes it again. `undefined`: none known (the cut is computed on nothing: stale).
   */
  from: { generation: string; version: number } | undefined;
  /** The whole rate after the cut, as the budget's controller computed it (units/min). */
  rate: number;
  /** The whole rate the cut started from (units/min): the next `rateBeforeLastDecrease`. */
  rateBefore: number;
  /** The measured (accepted) whole rate it started from: the next `measuredRateAtLastDecrease`. */
  measured: number | undefined;
  /** The cut as the books keep it (appended to `decreases`). */
  record: DecreaseRecord;
  /** The books' next random number, in [0, 1), drawn by the member. */
  random: number;
  /** Least ms between two shared cuts. */
  cooldown: number;
  minRate: number;
  maxRate: number | undefined;
  ttl: number;
  /** See {@link HeartbeatRequest.maxPause}. */
  maxPause?: number | undefined;
}

export interface CutReply {
  /** Whether this request cut the whole rate. */
  cut: boolean;
  /**
   * The cut would have been made but was computed from another state than the current one:
   * compute it again from `books` and `rate`.
   */
  stale: boolean;
  rate: number | undefined;
  epoch: number;
  /** The state's generation (see {@link HeartbeatReply.generation}). */
  generation: string;
  books: ControllerBooks;
  /** See {@link HeartbeatReply.repaired}. */
  repaired?: readonly string[] | undefined;
}

export interface PauseRequest {
  ms: number;
  ttl: number;
  /** See {@link HeartbeatRequest.maxPause}. */
  maxPause?: number | undefined;
}

/**
 * How far ahead of the store's clock a stored time may be (ms) and be kept as it is: a server
 * whose clock is a little behind the old one's (a failover) leaves them; further ahead, see
 * {@link CLOCK_BEHIND_BOUND_MS}.
 */
export const CLOCK_SLACK_MS = 1_000;

/**
 * A stored time (or a member's last heartbeat) ahead of the store's clock by more than
 * {@link CLOCK_SLACK_MS} but at most this (ms) is a clock that went back (a failover to a server
 * whose clock is behind, a restore): it is set to now, and the state kept. Further ahead, it is
 * broken. A day.
 */
export const CLOCK_BEHIND_BOUND_MS = 86_400_000;

/** The longest pause when a request does not say (the limiter's default `maxPause`). */
export const DEFAULT_MAX_PAUSE_MS = 600_000;

/**
 * A stored pause may end this far from now (ms), or the caller's `maxPause` if longer, and pass
 * its check: members of one budget may have different `maxPause` (each caps the pause it
 * takes), so a pause one of them set longer than another's own cap is not a broken state. A day:
 * no `Retry-After` a limiter waits out is longer.
 */
export const STORED_PAUSE_BOUND_MS = 86_400_000;

// ---- the rules, as pure functions: the memory store runs them; the Lua scripts mirror them ----

/**
 * A member's share of the whole `rate` (units/min): `rate × (min(own, rate) + floor) /
 * Σ(min(demandᵢ, rate) + floor)` with `floor = floorFraction × rate / members`. `demands` holds
 * the live members' demands, this one's (`own`) included; a live member without a report (lost,
 * dropped) counts as one with no demand, so the shares never add up above the rate. A busy member
 * gets most of the rate; an idle one keeps a floor so it can send at once; with no demand and no
 * floor, equal shares.
 */
export function demandWeightedShare(
  rate: number,
  own: number,
  demands: Iterable<number>,
  floorFraction: number,
  members: number,
): number {
  const floor = (rate * floorFraction) / members;
  let total = 0;
  let reported = 0;
  for (const demand of demands) {
    total += Math.min(demand, rate) + floor;
    reported++;
  }
  total += Math.max(0, members - reported) * floor;
  if (!(total > 0)) return rate / members;
  return (rate * (Math.min(own, rate) + floor)) / total;
}

/**
 * The epoch of the store's current `generation` a request counts as sent in: its own
 * (`sentEpoch`) when it was sent in this generation (or in none known), else 0: it was sent
 * before this generation's state was created, so it cuts only while this generation has no cut
 * yet (the first 429 after a loss cuts the new state, a burst of them once).
 */
export function sentEpochIn(
  sentEpoch: number,
  sentGeneration: string | undefined,
  generation: string,
): number {
  return sentGeneration === undefined || sentGeneration === generation ? sentEpoch : 0;
}

/**
 * Whether a throttle of a request sent in `sentEpoch` cuts the whole rate: it was sent after the
 * last cut (in the current epoch), and `cooldown` ms have passed since that cut (or none yet).
 */
export function mayCut(
  sentEpoch: number,
  epoch: number,
  lastCutAt: number | undefined,
  now: number,
  cooldown: number,
): boolean {
  return sentEpoch === epoch && (lastCutAt === undefined || now - lastCutAt >= cooldown);
}

/** Whether a change computed `from` a state may be made to the state at (`generation`, `version`). */
export function isCurrent(
  from: { generation: string; version: number } | undefined,
  generation: string,
  version: number,
): boolean {
  return from !== undefined && from.generation === generation && from.version === version;
}

/**
 * The shared pause's books: ms of pause since the last cut (`cutAt`), banked for the earlier
 * pauses and counted for the one from `from` to `until`, as of `now`.
 */
export function pauseSince(banked: number, from: number, until: number, cutAt: number, now: number): number {
  return banked + Math.max(0, Math.min(now, until) - Math.max(from, cutAt));
}

/** ms since the increase clock started: the last change, or the end of a later pause (now while paused). */
export function sinceIncrease(lastChangeAt: number, pausedUntil: number, now: number): number {
  return now - Math.max(lastChangeAt, Math.min(pausedUntil, now));
}

/**
 * `decreases` with `record` appended, the oldest dropped past {@link DECREASES_KEPT}: as the
 * books keep their cuts.
 */
export function appendDecrease(
  decreases: readonly DecreaseRecord[],
  record: DecreaseRecord,
): readonly DecreaseRecord[] {
  return [...decreases.slice(1 - DECREASES_KEPT), record];
}

/**
 * A cut as the Redis store keeps it in its `decreases` field: `"rateBefore accepted sincePrevious"`
 * (`-` for none), the cuts joined by `;`.
 */
export function packDecrease(d: DecreaseRecord): string {
  return `${finiteOr0(d.rateBefore)} ${finiteOr0(d.acceptedRate)} ${
    d.acceptedRateSincePrevious === undefined ? '-' : finiteOr0(d.acceptedRateSincePrevious)
  }`;
}

/** The cuts of a `decreases` field (see {@link packDecrease}); `''` is none. */
export function unpackDecreases(text: string): DecreaseRecord[] {
  if (text === '') return [];
  return text.split(';').map((cut) => {
    const [before, accepted, since] = cut.split(' ');
    return {
      rateBefore: Number(before),
      acceptedRate: Number(accepted),
      acceptedRateSincePrevious: since === '-' || since === undefined ? undefined : Number(since),
    };
  });
}

function finiteOr0(x: number): number {
  return Number.isFinite(x) ? x : 0;
}

// ---- what a member reads back, checked again in TypeScript (a store of another version, or your
// own, may answer anything; the Lua scripts check what they read from Redis) ----

/** What a member knew before an answer: what stands in for a number of it that fails its check. */
export interface KnownBefore {
  readonly rate: number | undefined;
  readonly members: number;
  readonly generation: string | undefined;
}

/** Whole-budget bounds a member checks answers against (units/min; ms). */
export interface ReplyBounds {
  readonly minRate: number;
  /** `Infinity`: no maximum. */
  readonly maxRate: number;
  readonly maxPause: number;
}

const isCount = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0;
const atLeast0 = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x >= 0;
const positive = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x > 0;

/**
 * A whole rate answered: `undefined` (unlimited) as it is; a finite number > 0 within [min, max];
 * anything else is the rate known before.
 */
function checkedRate(rate: unknown, before: KnownBefore, bounds: ReplyBounds): number | undefined {
  if (rate === undefined) return undefined;
  if (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0) return before.rate;
  return clampRate(rate, bounds.minRate, bounds.maxRate);
}

function checkedGeneration(generation: unknown, before: KnownBefore): string {
  return typeof generation === 'string' && generation !== '' ? generation : (before.generation ?? '');
}

/**
 * The controller's books answered, each number checked: a count or a duration not a finite
 * number >= 0 is 0 (the version: -1, which no change matches), the paused time since the cut at
 * most the time since the cut, an optional rate is none, a cut
 * record that is not numbers >= 0 is dropped, the random number outside [0, 1) is none.
 */
function checkBooks(b: ControllerBooks): ControllerBooks {
  const optional = (x: unknown) => (atLeast0(x) ? x : undefined);
  const or0 = (x: unknown) => (atLeast0(x) ? x : 0);
  const decreases = Array.isArray(b.decreases) ? b.decreases : [];
  return {
    version: isCount(b.version) ? b.version : -1,
    rateBeforeLastDecrease: optional(b.rateBeforeLastDecrease),
    measuredRateAtLastDecrease: optional(b.measuredRateAtLastDecrease),
    sinceLastDecrease: or0(b.sinceLastDecrease),
    // Paused no longer than the time since the cut: a banked pause edited larger (a day) held a
    // CUBIC budget's curve at its start for good.
    pauseSinceLastDecrease: Math.min(or0(b.pauseSinceLastDecrease), or0(b.sinceLastDecrease)),
    sinceLastIncrease: or0(b.sinceLastIncrease),
    waited: b.waited === true,
    decreases: decreases
      .filter(
        (d) =>
          atLeast0(d.rateBefore) &&
          atLeast0(d.acceptedRate) &&
          (d.acceptedRateSincePrevious === undefined || atLeast0(d.acceptedRateSincePrevious)),
      )
      .slice(-DECREASES_KEPT),
    random: typeof b.random === 'number' && b.random >= 0 && b.random < 1 ? b.random : undefined,
    acceptedSinceLastDecrease: or0(b.acceptedSinceLastDecrease),
  };
}

/**
 * A heartbeat's answer with every number checked (the Lua scripts' checks, on the member's side):
 * the rate as {@link checkedRate}; members a count >= 1 (else as known); the share in (0, rate]
 * (above the rate: the rate; not a number > 0: none, the local rate stays); the pause finite,
 * >= 0 and at most `maxPause`; the epoch and the place counts (the place below the members);
 * the sums finite >= 0; the longest member timeout finite > 0 (else none: the member's own); the
 * books as {@link checkBooks}. The store's clock not finite is NaN,
 * which the member does not use.
 */
export function checkHeartbeat(
  reply: HeartbeatReply,
  before: KnownBefore,
  bounds: ReplyBounds,
): HeartbeatReply {
  const rate = checkedRate(reply.rate, before, bounds);
  const members = isCount(reply.members) && reply.members >= 1 ? reply.members : Math.max(1, before.members);
  const share =
    rate === undefined || typeof reply.share !== 'number' || !(reply.share > 0)
      ? undefined
      : Math.min(reply.share, rate);
  return {
    generation: checkedGeneration(reply.generation, before),
    rate,
    epoch: isCount(reply.epoch) ? reply.epoch : 0,
    pauseRemaining: atLeast0(reply.pauseRemaining) ? Math.min(reply.pauseRemaining, bounds.maxPause) : 0,
    members,
    share,
    accepted: atLeast0(reply.accepted) ? reply.accepted : 0,
    measured: atLeast0(reply.measured) ? reply.measured : 0,
    longestMemberTimeout: positive(reply.longestMemberTimeout) ? reply.longestMemberTimeout : undefined,
    repaired: reply.repaired,
    index: isCount(reply.index) && reply.index < members ? reply.index : 0,
    proposed: reply.proposed === true,
    rejoined: reply.rejoined === true,
    unreported: isCount(reply.unreported) ? reply.unreported : 0,
    droppedUnreported: isCount(reply.droppedUnreported) ? reply.droppedUnreported : 0,
    membersLost: isCount(reply.membersLost) ? reply.membersLost : 0,
    now: typeof reply.now === 'number' && Number.isFinite(reply.now) ? reply.now : Number.NaN,
    books: checkBooks(reply.books),
  };
}

/** A cut's answer with every number checked, as {@link checkHeartbeat}. */
export function checkCut(reply: CutReply, before: KnownBefore, bounds: ReplyBounds): CutReply {
  return {
    cut: reply.cut === true,
    stale: reply.stale === true,
    rate: checkedRate(reply.rate, before, bounds),
    epoch: isCount(reply.epoch) ? reply.epoch : 0,
    generation: checkedGeneration(reply.generation, before),
    books: checkBooks(reply.books),
    repaired: reply.repaired,
  };
}
