import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Clock } from '../clock.js';
import { kLastAnswerAt } from '../internal.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import { throttledByQuota } from '../limiter/permit.js';
import { drawFrom } from '../limiter/rate-book.js';
import type { AnnouncedQuota, Permit } from '../limiter/types.js';
import { isThenable } from '../thenable.js';
import type { CutPlan } from './budget-controller.js';
import type { MemberState, SharedState } from './member-state.js';
import type { ResolvedSharedOptions } from './options.js';
import type { Era } from './permit.js';
import type { Answer, BudgetStore } from './store.js';

/** Members made in this process so far: the last part of a member's id. */
let membersMade = 0;

/** Tries of a cut computed from books that another member's change made stale. */
const CUT_TRIES = 3;

/**
 * The budget's first cut (leaving "unlimited") waits for a heartbeat sent at least this many
 * heartbeat intervals after the throttle: every other member has reported since (each beats once
 * an interval, plus a round trip), so the members' accepted sum is read fresh, not up to a
 * heartbeat old.
 */
const FIRST_CUT_WAIT = 1.25;
/**
 * ... when the pause taken (the throttle's Retry-After, capped by `maxPause`) lasts at least this many
 * intervals (the cut lands within it).
 */
const FIRST_CUT_MIN_PAUSE = 3;

/**
 * A 429's `Retry-After` of at most this (ms), once the budget has a rate, pauses only the member
 * it answered: the pause is not shared. One second, the shortest whole-second `Retry-After`, is
 * the answer of a server whose room comes back as it refills (nginx's `limit_req`, a token
 * bucket); the 429's cut takes the whole rate below what got through, so the other members'
 * part of it fits, and they hear of the cut within a heartbeat as of any cut (a 429 of their own
 * pauses them). Shared, that second cost the whole budget: on nginx at 3,000 a minute with three
 * members, 39 of its 50 answers after each 429 on average; not shared, 19. A longer `Retry-After` (a
 * window's end, an outage), one before the budget's first cut (which waits within the pause for
 * every member's report), and a failure's (a 503) pause every member.
 */
const OWN_PAUSE_MS = 1_000;

/**
 * The longest wait (ms) before a degraded member tries its heartbeat again while its silence is
 * within its memberTimeout: the default heartbeat. A member of a slower heartbeat tries this
 * often until Redis answers again or its timeout has passed.
 */
const DEGRADED_RETRY_MS = 250;

/**
 * While a pause of its own ({@link OWN_PAUSE_MS}) has at least this many heartbeat intervals left,
 * a member reports no demand: the others' shares, computed from the members' demands, take its
 * part of the rate for that second at their next heartbeat. The last such report is replaced by
 * a real one at the member's next heartbeat, and every other member reads that within one more
 * interval: so the others are back at their part before the paused member sends again, and the
 * members' rates never add up above the whole rate.
 */
const AWAY_MIN_INTERVALS = 2;

/**
 * Whether a member paused for a second of its own ({@link OWN_PAUSE_MS}) by the 429 that made the
 * cut `plan` gives its part of the rate to the others for that second ({@link AWAY_MIN_INTERVALS}):
 * only when that 429 cut the whole rate (the local cut rules allowed it) and the cut's rate is at
 * most the members' accepted rate over the cycle before it (the units accepted since the cut
 * before, over that time less its pauses). Over a cycle of many seconds a server's burst counts
 * once, so that reading is about the rate the server refills; the 3 s window a cut starts from
 * counts the burst in full. The others then send the whole rate, within the refill. Given after
 * every such 429, the simulator's model of the quota server (a token bucket holding 2 s, whose
 * cuts read its burst) drew 45 % more 429s: the others sent above its refill into an empty bucket.
 * A first cut (no cycle before it) gives nothing away.
 */
function givesAway(plan: CutPlan | undefined): boolean {
  const cycle = plan?.record.acceptedRateSincePrevious;
  return plan !== undefined && cycle !== undefined && plan.rate <= cycle;
}

/** A backlog of queued units counts as demand to be served within this many ms. */
const BACKLOG_MS = 1_000;

/**
 * A member with no answer for this long (ms) reports no measured demand, only its backlog. The
 * measured send rate moves only when an answer comes, so a member idle for an hour kept
 * reporting what it sent before and kept most of the budget (95 %) while the one member sending
 * was refused. A minute: the gaps of a bursty sender (a batch of LLM calls every few seconds, a
 * job every 30 s) keep its demand; an idle member gives its part back within a minute.
 */
