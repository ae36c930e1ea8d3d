import type { EventEmitter } from 'node:events';
import type { Clock } from '../clock.js';
import type { RateController, RateControllerState } from '../controllers/types.js';
import { debugLine } from '../debug-line.js';
import { ConfigError } from '../errors.js';
import { kAlignSlots, kRecentAcceptedRate } from '../internal.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import { warnListenerThrew } from '../limiter/listener-threw.js';
import { redactText } from '../redact.js';
import { BudgetController, type CutPlan } from './budget-controller.js';
import type { MemberView } from './member-controller.js';
import type { Era } from './permit.js';
import { withoutCredentials } from './redis-error.js';
import type { SharedBudgetEventMap, SharedState } from './shared-state.js';
import {
  type CutReply,
  checkCut,
  checkHeartbeat,
  type HeartbeatReply,
  type KnownBefore,
  type Proposal,
  type ReplyBounds,
} from './store.js';

/** The process warning of a budget that degrades while nobody listens to its `degraded` event. */
const BUDGET_DEGRADED_WARNING = 'ARL_SHARED_BUDGET_DEGRADED';
/** The process warning of a budget that recovers while nobody listens to its `recovered` event. */
const BUDGET_RECOVERED_WARNING = 'ARL_SHARED_BUDGET_RECOVERED';
/** The process warning of a repair of the store while nobody listens to the `repaired` event. */
const BUDGET_REPAIRED_WARNING = 'ARL_SHARED_BUDGET_STATE_REPAIRED';

export type { SharedBudgetEventMap, SharedState } from './shared-state.js';

/** A new share closer than this (relative) to the current rate is not applied: no churn. */
const SHARE_TOLERANCE = 0.005;
/** A shared pause that ends within this many ms of the local one is not applied again. */
const PAUSE_TOLERANCE_MS = 25;

/** What a {@link MemberState} starts from. Rates are the whole budget's, units/min. */
export interface MemberStateInit {
  /** The budget's name, in events and warnings (masked there: see `redactText`). */
  readonly name: string;
  /** `undefined`: none (unlimited until a throttle). */
  readonly initialRate: number | undefined;
  readonly minRate: number;
  /** `Infinity`: no maximum. */
  readonly maxRate: number;
  /** The limiter's `maxPause` (ms): a shared pause answered longer is cut to it. */
  readonly maxPause: number;
  /** This member's `memberTimeout` (ms): the longest known until a reply tells a longer one. */
  readonly memberTimeout: number;
  /** This member's `stateTtl` (ms): the longest `memberTimeout` a reply is taken to tell. */
  readonly stateTtl: number;
  /**
   * A call's timeout and a heartbeat of this member (`redisTimeout` + `heartbeatInterval`, ms):
   * back from an outage, its share is held for the longest `memberTimeout` among the members
   * heard before the outage plus this (see `#rejoined`).
   */
  readonly rejoinMarginMs: number;
  /** Members guessed (`instanceCount`) until the first reply. */
  readonly members: number;
  /** The budget's controller (AIMD, CUBIC, the probe controller, your own). */
  readonly controller: RateController;
  /** Draws the books' random number at a cut (the limiter's `random` option). */
  readonly random: () => number;
  /** Makes the local limiter; its controller asks `view` (member-controller.ts). */
  readonly limiter: (view: MemberView) => AdaptiveRateLimiter;
}

/**
 * What a member of a {@link SharedBudget} knows of the shared state, and the store's replies
 * applied to its local limiter: its share of the whole rate, the store's generation and epoch
 * taken, the budget's controller run on the books kept in the store (budget-controller.ts), this
 * member's accepted rate and waits reported, and the fall back to an equal share of the last
 * known rate while the store cannot be reached (`degraded`, then `recovered`, emitted on the
 * budget). Synchronous: the {@link Coordinator} calls the store and hands the replies in.
 */
export class MemberState {
  /** The local limiter; its rate is this member's share. */
  readonly limiter: AdaptiveRateLimiter;

