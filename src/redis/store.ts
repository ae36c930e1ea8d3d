/**
 * The seam between a {@link SharedBudget} and where the shared state lives. A store holds ONE
 * budget's state: its generation, whole rate, cut epoch, last cut, pause and members with their
 * demand.
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
   * `memberTimeout`, records its demand, adds `delta` to the whole rate (clamped), and answers
   * the shared state with this member's share ({@link demandWeightedShare}).
   */
  heartbeat(request: HeartbeatRequest): Answer<HeartbeatReply>;
  /**
   * A throttle that cut a member's share asks to cut the whole rate: only when the request was
   * sent in the current epoch and `cooldown` has passed since the last cut ({@link mayCut}). A
   * request sent in another generation counts as sent at this one's start ({@link sentEpochIn}).
   */
  cut(request: CutRequest): Answer<CutReply>;
  /**
   * A Retry-After pauses all: the pause ends at the later of its current end and now + `ms`.
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
   * The member's proposed change of the whole rate, units/min: what its controller changed its
   * own rate by since its last heartbeat. Each member's controller runs on its part of the budget
   * (share-controller.ts), so the members' changes add up to the whole rate's.
   */
  delta: number;
  /** ms without a heartbeat after which a member is dropped. */
  memberTimeout: number;
  /** Part of the rate kept as a floor, split between the members (0 to 1). */
  floorFraction: number;
  /** The whole rate to start from when the store has none; `undefined`: unlimited until a cut. */
  initialRate: number | undefined;
  minRate: number;
  /** `undefined`: no maximum. */
  maxRate: number | undefined;
  /** The state expires after this many ms without a heartbeat. */
  ttl: number;
}

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
}

export interface CutRequest {
  /** The shared epoch the throttled request was sent in. */
  sentEpoch: number;
  /**
   * The generation `sentEpoch` belongs to; `undefined`: none known yet (the member's first
   * heartbeat is not answered), taken as the current one.
   */
  generation?: string | undefined;
  /** The local cut's `to / from`: the whole rate is multiplied by it. `undefined`: unknown. */
  ratio: number | undefined;
  /** The whole rate to set when the store has none (leaving "unlimited"). */
  absoluteRate: number;
  /** Least ms between two shared cuts. */
  cooldown: number;
  minRate: number;
  maxRate: number | undefined;
  ttl: number;
}

export interface CutReply {
  /** Whether this request cut the whole rate. */
  cut: boolean;
  rate: number | undefined;
  epoch: number;
  /** The state's generation (see {@link HeartbeatReply.generation}). */
  generation: string;
}

export interface PauseRequest {
  ms: number;
  ttl: number;
}

// ---- the rules, as pure functions: the memory store runs them; the Lua scripts mirror them ----

/** `rate` within [minRate, maxRate] (no maximum when `undefined`). */
export function clampRate(rate: number, minRate: number, maxRate: number | undefined): number {
  if (rate < minRate) return minRate;
  if (maxRate !== undefined && rate > maxRate) return maxRate;
  return rate;
}

/**
 * A member's share of the whole `rate` (units/min): `rate × (min(own, rate) + floor) /
 * Σ(min(demandᵢ, rate) + floor)` with `floor = floorFraction × rate / members`. `demands` holds
 * every live member's demand, this one's (`own`) included. A busy member gets most of the rate;
 * an idle one keeps a floor so it can send at once; with no demand and no floor, equal shares.
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
  for (const demand of demands) total += Math.min(demand, rate) + floor;
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

/**
 * The whole rate after a cut: `rate × ratio`, or `absoluteRate` when the budget had no rate
 * (leaving "unlimited"), clamped. `undefined` ratio keeps the rate.
 */
export function cutRate(
  rate: number | undefined,
  ratio: number | undefined,
  absoluteRate: number,
  minRate: number,
  maxRate: number | undefined,
): number {
  const next = rate === undefined ? absoluteRate : ratio === undefined ? rate : rate * ratio;
  return clampRate(next, minRate, maxRate);
}