const IDLE_DEMAND_MS = 60_000;

/** What a {@link Coordinator} is made with. Rates are the whole budget's, units/min. */
export interface CoordinatorInit {
  readonly opts: ResolvedSharedOptions;
  /** `undefined`: none (unlimited until a throttle). */
  readonly initialRate: number | undefined;
  readonly minRate: number;
  /** `Infinity`: no maximum. */
  readonly maxRate: number;
  /** The limiter's `decreaseCooldown` and `maxPause`, ms: the store's cut and pause use them. */
  readonly cooldown: number;
  readonly maxPause: number;
  /** Opens the store. */
  readonly store: () => BudgetStore;
  /**
   * The limiter's `random` option when one was given: the member's id is drawn from it, so a
   * seeded run (the simulator's) gives the members the same ids, hence the same places and
   * phases, each time. `undefined`: a random UUID.
   */
  readonly random?: (() => number) | undefined;
}

/**
 * A member's coordination with the others through the store: the heartbeat (one script) on the
 * local limiter's clock, which registers the member, reports its demand and its controller's
 * proposed change; the cut and pause scripts a permit's throttle sends at once; and leaving. The
 * answers go to the {@link MemberState}: in the same call when the store answers synchronously
 * (memory), so on a virtual clock everything happens at its instant; a failure marks it degraded.
 */
export class Coordinator {
  /** This member's id in the store. */
  readonly id: string;
  /** The store's opener, called at {@link start}. */
  readonly #openStore: () => BudgetStore;
  #store: BudgetStore | undefined;
  /** Resolves after the first heartbeat, answered or failed. */
  readonly ready: Promise<void>;

  readonly #member: MemberState;
  readonly #limiter: AdaptiveRateLimiter;
  readonly #opts: ResolvedSharedOptions;
  readonly #clock: Clock;
  /** Whole-budget rates for the store, units/min; `undefined`: none (unlimited, no maximum). */
  readonly #initial: number | undefined;
  readonly #min: number;
  readonly #max: number | undefined;
  readonly #cooldown: number;
  readonly #maxPause: number;

  #timer: unknown;
  #beat: Promise<void> | undefined;
  #closed = false;
  /** The close in progress or done (see {@link close}). */
  #closing: Promise<void> | undefined;
  #seq = 0;
  readonly #pending = new Set<Promise<unknown>>();
  #isReady = false;
  #resolveReady: () => void = () => {};
  /**
   * The budget's first cut, waiting for fresh reports: the throttled permit's era, when (member
   * clock), and when the throttle's Retry-After pause ends.
   */
  #firstCut:
    | { readonly sent: Era; readonly at: number; readonly until: number; readonly plan: CutPlan }
    | undefined;
  /** When (member clock) this member's own pause ({@link OWN_PAUSE_MS}) ends; 0: none taken. */
  #ownPauseUntil = 0;
  /** When (member clock) the store last answered a heartbeat of this member (or it started). */
  #heardAt: number;