  readonly #events: EventEmitter<SharedBudgetEventMap>;
  /** The budget's name as its events and warnings show it: its secrets masked. */
  readonly #name: string;
  readonly #clock: Clock;
  readonly #controller: BudgetController;
  readonly #bounds: ReplyBounds;
  #closed = false;
  #degraded = false;
  /**
   * Back from an outage, until when (this member's clock) its share is not raised while fewer
   * members answer than before it: the others may not have been heard again yet (each counts as
   * dead after its silence), so the share counts too few members. `undefined`: not rejoining.
   */
  #rejoinUntil: number | undefined;
  /** The members known when the outage began. */
  #membersBefore = 1;
  readonly #memberTimeout: number;
  readonly #stateTtl: number;
  readonly #rejoinMarginMs: number;
  /** The longest `memberTimeout` among the live members, as last answered (ms). */
  #longestTimeout: number;
  /** The same, when the outage began. */
  #longestTimeoutBefore: number;
  #lastError: unknown;
  #rate: number | undefined;
  #share: number | undefined;
  #members: number;
  #index = 0;
  #serverOffset = 0;
  #acceptedSum: number | undefined;
  /** The shared epoch and generation this member knows (one object per change, shared by permits). */
  #era: Era = { epoch: 0, generation: undefined };
  /** The last share divided by the rate: a cut applies it to the new rate at once. */
  #fraction: number;
  /** Whether `#fraction` was learned from a share (else: none answered yet, see {@link #part}). */
  #fractionLearned = false;
  /** A request waited since the last heartbeat (reported), and since the last reply (proposals). */
  #waitedSinceBeat = false;
  #waitedSinceReply = false;
  /** The cut the local limiter just made, for the coordinator to ask the store for. */
  #pendingCut: CutPlan | undefined;
  /** The call whose answer was applied last: an older answer does not undo a newer one. */
  #appliedSeq = 0;
  /** Units of this member's successes not reported yet. */
  #acceptedUnits = 0;
  /**
   * The shared pause this member knows of: when it ends (this member's clock) and the generation
   * of the state it was known in. `undefined`: none, or it has ended.
   */
  #sharedPause: { readonly until: number; readonly generation: string | undefined } | undefined;
  /** ms of a shared pause the state lost, for the coordinator to share again; 0: none. */
  #lostPause = 0;
  /** The last heartbeat found the state made again with no rate: `#rate` is kept, not answered. */
  #rateKept = false;

  constructor(events: EventEmitter<SharedBudgetEventMap>, init: MemberStateInit) {
    this.#events = events;
    this.#name = redactText(init.name);
    const { minRate, maxRate } = init;
    this.#members = init.members;
    this.#fraction = 1 / init.members;
    this.#controller = new BudgetController(init.controller, init);
    this.#bounds = { minRate, maxRate, maxPause: init.maxPause };
    this.#memberTimeout = init.memberTimeout;
    this.#stateTtl = init.stateTtl;
    this.#rejoinMarginMs = init.rejoinMarginMs;
    this.#longestTimeout = init.memberTimeout;
    this.#longestTimeoutBefore = init.memberTimeout;
    // The local limiter's controller: a share of the budget's cut on a throttle, nothing on a
    // success (increases come with the heartbeat); on its own while degraded.
    const member = this;
    this.limiter = init.limiter({
      get degraded() {
        return member.#degraded;
      },
      get fraction() {
        return member.#part;
      },
      minRate,
      maxRate,
      cutShare: (state) => this.#cutShare(state),
    });
    this.#clock = this.limiter.clock;
    this.#rate = init.initialRate;
  }

