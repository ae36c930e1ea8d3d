import { randomUUID } from 'node:crypto';
import { type Clock, systemClock } from '../clock.js';
import {
  type BudgetStore,
  type CutReply,
  type CutRequest,
  clampRate,
  cutRate,
  demandWeightedShare,
  type HeartbeatReply,
  type HeartbeatRequest,
  mayCut,
  type PauseRequest,
  sentEpochIn,
} from './store.js';

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
  #epoch = 0;
  #lastCutAt: number | undefined;
  #cuts = 0;
  #pausedUntil = 0;
  #stateExpiresAt = Number.POSITIVE_INFINITY;
  // the members zset and the demand hash (they expire together, on heartbeats only)
  /** Member id -> time of its last heartbeat (ms), in order of joining. */
  readonly #members = new Map<string, number>();
  /** Member id -> demand, units/min. */
  readonly #demand = new Map<string, number>();
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
    members.set(r.id, now);
    for (const [id, seen] of members) {
      if (seen > now - r.memberTimeout) continue;
      members.delete(id);
      this.#demand.delete(id);
    }
    this.#demand.set(r.id, r.demand);

    let rate = this.#rate ?? r.initialRate;
    if (rate !== undefined) {
      rate = clampRate(rate + r.delta, r.minRate, r.maxRate);
      this.#rate = rate;
    }
    const share =
      rate === undefined
        ? undefined
        : demandWeightedShare(rate, r.demand, this.#demand.values(), r.floorFraction, members.size);
    this.#stateExpiresAt = now + r.ttl;
    this.#membersExpireAt = now + r.ttl;
    return {
      generation,
      rate,
      epoch: this.#epoch,
      pauseRemaining: Math.max(0, this.#pausedUntil - now),
      members: members.size,
      share,
    };
  }

  cut(r: CutRequest): CutReply {
    const now = this.#now();
    this.#expire(now);
    const generation = this.#create(now, r.ttl);
    const sentEpoch = sentEpochIn(r.sentEpoch, r.generation, generation);
    if (!mayCut(sentEpoch, this.#epoch, this.#lastCutAt, now, r.cooldown)) {
      return { cut: false, rate: this.#rate, epoch: this.#epoch, generation };
    }
    this.#rate = cutRate(this.#rate, r.ratio, r.absoluteRate, r.minRate, r.maxRate);
    this.#epoch++;
    this.#lastCutAt = now;
    this.#cuts++;
    this.#stateExpiresAt = now + r.ttl;
    return { cut: true, rate: this.#rate, epoch: this.#epoch, generation };
  }

  pause(r: PauseRequest): number {
    const now = this.#now();
    this.#expire(now);
    this.#create(now, r.ttl);
    if (now + r.ms > this.#pausedUntil) {
      this.#pausedUntil = now + r.ms;
      this.#stateExpiresAt = now + r.ttl;
    }
    return Math.max(0, this.#pausedUntil - now);
  }

  leave(id: string): number {
    this.#expire(this.#now());
    this.#members.delete(id);
    this.#demand.delete(id);
    return this.#members.size;
  }

  /** Whole ms, as the Redis scripts read `TIME`. */
  #now(): number {
    return Math.floor(this.#clock.now());
  }

  /** The state's generation; a new one, with the state's ttl, when there is no state. */
  #create(now: number, ttl: number): string {
    if (this.#generation !== undefined) return this.#generation;
    this.#generation = randomUUID();
    this.#stateExpiresAt = now + ttl;
    return this.#generation;
  }

  /** Forgets what has expired, as Redis drops a key whose TTL ran out. */
  #expire(now: number): void {
    if (now >= this.#stateExpiresAt) {
      this.#generation = undefined;
      this.#rate = undefined;
      this.#epoch = 0;
      this.#lastCutAt = undefined;
      this.#cuts = 0;
      this.#pausedUntil = 0;
      this.#stateExpiresAt = Number.POSITIVE_INFINITY;
    }
    if (now >= this.#membersExpireAt || this.#members.size === 0) {
      this.#members.clear();
      this.#demand.clear();
      this.#membersExpireAt = Number.POSITIVE_INFINITY;
    }
  }
}