  constructor(member: MemberState, init: CoordinatorInit) {
    this.#member = member;
    this.#limiter = member.limiter;
    this.#opts = init.opts;
    this.#clock = this.#limiter.clock;
    this.#heardAt = this.#clock.now();
    this.#initial = init.initialRate;
    this.#min = init.minRate;
    this.#max = Number.isFinite(init.maxRate) ? init.maxRate : undefined;
    this.#cooldown = init.cooldown;
    this.#maxPause = init.maxPause;

    const random = init.random;
    const suffix =
      random === undefined
        ? randomUUID().slice(0, 8)
        : Math.floor(drawFrom(random) * 2 ** 32)
            .toString(16)
            .padStart(8, '0');
    // The count keeps two members of one process apart when their draws are the same.
    this.id = `${hostname()}:${process.pid}:${suffix}:${++membersMade}`;
    this.#openStore = init.store;

    this.ready = new Promise((resolve) => {
      this.#resolveReady = () => {
        this.#isReady = true;
        resolve();
      };
    });
  }

  /** The store the budget shares its state through (opened now if it was not yet: {@link start}). */
  get store(): BudgetStore {
    if (this.#store === undefined) this.start();
    return this.#store as BudgetStore;
  }

  /** True once {@link start} opened the store. */
  get started(): boolean {
    return this.#store !== undefined;
  }

  /** What this member last learned from the store. */
  get state(): SharedState {
    return this.#member.state(this.#store?.roundTrips ?? 0);
  }

  /** True once the first heartbeat was answered or failed. */
  get isReady(): boolean {
    return this.#isReady;
  }

  /**
   * Opens the store and sends the first heartbeat; the next follow every `heartbeatInterval`.
   * Once only; not after {@link close}.
   */
  start(): void {
    if (this.#store !== undefined || this.#closed) return;
    this.#store = this.#openStore();
    // A lazy budget starts at its first use: its silence counts from there.
    this.#heardAt = this.#clock.now();
    this.#tick();
  }

  /**
   * Runs a heartbeat now (after the one in flight) and returns the state it learned. After
   * {@link close}, none is sent (it would register the member that left again): the last state.
   */
  async refresh(): Promise<SharedState> {
    while (this.#beat !== undefined) await this.#beat;
    if (this.#closed) return this.state;
    await this.#heartbeat();
    return this.state;
  }

  /** Waits for the cut and pause scripts sent so far. */
  async flush(): Promise<void> {
    await Promise.allSettled([...this.#pending]);
  }

  /**
   * Closes the local limiter, stops the heartbeat, leaves the budget, closes the store.
   * Idempotent: a second call (during the first too) returns the first one's promise, so that it
   * too resolves only once the store is closed.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    this.#member.close();
    // The local limiter first: an acquire waiting (for its units, or for a fail-closed budget's
    // first heartbeat, which the one in flight below settles) is rejected as closed, not granted
    // to a process that is leaving the budget.
    this.#limiter.close();
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#beat;
    await this.flush();
    const store = this.#store;
    if (store !== undefined) {
      if (!this.#member.degraded) {
        await Promise.resolve()
          .then(() => store.leave(this.id))
          .catch(() => undefined);
      }
      await store.close?.();
    } else this.#resolveReady(); // never opened: nobody waits for a first heartbeat
  }

  /**
   * A permit sent in `sent` was throttled: the local limiter cuts (its share of the budget's
   * cut, when its cut rules allow) and pauses for the Retry-After, then the store is asked for the
   * whole cut and, unless it is a short pause of a budget with a rate ({@link OWN_PAUSE_MS}), the
   * pause every member takes.
   */
  throttled(
    inner: Permit,
    sent: Era,
    askedMs: number | undefined,
    quota?: readonly AnnouncedQuota[],
    quotaWait = false,
  ): void {
    const hadRate = !this.#member.unlimited;
    this.#member.takeCut();
    if (quotaWait) throttledByQuota(inner, askedMs, quota);
    else inner.throttled(askedMs, quota);
    // A wait that is only an exhausted policy's reset: the pause the policy's shape gave the local
    // limiter (a fixed window: until the reset; a refilling bucket: one unit) is the one shared.
    const retryAfterMs = quotaWait ? this.#localPause() : askedMs;
    const cut = this.#member.takeCut();
    if (cut !== undefined) {
      const interval = this.#opts.heartbeatInterval;
      // The pause taken: the server's Retry-After, capped by `maxPause`.
      const pauseMs = retryAfterMs === undefined ? 0 : Math.min(retryAfterMs, this.#maxPause);
      if (this.#member.unlimited && !this.#member.degraded && pauseMs >= FIRST_CUT_MIN_PAUSE * interval) {
        // Leaving "unlimited" while every member pauses: cut from fresh reports (#firstCutNow);
        // the local limiter took its part of this estimate meanwhile.
        const now = this.#clock.now();
        this.#firstCut ??= { sent, at: now, until: now + pauseMs, plan: cut };
      } else this.#track(this.#cut(sent, cut, CUT_TRIES));
    }
    // The member answered waits (its local limiter paused above); the others too, unless the budget
    // has a rate and the pause is short (OWN_PAUSE_MS). Then, when this 429's cut keeps the whole
    // rate within what the server refills (givesAway), they take its part for the pause (#away),
    // told by a heartbeat sent now.
    if (retryAfterMs === undefined || !(retryAfterMs > 0)) return;
    if (!(hadRate && retryAfterMs <= OWN_PAUSE_MS)) {
      this.#track(this.#pause(retryAfterMs));
      return;
    }
    if (!givesAway(cut)) return;
    this.#ownPauseUntil = Math.max(this.#ownPauseUntil, this.#clock.now() + retryAfterMs);
    if (this.#away(this.#clock.now()) && this.#store !== undefined && !this.#closed)
      this.#track(this.#heartbeat());
  }

  /** ms left of the local limiter's pause; `undefined` when it is not paused. */
  #localPause(): number | undefined {
    const until = this.#limiter.snapshot().pausedUntil;
    const left = until === undefined ? 0 : until - this.#clock.now();
    return left > 0 ? left : undefined;
  }

  /**
   * Whether a heartbeat sent at `now` reports no demand: this member's own pause has at least
   * {@link AWAY_MIN_INTERVALS} heartbeat intervals left, and its local limiter is still paused.
   */
  #away(now: number): boolean {
    if (this.#ownPauseUntil - now < AWAY_MIN_INTERVALS * this.#opts.heartbeatInterval) return false;
    const paused = this.#limiter.snapshot().pausedUntil;
    return paused !== undefined && paused > now;
  }

  /**
   * After the heartbeat sent at `sentAt` was applied: the budget's first cut, when it waited for
   * this heartbeat (sent long enough after the throttle that every member reported since), is
   * computed again from its answer and asked of the store. Dropped when the budget left
   * "unlimited" meanwhile (another member's cut landed first). A heartbeat sent after the pause
   * ended (the store was slow or down meanwhile) reads sends made since, not the burst before the
   * throttle: the cut is computed from it as any other, not from half the sum.
   */
  #firstCutNow(sentAt: number): void {
    const waiting = this.#firstCut;
    if (waiting === undefined || sentAt - waiting.at < FIRST_CUT_WAIT * this.#opts.heartbeatInterval) return;
    this.#firstCut = undefined;
    if (this.#closed || this.#member.degraded || !this.#member.unlimited) return;
    const plan = this.#member.freshFirstCut(waiting.plan, sentAt < waiting.until);
    this.#track(this.#cut(waiting.sent, plan, CUT_TRIES));
  }

  /** A permit failed: shares its Retry-After pause. */
  failed(inner: Permit, retryAfterMs: number | undefined, quota?: readonly AnnouncedQuota[]): void {
    inner.failed(retryAfterMs, quota);
    if (retryAfterMs !== undefined && retryAfterMs > 0) this.#track(this.#pause(retryAfterMs));
  }

  #tick(): void {
    this.#timer = undefined;
    if (this.#closed) return;
    const beat = this.#heartbeat();
    if (beat === undefined) this.#arm();
    else void beat.finally(() => this.#arm());
  }

  #arm(): void {
    if (this.#closed || this.#timer !== undefined) return;
    // Degraded (its last heartbeat failed): tried again within DEGRADED_RETRY_MS while its
    // silence is within its memberTimeout, so that a member of a slow heartbeat is heard soon
    // after Redis is back, before the others drop it and take its part while it still sends.
    // Past that, at its heartbeat again: a store that keeps failing (a script error, a Redis out
    // of memory) gets a bounded burst of tries per outage, not four a second for ever.
    const o = this.#opts;
    const silent = this.#clock.now() - this.#heardAt;
    const soon = this.#member.degraded && silent < o.memberTimeout;
    const wait = soon ? Math.min(o.heartbeatInterval, DEGRADED_RETRY_MS) : o.heartbeatInterval;
    this.#timer = this.#clock.setTimeout(() => this.#tick(), wait);
  }

  /** Sends a heartbeat (or joins the one in flight); `undefined` when it was applied at once. */
  #heartbeat(): Promise<void> | undefined {
    if (this.#beat !== undefined) return this.#beat;
    const pending = this.#sendHeartbeat();
    if (pending === undefined) {
      this.#resolveReady();
      return undefined;
    }
    const beat = pending.finally(() => {
      this.#beat = undefined;
      this.#resolveReady();
    });
    this.#beat = beat;
    return beat;
  }

  #sendHeartbeat(): Promise<void> | undefined {
    const member = this.#member;
    const snap = this.#limiter.snapshot();
    const sentAt = this.#clock.now();
    // Away (paused for a second of its own): no demand, so the others take its part meanwhile.
    const away = this.#away(sentAt);
    const lastAnswerAt = this.#limiter[kLastAnswerAt]();
    const idle = lastAnswerAt === undefined || sentAt - lastAnswerAt > IDLE_DEMAND_MS;
    const measuredDemand = idle ? 0 : (snap.measuredRate ?? 0);
    const demand = away ? 0 : measuredDemand + (snap.queuedUnits * 60_000) / BACKLOG_MS;
    const accepted = member.acceptedRate();
    const o = this.#opts;
    const seq = ++this.#seq;
    return this.#ask(
      () =>
        this.store.heartbeat({
          id: this.id,
          demand,
          accepted,
          measured: snap.measuredRate ?? 0,
          acceptedUnits: member.takeAcceptedUnits(),
          waited: member.takeWaited(snap.queued > 0),
          proposal: member.proposal(),
          memberTimeout: o.memberTimeout,
          floorFraction: o.floorFraction,
          // A state made again without a rate (lost: evicted, flushed) starts from this member's
          // initial rate, or, without one, the whole rate it last knew: not from nothing
          // (unlimited), which the members with an initial rate never were. Not while degraded:
          // the rate it knew is from before its outage, while the others may have cut since (a
          // member back from a partition, heard first after a loss, made the state again at the
          // 6,000 it knew where the others had cut to 1,441); it keeps its share meanwhile
          // (member-state.ts), and the next heartbeat of a member heard since offers its rate.
          initialRate: this.#initial ?? (member.degraded ? undefined : member.lastRate),
          minRate: this.#min,
          maxRate: this.#max,
          ttl: o.stateTtl,
          maxPause: this.#maxPause,
        }),
      (reply) => {
        member.applyHeartbeat(seq, reply, accepted, sentAt, away);
        // Heard once its reply was read (a malformed one throws above: the store failing).
        this.#heardAt = Math.max(this.#heardAt, sentAt);
        this.#firstCutNow(sentAt);
        // A shared pause lost with the state (member-state.ts, #learnPause): shared again.
        const lostPause = member.takeLostPause();
        if (lostPause !== undefined && !this.#closed) this.#track(this.#pause(lostPause));
      },
    );
  }

  /**
   * Asks the store for the cut `plan`, sent in `sent`; when the books it was computed from are
   * stale (another member changed them), computes it again from the books answered, `tries` in all.
   */
  #cut(sent: Era, plan: CutPlan, tries: number): Promise<void> | undefined {
    if (this.#member.degraded) return undefined; // the local cut stands
    const o = this.#opts;
    const seq = ++this.#seq;
    let again: Promise<void> | undefined;
    const asked = this.#ask(
      () =>
        this.store.cut({
          sentEpoch: sent.epoch,
          generation: sent.generation,
          from: plan.from,
          rate: plan.rate,
          rateBefore: plan.rateBefore,
          measured: plan.measured,
          record: plan.record,
          random: plan.random,
          cooldown: this.#cooldown,
          minRate: this.#min,
          maxRate: this.#max,
          ttl: o.stateTtl,
          maxPause: this.#maxPause,
        }),
      (reply) => {
        if (reply.stale && tries > 1 && !this.#closed) {
          again = this.#cut(sent, this.#member.recut(plan, reply), tries - 1);
        } else this.#member.applyCut(seq, reply);
      },
    );
    return asked === undefined ? again : asked.then(() => again);
  }

  #pause(ms: number): Promise<void> | undefined {
    if (this.#member.degraded) return undefined;
    const maxPause = this.#maxPause;
    const request = { ms: Math.min(ms, maxPause), ttl: this.#opts.stateTtl, maxPause };
    this.#member.sharing(request.ms);
    return this.#ask(
      () => this.store.pause(request),
      () => {},
    );
  }

  /**
   * Asks the store and applies its answer: in this call when the store answers synchronously
   * (then returns `undefined`), else when the promise settles. A failure marks the budget degraded.
   */
  #ask<T>(call: () => Answer<T>, apply: (answer: T) => void): Promise<void> | undefined {
    const fail = (error: unknown) => this.#member.fail(error);
    let answer: Answer<T>;
    try {
      answer = call();
    } catch (error) {
      fail(error);
      return undefined;
    }
    if (isThenable<T>(answer)) return Promise.resolve(answer).then(apply).catch(fail);
    try {
      apply(answer);
    } catch (error) {
      fail(error);
    }
    return undefined;
  }

  #track(promise: Promise<void> | undefined): void {
    if (promise === undefined) return;
    this.#pending.add(promise);
    void promise.finally(() => this.#pending.delete(promise));
  }
}