  /** What this member last learned, with the store's `roundTrips`. */
  state(roundTrips: number): SharedState {
    return {
      rate: this.#rate,
      share: this.#share,
      members: this.#members,
      index: this.#index,
      serverOffset: this.#serverOffset,
      accepted: this.#acceptedSum,
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

  /** True until the budget has a whole rate: no initial rate, and no cut answered yet. */
  get unlimited(): boolean {
    return this.#rate === undefined;
  }

  /**
   * The whole rate last answered (units/min), kept through a lost state until the store answers
   * a rate again; `undefined`: none known (unlimited). What the heartbeat of a member with no
   * initial rate offers a state made again without one to start from (coordinator.ts).
   */
  get lastRate(): number | undefined {
    return this.#rate;
  }

  /**
   * The budget's first cut (leaving "unlimited") computed from the last heartbeat's answer, whose
   * reports every member made after the throttle (coordinator.ts): the fresh accepted sum, halved
   * (see BudgetController.cut); not `fresh` (read after the pause ended), as any cut. `first`:
   * the plan computed at the throttle, whose base (this member's part of it) the cut starts from
   * when nothing was accepted: the local limiter's rate has taken that plan's cut already, and
   * read as a base it cut the budget twice (10,000 -> 5,000 a minute with a long Retry-After).
   */
  freshFirstCut(first: CutPlan, fresh = true): CutPlan {
    const now = this.#clock.now();
    const part = this.#part;
    return this.#controller.cut(now, this.acceptedRate(), first.rateBefore * part, part, fresh);
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

  /** A request of this member waited for units, or was turned away by `tryAcquire`. */
  waited(): void {
    this.#waitedSinceBeat = true;
    this.#waitedSinceReply = true;
  }

  /**
   * This member's accepted rate now, units/min: its local limiter's (successes over the last 3 s,
   * the rate a single limiter's cut starts from); 0 before the first success.
   */
  acceptedRate(): number {
    const window = this.limiter.snapshot().acceptedRate ?? 0;
    if (this.#controller.cuts > 0) return window;
    // Before the budget's first cut the 3 s window may still average in the start; the last
    // second is what the first cut should start from, as a single limiter's first cut does.
    return Math.max(window, this.limiter[kRecentAcceptedRate]() ?? 0);
  }

  /** A response of this member's was classified as success, for `units`. */
  accepted(units: number): void {
    if (units > 0 && Number.isFinite(units)) this.#acceptedUnits += units;
  }

  /** The units accepted since the last call: what the next heartbeat reports. */
  takeAcceptedUnits(): number {
    const units = this.#acceptedUnits;
    this.#acceptedUnits = 0;
    return units;
  }

  /** Whether a request waited since the last heartbeat (or `queued` now); starts the next one. */
  takeWaited(queued: boolean): boolean {
    const waited = this.#waitedSinceBeat || queued;
    this.#waitedSinceBeat = false;
    return waited;
  }

  /**
   * The change the budget's controller makes now, from the last answer's books, for the next
   * heartbeat to carry; none while degraded.
   */
  proposal(): Proposal | undefined {
    // None on a rate kept through a lost state: the store has none to change, and one made from
    // a rate kept through an outage (6,000, where the others had cut to 1,441) replaced the rate
    // the first member heard since had made the state again at (12,000 with the probe controller).
    if (this.#degraded || this.#rateKept) return undefined;
    return this.#controller.proposal(this.#clock.now(), this.#waitedSinceReply, this.acceptedRate());
  }

  /** This member asks the store to pause every member for `ms`: a pause it knows of. */
  sharing(ms: number): void {
    this.#knowPause(this.#clock.now() + ms, this.#era.generation);
  }

  /**
   * ms of a shared pause this member knows of that the state it just heard lost (made again
   * since, without it), to share again; `undefined`: none.
   */
  takeLostPause(): number | undefined {
    const ms = this.#lostPause;
    this.#lostPause = 0;
    return ms > 0 ? ms : undefined;
  }

  /** The cut the local limiter just made (to ask the store for); `undefined`: none. */
  takeCut(): CutPlan | undefined {
    const cut = this.#pendingCut;
    this.#pendingCut = undefined;
    return cut;
  }

  /**
   * The store answered that `plan` was computed from other books than its current ones: learns
   * them and computes the cut again.
   */
  recut(plan: CutPlan, answer: CutReply): CutPlan {
    const now = this.#clock.now();
    const reply = checkCut(answer, this.#before, this.#bounds);
    this.#repaired(reply.repaired);
    const { generation, rate, books } = reply;
    this.#controller.learn({ generation, rate, books, pauseRemaining: this.#localPause(now) }, now);
    const part = this.#part;
    const localBase = this.#rate === undefined ? plan.rateBefore * part : this.limiter.rate;
    return this.#controller.cut(now, this.acceptedRate(), localBase, part);
  }

  /**
   * Applies the reply to heartbeat `seq`, sent at `sentAt` (ms on this member's clock) with a
   * report of `accepted` (units/min). `away`: it reported no demand while paused for a second of
   * its own (coordinator.ts): the share answered, the floor, is not taken; its part stays as it was.
   */
  applyHeartbeat(seq: number, answer: HeartbeatReply, accepted: number, sentAt: number, away = false): void {
    const reply = checkHeartbeat(answer, this.#before, this.#bounds);
    this.#repaired(reply.repaired);
    this.#membersLost(reply.membersLost);
    this.#recover(reply.members);
    const known = this.#era.generation;
    this.#learn(seq, reply.generation, reply.epoch);
    if (seq < this.#appliedSeq) return;
    // A member dropped without its report (judged by this member's timeout, not its own) may
    // still send at its last share until its next heartbeat: held as when rejoining.
    if (known !== undefined && (reply.rejoined === true || (reply.droppedUnreported ?? 0) > 0))
      this.#rejoining(reply.members);
    // The state was lost and made again with no rate: a member that knew a rate keeps it, and its
    // share, until the store answers one again (its next heartbeat offers it: coordinator.ts).
    // Set unlimited here, a member without initialUnitsPerMinute heard first after the loss sent
    // without limit until its next heartbeat while the others were back at their shares of 600
    // (200 / unlimited / 200). One that knew none (the budget never had a rate) stays unlimited.
    const lost = known !== undefined && this.#era.generation !== known && reply.rate === undefined;
    if (lost && this.#rate === undefined) {
      this.#fractionLearned = false;
      if (!this.#closed) this.limiter.setRate(Number.POSITIVE_INFINITY);
    }
    this.#appliedSeq = seq;
    const now = this.#clock.now();
    this.#setMembers(reply.members);
    // At most the state's ttl: a report edited by hand (1e300) holds no one back for ever.
    this.#longestTimeout = Math.max(
      this.#memberTimeout,
      Math.min(reply.longestMemberTimeout ?? 0, this.#stateTtl),
    );
    this.#index = reply.index;
    if (Number.isFinite(reply.now)) this.#serverOffset = reply.now - (sentAt + now) / 2;
    this.#acceptedSum = reply.accepted;
    if (!lost) this.#rate = reply.rate;
    this.#rateKept = lost && this.#rate !== undefined;
    if (away && this.#rate !== undefined && this.#fractionLearned) this.#share = this.#rate * this.#fraction;
    else this.#share = reply.share;
    // Back from an outage the share applied may be held below the one answered (see
    // #rejoined): the part a cut takes is the one applied, so a 429 never raises the rate.
    const applied = this.#unreported(this.#rejoined(now, reply.members), reply.unreported, known);
    if (this.#rate !== undefined && applied !== undefined) {
      this.#fraction = applied / this.#rate;
      this.#fractionLearned = true;
    }
    // Lost, the rate kept is the one the budget's controller cuts from too: read as "unlimited",
    // a 429 before the rate came back cut from the accepted sum of the members heard since the
    // loss (one of three after a restart: 600 -> 101, not 420).
    this.#controller.learn(lost ? { ...reply, rate: this.#rate } : reply, now);
    this.#controller.learnSums(reply.accepted, reply.measured, accepted);
    this.#waitedSinceReply = false;
    this.#applyShare(applied);
    this.#learnPause(now, reply.generation, reply.pauseRemaining);
    this.#applyPause(reply.pauseRemaining);
    this.#alignSlots();
  }

  /** Applies the (last) reply to cut `seq`. */
  applyCut(seq: number, answer: CutReply): void {
    const reply = checkCut(answer, this.#before, this.#bounds);
    this.#repaired(reply.repaired);
    this.#learn(seq, reply.generation, reply.epoch);
    if (seq < this.#appliedSeq) return;
    this.#appliedSeq = seq;
    const now = this.#clock.now();
    // A reply with no rate (the state lost again before this cut, every try `stale`): the rate
    // known is kept; made undefined, the member read as unlimited, and a 429 with a long
    // Retry-After took the delayed first cut, dropped once a heartbeat brought a rate back.
    this.#rate = reply.rate ?? this.#rate;
    if (reply.rate !== undefined) this.#rateKept = false;
    const { generation, rate, books } = reply;
    this.#controller.learn({ generation, rate, books, pauseRemaining: this.#localPause(now) }, now);
    // Before any share was answered (the budget left "unlimited" with this cut): an equal part
    // of the members heard, as the cut itself took (not the guess `instanceCount`, 1 by default,
    // which gave the cutter the whole rate until its next heartbeat).
    if (this.#rate !== undefined) this.#share = this.#rate * this.#part;
    // A refused cut (another member cut for this burst) restores the share the local cut took.
    this.#applyShare(this.#share);
  }

  /**
   * A call to the store failed: the first failure marks the member degraded. It keeps its last
   * share (the shares added up to the whole rate; a busy member keeps the larger part).
   */
  fail(failure: unknown): void {
    // Printed by users (the event, the failClosed error's cause): never the login's password.
    const error = withoutCredentials(failure);
    this.#lastError = error;
    if (this.#degraded || this.#closed) return;
    this.#degraded = true;
    this.#membersBefore = this.#members;
    this.#longestTimeoutBefore = this.#longestTimeout;
    const rate = this.limiter.rate;
    if (this.#events.listenerCount('degraded') === 0) {
      const detail = error instanceof Error ? error.message : String(error);
      // A config Redis refused (its database) is not served at all: shared-budget.ts refuses it.
      const then =
        error instanceof ConfigError
          ? 'every acquire ends with this error'
          : `serving from the local share, ${rate} units/min`;
      process.emitWarning(
        redactText(`adaptive-rate-limit: shared budget "${this.#name}" degraded (${detail}); ${then}`),
        { code: BUDGET_DEGRADED_WARNING },
      );
    }
    this.#emit('degraded', { budget: this.#name, error, rate });
  }

  /** The budget is closing: replies no longer change the local limiter, failures no longer degrade. */
  close(): void {
    this.#closed = true;
  }

  /**
   * The local limiter cuts from `state.rate` (the local cut rules allowed it): the budget's
   * controller computes the whole cut from the books known, kept for the coordinator to ask the
   * store; the local limiter takes this member's part of it at once.
   */
  #cutShare(state: RateControllerState): number {
    const now = this.#clock.now();
    const fraction = this.#part;
    const plan = this.#controller.cut(now, this.acceptedRate(), state.rate, fraction);
    this.#pendingCut = plan;
    // A cut never raises the local rate (its part of the whole cut may be above it: a share held
    // low while rejoining, a local rate its own controller cut while degraded).
    return Math.min(plan.rate * fraction, state.rate);
  }

  /**
   * The share to apply at `now`, back from an outage: not above the local rate (its last share)
   * while fewer than the members before the outage answer; so the members' rates never add up
   * above the budget on the way back. For at most the longest `memberTimeout` among the members
   * heard before the outage (each member's own, answered by the heartbeats), plus this member's
   * `redisTimeout` and heartbeat: a member is heard again within its own timeout (it is kept above
   * its call's timeout and heartbeat), so a member whose heartbeat is slower than this one's is
   * waited for as long as it may take; this member's own timeout alone let it take the part of a
   * slower member not heard yet, above the budget by that member's part until its next heartbeat.
   */
  #rejoined(now: number, members: number): number | undefined {
    const share = this.#share;
    if (this.#rejoinUntil === undefined) return share;
    if (members >= this.#membersBefore || now >= this.#rejoinUntil) {
      this.#rejoinUntil = undefined;
      return share;
    }
    return share === undefined ? undefined : Math.min(share, this.limiter.rate);
  }

  /**
   * `share`, not above the local rate while some live members have no report (`unreported`: the
   * reports lost to an eviction, one dropped as broken), for a member heard before (`known`): the
   * share counts each as one with no demand, while each still sends at its last share until its
   * next heartbeat. Before, the first busy member heard after the reports were evicted took
   * nearly the whole rate while the others still sent their parts (1,059 units/min of 600).
   */
  #unreported(
    share: number | undefined,
    unreported: number | undefined,
    known: string | undefined,
  ): number | undefined {
    if (share === undefined || !(unreported !== undefined && unreported > 0) || known === undefined)
      return share;
    return Math.min(share, this.limiter.rate);
  }

  /**
   * This member's part of the whole rate: its last share over the rate, or, before any share was
   * answered (unlimited so far), an equal part of the members heard.
   */
  get #part(): number {
    return this.#fractionLearned ? this.#fraction : 1 / this.#members;
  }

  /** What stands in for a number of an answer that fails its check: what was known before it. */
  get #before(): KnownBefore {
    return { rate: this.#rate, members: this.#members, generation: this.#era.generation };
  }

  /** The store repaired what it held (`repaired`): one event, or one process warning. */
  #repaired(repaired: readonly string[] | undefined): void {
    if (repaired === undefined || repaired.length === 0) return;
    if (this.#events.listenerCount('repaired') === 0) {
      process.emitWarning(
        redactText(
          `adaptive-rate-limit: shared budget "${this.#name}": the store held a broken ${repaired.join(', ')}; repaired (a broken state starts a fresh generation, a broken report is dropped)`,
        ),
        { code: BUDGET_REPAIRED_WARNING },
      );
    }
    this.#emit('repaired', { budget: this.#name, repaired });
  }

  /**
   * The members' key was missing while their reports were kept (Redis evicted it alone, as
   * `allkeys-lru` may; a `DEL`): the reports were dropped and their members join again at their
   * next heartbeats (`rejoined`, their shares held meanwhile). A key lost is no broken store:
   * one debug line (`NODE_DEBUG=adaptive-rate-limit`), said by the one member heard first after
   * it, not a `repaired` event or a process warning, which it was at every eviction.
   */
  #membersLost(lost: number | undefined): void {
    if (lost === undefined || lost === 0) return;
    debugLine(
      'shared budget "%s": its members key was gone (evicted, deleted): %d reports of members not heard since dropped; they join again at their next heartbeats',
      this.#name,
      lost,
    );
  }

  /** ms left of the local limiter's pause. */
  #localPause(now: number): number {
    const until = this.limiter.snapshot().pausedUntil;
    return until === undefined ? 0 : Math.max(0, until - now);
  }

  /**
   * The store's generation and epoch, from the answer to call `seq`. Another generation than
   * this member knew is a state created again after it was lost (see store.ts): its epoch is
   * taken as it is, lower or not (epochs of two generations do not compare), and the caller
   * takes its rate. Only from an answer at least as recent as the last applied one: a late
   * answer from before a change of generation is not taken back. In the same generation the
   * newest answer's epoch is taken, lower too: a failover to a replica that missed the last cuts
   * (or a restart from an older snapshot) keeps the generation and loses epochs, and a member
   * that kept its higher epoch would send every request in an epoch the store never reaches,
   * so no throttle of it could cut the budget again. A late answer only raises it.
   */
  #learn(seq: number, generation: string, epoch: number): void {
    if (generation !== this.#era.generation) {
      if (seq < this.#appliedSeq) return;
      this.#era = { epoch, generation };
    } else if (epoch > this.#era.epoch || (seq >= this.#appliedSeq && epoch !== this.#era.epoch)) {
      this.#era = { epoch, generation };
    }
  }

  /**
   * Tells the budget's listeners of `event`: one that throws (a metrics or logging bug) is
   * reported (`ARL_LISTENER_THREW`), as a limiter's is, and the reply is applied on: thrown out of
   * here, it read as the store failing (the member degraded, the reply's pause not applied), and
   * out of a `degraded` listener, as a heartbeat's unhandled rejection.
   */
  #emit<K extends keyof SharedBudgetEventMap>(event: K, ...args: SharedBudgetEventMap[K]): void {
    try {
      this.#events.emit(event, ...(args as never));
    } catch (thrown) {
      warnListenerThrew(thrown, this.#name, event);
    }
  }

  #applyShare(share: number | undefined): void {
    if (share === undefined || !(share > 0) || this.#closed) return;
    const current = this.limiter.rate;
    if (Number.isFinite(current) && Math.abs(share - current) <= current * SHARE_TOLERANCE) return;
    this.limiter.setRate(share);
  }

  /**
   * Puts the local limiter's paced slots on the grid the members share (the store's clock), at
   * phase index / members: N members at the same rate send in turn, not in step.
   */
  #alignSlots(): void {
    if (this.#members < 2 || this.#closed) return;
    this.limiter[kAlignSlots](this.#index / this.#members, this.#serverOffset);
  }

  /**
   * The shared pause a heartbeat answered (`remaining` ms, in state `generation`). A pause this
   * member knows of from another generation than the one answered, that ends later than the
   * answer's and has not ended here (its local limiter is still paused), was lost with the state
   * (evicted, flushed: the pause's end lives in it): kept for the coordinator to share again, once
   * per generation, so a member that had not heard of it before the loss hears of it at its next
   * heartbeat; before, it never did, and sent before the server's Retry-After had passed.
   */
  #learnPause(now: number, generation: string, remaining: number): void {
    const known = this.#sharedPause;
    if (known !== undefined && known.until <= now) this.#sharedPause = undefined;
    else if (known !== undefined && known.generation !== generation) {
      const left = Math.min(known.until - now, this.#localPause(now));
      if (left > remaining + PAUSE_TOLERANCE_MS && !this.#closed) this.#lostPause = left;
      this.#sharedPause = { until: known.until, generation };
    }
    if (remaining > 0) this.#knowPause(now + remaining, generation);
  }

  /** A shared pause until `until` (this member's clock) is known, in state `generation`. */
  #knowPause(until: number, generation: string | undefined): void {
    const known = this.#sharedPause;
    if (known === undefined || until > known.until) this.#sharedPause = { until, generation };
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
    this.#emit('members', { budget: this.#name, from, to: members });
  }

  /**
   * Heard before, this member was not among the members when its heartbeat ran (the members lost
   * to an eviction or a flush, or it was dropped after a silence): the others join again one by
   * one, or count it again only at their next heartbeats. Or its heartbeat dropped a member
   * without a report (the reports evicted): judged by this member's `memberTimeout`, a member of
   * a slower heartbeat was dropped while it still sends (300 units/min of 600, taken at once by
   * the other: 900). Held as back from an outage (see
   * {@link #rejoined}), from the members known before: the first member heard after the members'
   * key was evicted was answered the whole rate while the others still sent their parts (three
   * members at 600 units/min: 1,000, then 1,100, for a heartbeat, after each eviction).
   */
  #rejoining(members: number): void {
    if (this.#rejoinUntil !== undefined || members >= this.#members) return;
    this.#membersBefore = this.#members;
    this.#rejoinUntil = this.#clock.now() + this.#longestTimeout + this.#rejoinMarginMs;
  }

  #recover(members: number): void {
    if (!this.#degraded) return;
    this.#degraded = false;
    this.#rejoinUntil = this.#clock.now() + this.#longestTimeoutBefore + this.#rejoinMarginMs;
    if (this.#events.listenerCount('recovered') === 0) {
      process.emitWarning(
        redactText(`adaptive-rate-limit: shared budget "${this.#name}" recovered; sharing resumed`),
        {
          code: BUDGET_RECOVERED_WARNING,
        },
      );
    }
    this.#emit('recovered', { budget: this.#name, members });
  }
}
