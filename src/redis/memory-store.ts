import { randomUUID } from 'node:crypto';
import { type Clock, systemClock } from '../clock.js';
import type { DecreaseRecord } from '../controllers/types.js';
import { clampRate } from '../limiter/rate-book.js';
import {
  appendDecrease,
  type BudgetStore,
  type ControllerBooks,
  type CutReply,
  type CutRequest,
  demandWeightedShare,
  type HeartbeatReply,
  type HeartbeatRequest,
  isCurrent,
  mayCut,
  type PauseRequest,
  pauseSince,
  sentEpochIn,
  sinceIncrease,
} from './store.js';

/** A member's last report. */
interface Report {
  demand: number;
  accepted: number;
  measured: number;
  /** The member's own `memberTimeout` (ms): how long the others wait for its next heartbeat. */
  timeout: number;
}

export interface MemoryBudgetStoreOptions {
  /** The store's clock, as Redis's `TIME` is the Redis store's. @default the system clock */
  clock?: Clock;
}

/**
 * One shared budget kept in this process's memory: the same rules as the Redis store's Lua
 * scripts (see store.ts), answered synchronously. Give the same store to every
 * {@link SharedBudget} that shares the budget: the simulator's instances do, on its virtual
 * clock; so can several workers of one process, or tests on a manual clock.
 */
export class MemoryBudgetStore implements BudgetStore {
  readonly roundTrips = 0;
  readonly #clock: Clock;

  // the state hash of the Redis store (expires on its own); no generation: no state
  #generation: string | undefined;
  #rate: number | undefined;
  /** The version at which the rate was last seeded (scripts.ts, SEEDED); `undefined`: not seeded. */
  #seeded: number | undefined;
  /** When the seeding began (ms); it ends at the heartbeat of a member heard since (SEEDED). */
  #seededAt = 0;
  #epoch = 0;
  #lastCutAt: number | undefined;
  #cuts = 0;
  #pausedUntil = 0;
  #pauseFrom = 0;
  #pauseBanked = 0;
  #createdAt = 0;
  // the controller's books (see ControllerBooks)
  #version = 0;
  #lastChangeAt = 0;
  #rateBefore: number | undefined;
  #measuredAtCut: number | undefined;
  #waited = false;
  #decreases: readonly DecreaseRecord[] = [];
  #random: number | undefined;
  #acceptedSinceCut = 0;
  #stateExpiresAt = Number.POSITIVE_INFINITY;
  // the members zset and the reports hash (they expire together, on heartbeats only)
  /** Member id -> time of its last heartbeat (ms), in order of joining. */
  readonly #members = new Map<string, number>();
  /** Member id -> its last report. */
  readonly #reports = new Map<string, Report>();
  /** The demands of one heartbeat (kept: a heartbeat allocates no array). */
  readonly #demands: number[] = [];
  #membersExpireAt = Number.POSITIVE_INFINITY;

  constructor(options: MemoryBudgetStoreOptions = {}) {
    this.#clock = options.clock ?? systemClock;
  }

  /** The whole rate, units/min (`undefined` while unlimited). */
  get rate(): number | undefined {
    this.#expire(this.#now());
    return this.#rate;
  }

  /** The state's generation (`undefined`: no state, as after it expired). */
  get generation(): string | undefined {
    this.#expire(this.#now());
    return this.#generation;
  }

  /** Shared cuts so far. */
  get cuts(): number {
    this.#expire(this.#now());
    return this.#cuts;
  }

  /** Live members as of their last heartbeat (silent ones are dropped at the next heartbeat). */
  get members(): number {
    this.#expire(this.#now());
    return this.#members.size;
  }

