import type { EventEmitter } from 'node:events';
import type { Clock } from '../clock.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { Era } from './permit.js';
import type { ShareView } from './share-controller.js';
import { LastSharedCut } from './shared-cut.js';
import type { CutReply, HeartbeatReply } from './store.js';

/** A new share closer than this (relative) to the current rate is not applied: no churn. */
const SHARE_TOLERANCE = 0.005;
/** A shared pause that ends within this many ms of the local one is not applied again. */
const PAUSE_TOLERANCE_MS = 25;

/** What this process last learned from the store (Redis). Rates in units/min. */
export interface SharedState {
  /** The whole budget's rate; `undefined` while not learned (no initial rate, no throttle yet). */
  rate: number | undefined;
  /** This member's share of the rate; `undefined` while the rate is not learned. */
  share: number | undefined;
  /** Live members, this one included (1 before the first reply). */
  members: number;
  /**
   * Cuts of the shared rate so far, in the state's current generation: a throttle cuts only a
   * request sent in the current epoch.
   */
  epoch: number;
  /**
   * The shared state's generation (`undefined` before the first reply): a new one when the
   * state was lost (a Redis restart, a failover, an eviction, a FLUSHDB, its ttl) and created
   * again; this member then took the new state's epoch and rate as they were.
   */
  generation: string | undefined;
  /** True while Redis cannot be reached and this process serves from its last known share. */
  degraded: boolean;
  /**
   * Round trips to the store's server so far (Redis: one per heartbeat, cut or pause; two on a
   * script cache miss). A store in memory makes none.
   */
  roundTrips: number;
}

/** The events of a {@link SharedBudget}; the local limiter's own events are on `budget.limiter`. */
export interface SharedBudgetEventMap {
  /** Redis could not be reached: this process now serves from `rate` (units/min), its local share. */
  degraded: [{ budget: string; error: unknown; rate: number }];
  /** Redis answers again: sharing resumed. */
  recovered: [{ budget: string; members: number }];
  /** The number of live members changed. */
  members: [{ budget: string; from: number; to: number }];
}

/** What a {@link MemberState} starts from. Rates are the whole budget's, units/min. */
export interface MemberStateInit {
  /** The budget's name, in events and warnings. */
  readonly name: string;
  /** `undefined`: none (unlimited until a throttle). */
  readonly initialRate: number | undefined;
  readonly minRate: number;
  /** `Infinity`: no maximum. */
  readonly maxRate: number;
  /** Members guessed (`instanceCount`) until the first reply. */
  readonly members: number;
  /** Makes the local limiter; its controller reads `view` at each call (share-controller.ts). */
  readonly limiter: (view: () => ShareView) => AdaptiveRateLimiter;
}

/**
 * What a member of a {@link SharedBudget} knows of the shared state, and the store's replies
 * applied to its local limiter: its share of the whole rate, the store's generation and epoch
 * taken, the last cut made by another member, and the fall back to an equal share of the last
 * known rate while the store cannot be reached (`degraded`, then `recovered`, emitted on the
 * budget). Synchronous: the {@link Coordinator} calls the store and hands the replies in.
 */
export class MemberState {
  /** The local limiter; its rate is this member's share. */
  readonly limiter: AdaptiveRateLimiter;

  readonly #events: EventEmitter<SharedBudgetEventMap>;
  readonly #name: string;
  readonly #clock: Clock;
  #closed = false;
  #degraded = false;
  #lastError: unknown;
  #rate: number | undefined;
  #share: number | undefined;
  #members: number;
  /** The shared epoch and generation this member knows (one object per change, shared by permits). */
  #era: Era = { epoch: 0, generation: undefined };
  /**
   * The last share divided by the rate: a cut applies it to the new rate at once, and the local
   * controller sees a process that carries this part of the budget (see share-controller.ts).
   */
  #fraction: number;
  /** The controller's changes of the local rate (units/min) since the last heartbeat. */
  #pendingDelta = 0;
  /** The last cut of the whole rate made by another member: when this member learned of it. */
  readonly #sharedCut = new LastSharedCut(() => this.#clock.now());
  /** The call whose answer was applied last: an older answer does not undo a newer one. */
  #appliedSeq = 0;

  constructor(events: EventEmitter<SharedBudgetEventMap>, init: MemberStateInit) {
    this.#events = events;
    this.#name = init.name;
    const { minRate: min, maxRate: max } = init;
    this.#members = init.members;
    this.#fraction = 1 / init.members;
    // The local controller sees this member's part of the budget: its steps, its part of the
    // maximum and its rate before the last cut are scaled by the share (share-controller.ts).
    this.limiter = init.limiter(() => ({
      fraction: this.#fraction,
      minRate: min,
      maxRate: max,
      sharedCut: this.#sharedCut.seen(),
    }));
    this.#clock = this.limiter.clock;
    this.#rate = init.initialRate;
  }

  /** What this member last learned, with the store's `roundTrips`. */
  state(roundTrips: number): SharedState {
    return {
      rate: this.#rate,
      share: this.#share,
      members: this.#members,
      epoch: this.#era.epoch,
      generation: this.#era.generation,
      degraded: this.#degraded,
      roundTrips,
    };
  }

  /** The shared epoch and generation known now: what a permit granted now is sent in. */
  get era(): Era {
    return this.#era;
  }

  /** True while the store cannot be reached. */
  get degraded(): boolean {
    return this.#degraded;
  }