  heartbeat(r: HeartbeatRequest): HeartbeatReply {
    const now = this.#now();
    this.#expire(now);
    const generation = this.#create(now, r.ttl);
    const members = this.#members;
    const heardAt = members.get(r.id);
    const rejoined = heardAt === undefined;
    members.set(r.id, now);
    // Each member is judged by the timeout it sent with its report (members of one budget may beat
    // at different intervals, each timeout fitting its own heartbeat); one without, by this one's.
    let droppedUnreported = 0;
    for (const [id, seen] of members) {
      if (seen > now - (this.#reports.get(id)?.timeout ?? r.memberTimeout)) continue;
      if (!this.#reports.has(id)) droppedUnreported++;
      members.delete(id);
      this.#reports.delete(id);
    }
    const report = this.#reports.get(r.id);
    if (report === undefined) {
      const { demand, accepted, measured, memberTimeout: timeout } = r;
      this.#reports.set(r.id, { demand, accepted, measured, timeout });
    } else {
      report.demand = r.demand;
      report.accepted = r.accepted;
      report.measured = r.measured;
      report.timeout = r.memberTimeout;
    }

    let rate = this.#rate;
    const offered = r.initialRate === undefined ? undefined : clampRate(r.initialRate, r.minRate, r.maxRate);
    // A member heard since the seeding began is heard again, and no live member was last heard
    // before it began: it ends (scripts.ts, SEEDED).
    if (this.#isSeeded && heardAt !== undefined && heardAt >= this.#seededAt && this.#allHeardSinceSeeded()) {
      this.#seeded = undefined;
    }
    if (rate === undefined && offered !== undefined) {
      rate = offered;
      this.#seed(now);
    } else if (rate !== undefined && offered !== undefined && offered < rate && this.#isSeeded) {
      // The lowest rate a member offers (scripts.ts, SEEDED); proposals from the higher are stale.
      rate = offered;
      this.#version++;
      this.#seed(undefined);
    }
    let proposed = false;
    if (rate !== undefined) {
      if (r.proposal !== undefined && isCurrent(r.proposal, generation, this.#version)) {
        rate = r.proposal.rate;
        proposed = true;
        // A proposal ends the seeding once every live member was heard since it began (SEEDED).
        const seeded = this.#isSeeded;
        this.#changed(now);
        if (seeded && !this.#allHeardSinceSeeded()) this.#seed(undefined);
        else this.#seeded = undefined;
      }
      rate = clampRate(rate, r.minRate, r.maxRate);
      this.#rate = rate;
    }
    if (r.waited) this.#waited = true;
    if (r.acceptedUnits > 0) this.#acceptedSinceCut += r.acceptedUnits;
    let accepted = 0;
    let measured = 0;
    let longestMemberTimeout = r.memberTimeout;
    const demands = this.#demands;
    demands.length = 0;
    for (const report of this.#reports.values()) {
      accepted += report.accepted;
      measured += report.measured;
      demands.push(report.demand);
      longestMemberTimeout = Math.max(longestMemberTimeout, report.timeout);
    }
    const share =
      rate === undefined
        ? undefined
        : demandWeightedShare(rate, r.demand, demands, r.floorFraction, members.size);
    // This member's place among the ids in order (as the Lua script sorts them).
    let index = 0;
    for (const id of members.keys()) if (id < r.id) index++;
    this.#stateExpiresAt = now + r.ttl;
    this.#membersExpireAt = now + r.ttl;
    return {
      generation,
      rate,
      epoch: this.#epoch,
      pauseRemaining: Math.max(0, this.#pausedUntil - now),
      members: members.size,
      share,
      accepted,
      measured,
      longestMemberTimeout,
      index,
      proposed,
      rejoined,
      unreported: Math.max(0, members.size - this.#reports.size),
      droppedUnreported,
      // Its members and reports go together (no key is evicted alone): none is ever lost.
      membersLost: 0,
      now,
      books: this.#books(now),
    };
  }

  cut(r: CutRequest): CutReply {
    const now = this.#now();
    this.#expire(now);
    const generation = this.#create(now, r.ttl);
    const sentEpoch = sentEpochIn(r.sentEpoch, r.generation, generation);
    const refused = !mayCut(sentEpoch, this.#epoch, this.#lastCutAt, now, r.cooldown);
    // A state with no rate has no books a cut could be stale against (see scripts.ts, CUT).
    const stale = this.#rate !== undefined && !isCurrent(r.from, generation, this.#version);
    if (refused || stale) {
      const books = this.#books(now);
      return { cut: false, stale: !refused, rate: this.#rate, epoch: this.#epoch, generation, books };
    }
    // Into a seeded state, from the lowest rate known (scripts.ts, CUT): the member's cut factor.
    const stored = this.#rate;
    const lower = this.#isSeeded && stored !== undefined && stored < r.rateBefore;
    const seeded = stored === undefined || this.#isSeeded;
    this.#rate = clampRate(lower ? (r.rate * stored) / r.rateBefore : r.rate, r.minRate, r.maxRate);
    this.#rateBefore = lower ? stored : r.rateBefore;
    this.#measuredAtCut = r.measured;
    this.#decreases = appendDecrease(this.#decreases, r.record);
    this.#random = r.random;
    this.#acceptedSinceCut = 0;
    this.#epoch++;
    this.#lastCutAt = now;
    this.#cuts++;
    this.#pauseBanked = 0;
    this.#changed(now);
    if (stored === undefined) this.#seed(now);
    else if (seeded) this.#seed(undefined);
    else this.#seeded = undefined;
    this.#stateExpiresAt = now + r.ttl;
    return {
      cut: true,
      stale: false,
      rate: this.#rate,
      epoch: this.#epoch,
      generation,
      books: this.#books(now),
    };
  }

  pause(r: PauseRequest): number {
    const now = this.#now();
    this.#expire(now);
    this.#create(now, r.ttl);
    if (now + r.ms > this.#pausedUntil) {
      if (this.#pausedUntil <= now) {
        // A new pause: bank the last one's part after the last cut.
        this.#pauseBanked = pauseSince(
          this.#pauseBanked,
          this.#pauseFrom,
          this.#pausedUntil,
          this.#cutAt,
          now,
        );
        this.#pauseFrom = now;
      }
      this.#pausedUntil = now + r.ms;
      this.#stateExpiresAt = now + r.ttl;
    }
    return Math.max(0, this.#pausedUntil - now);
  }

  leave(id: string): number {
    this.#expire(this.#now());
    this.#members.delete(id);
    this.#reports.delete(id);
    return this.#members.size;
  }

  /** Whole ms, as the Redis scripts read `TIME`. */
  #now(): number {
    return Math.floor(this.#clock.now());
  }

  /** The last cut, or the state's creation before any. */
  get #cutAt(): number {
    return this.#lastCutAt ?? this.#createdAt;
  }

  /** Seeded at this version; `from`: when it begins (`undefined`: it goes on, from when it began). */
  #seed(from: number | undefined): void {
    this.#seeded = this.#version;
    if (from !== undefined) this.#seededAt = from;
  }

  /** Whether every live member was heard since the seeding began. */
  #allHeardSinceSeeded(): boolean {
    for (const at of this.#members.values()) if (at < this.#seededAt) return false;
    return true;
  }

  /** Whether the rate is still only what members offered (seeded at this version). */
  get #isSeeded(): boolean {
    return this.#seeded === this.#version;
  }

  /** The controller changed the rate (a cut or a proposal): a new version of its books. */
  #changed(now: number): void {
    this.#version++;
    this.#lastChangeAt = now;
    this.#waited = false;
  }

  #books(now: number): ControllerBooks {
    return {
      version: this.#version,
      rateBeforeLastDecrease: this.#rateBefore,
      measuredRateAtLastDecrease: this.#measuredAtCut,
      sinceLastDecrease: now - this.#cutAt,
      pauseSinceLastDecrease: pauseSince(
        this.#pauseBanked,
        this.#pauseFrom,
        this.#pausedUntil,
        this.#cutAt,
        now,
      ),
      sinceLastIncrease: sinceIncrease(this.#lastChangeAt, this.#pausedUntil, now),
      waited: this.#waited,
      decreases: this.#decreases,
      random: this.#random,
      acceptedSinceLastDecrease: this.#acceptedSinceCut,
    };
  }

  /** The state's generation; a new one, with the state's ttl, when there is no state. */
  #create(now: number, ttl: number): string {
    if (this.#generation !== undefined) return this.#generation;
    this.#createdAt = now;
    this.#lastChangeAt = now;
    this.#generation = randomUUID();
    this.#stateExpiresAt = now + ttl;
    return this.#generation;
  }

  /** Forgets what has expired, as Redis drops a key whose TTL ran out. */
  #expire(now: number): void {
    if (now >= this.#stateExpiresAt) {
      this.#generation = undefined;
      this.#rate = undefined;
      this.#seeded = undefined;
      this.#epoch = 0;
      this.#lastCutAt = undefined;
      this.#cuts = 0;
      this.#pausedUntil = 0;
      this.#pauseFrom = 0;
      this.#pauseBanked = 0;
      this.#version = 0;
      this.#rateBefore = undefined;
      this.#measuredAtCut = undefined;
      this.#waited = false;
      this.#decreases = [];
      this.#random = undefined;
      this.#acceptedSinceCut = 0;
      this.#stateExpiresAt = Number.POSITIVE_INFINITY;
    }
    if (now >= this.#membersExpireAt || this.#members.size === 0) {
      this.#members.clear();
      this.#reports.clear();
      this.#membersExpireAt = Number.POSITIVE_INFINITY;
    }
  }
}