  /** The last failure of a call to the store. */
  get lastError(): unknown {
    return this.#lastError;
  }

  /** Live members as last learned. */
  get members(): number {
    return this.#members;
  }

  /** The local limiter paused from `from` until `until` (ms on its clock). */
  paused(from: number, until: number): void {
    this.#sharedCut.paused(from, until);
  }

  /** The local controller changed the local rate by `delta` units/min (not a throttle's cut). */
  proposed(delta: number): void {
    this.#pendingDelta += delta;
  }

  /**
   * The change of the whole rate to propose in the next heartbeat (units/min): the controller's
   * changes since the last one; none while degraded or unlimited. Starts the next sum.
   */
  takeDelta(): number {
    // Each member's controller runs on its part of the budget (share-controller.ts), so the
    // changes of the members' rates add up to the change of the whole rate.
    const delta = this.#degraded || this.#rate === undefined ? 0 : this.#pendingDelta;
    this.#pendingDelta = 0;
    return delta;
  }

  /** Applies the reply to heartbeat `seq`. */
  applyHeartbeat(seq: number, reply: HeartbeatReply): void {
    this.#recover(reply.members);
    this.#learn(seq, reply.generation, reply.epoch, false);
    if (seq < this.#appliedSeq) return;
    this.#appliedSeq = seq;
    this.#setMembers(reply.members);
    this.#rate = reply.rate;
    this.#share = reply.share;
    if (this.#rate !== undefined && this.#share !== undefined) this.#fraction = this.#share / this.#rate;
    this.#applyShare(this.#share);
    this.#applyPause(reply.pauseRemaining);
  }

  /** Applies the reply to cut `seq`. */
  applyCut(seq: number, reply: CutReply): void {
    this.#learn(seq, reply.generation, reply.epoch, reply.cut);
    if (seq < this.#appliedSeq) return;
    this.#appliedSeq = seq;
    this.#rate = reply.rate;
    if (this.#rate !== undefined) this.#share = this.#rate * this.#fraction;
    // A refused cut (another member cut for this burst) restores the share the local cut took.
    this.#applyShare(this.#share);
  }

  /** A call to the store failed: the first failure marks the member degraded. */
  fail(error: unknown): void {
    this.#lastError = error;
    if (this.#degraded || this.#closed) return;
    this.#degraded = true;
    this.#pendingDelta = 0;
    // Fall back to an equal share of the last known rate.
    if (this.#rate !== undefined) {
      this.#fraction = 1 / this.#members;
      this.#share = this.#rate / this.#members;
      this.#applyShare(this.#share);
    }
    const rate = this.limiter.rate;
    if (this.#events.listenerCount('degraded') === 0) {
      const detail = error instanceof Error ? error.message : String(error);
      console.warn(
        `adaptive-rate-limit: shared budget "${this.#name}" degraded (${detail}); serving from the local share, ${rate} units/min`,
      );
    }
    this.#events.emit('degraded', { budget: this.#name, error, rate });
  }

  /** The budget is closing: replies no longer change the local limiter, failures no longer degrade. */
  close(): void {
    this.#closed = true;
  }

  /**
   * The store's generation and epoch, from the answer to call `seq`. A newer epoch than this
   * member knew is a cut of the whole rate: its own (`own`: the local limiter's last cut is that
   * cut already), or another member's: from now on the local controller counts from that cut, as
   * from its own, with the whole rate known before it (see share-controller.ts).
   *
   * Another generation than this member knew is a state created again after it was lost (see
   * store.ts): its epoch is taken as it is, lower or not (epochs of two generations do not
   * compare), and the caller takes its rate. Only from an answer at least as recent as the last
   * applied one: a late answer from before a change of generation is not taken back.
   */
  #learn(seq: number, generation: string, epoch: number, own: boolean): void {
    if (generation !== this.#era.generation) {
      if (seq < this.#appliedSeq) return;
      this.#era = { epoch, generation };
      // A new state at epoch 0 has no cut yet: the last cut this member knows stays the last.
      if (epoch === 0 && !own) return;
    } else {
      if (epoch <= this.#era.epoch) return;
      this.#era = { epoch, generation };
    }
    if (own || this.#rate === undefined) {
      this.#sharedCut.clear();
      return;
    }
    this.#sharedCut.learned(this.#rate);
  }

  #applyShare(share: number | undefined): void {
    if (share === undefined || !(share > 0) || this.#closed) return;
    const current = this.limiter.rate;
    if (Number.isFinite(current) && Math.abs(share - current) <= current * SHARE_TOLERANCE) return;
    this.limiter.setRate(share);
  }

  #applyPause(remaining: number): void {
    if (!(remaining > 0) || this.#closed) return;
    const until = this.limiter.snapshot().pausedUntil;
    const local = until === undefined ? 0 : until - this.#clock.now();
    if (remaining > local + PAUSE_TOLERANCE_MS) this.limiter.pauseFor(remaining);
  }

  #setMembers(members: number): void {
    if (members === this.#members) return;
    const from = this.#members;
    this.#members = members;
    this.#events.emit('members', { budget: this.#name, from, to: members });
  }

  #recover(members: number): void {
    if (!this.#degraded) return;
    this.#degraded = false;
    if (this.#events.listenerCount('recovered') === 0) {
      console.warn(`adaptive-rate-limit: shared budget "${this.#name}" recovered; sharing resumed`);
    }
    this.#events.emit('recovered', { budget: this.#name, members });
  }
}
