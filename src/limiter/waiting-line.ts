import { type Clock, MAX_TIMER_MS } from '../clock.js';
import type { RateLimitRejectedError, RejectionReason } from '../errors.js';
import { kWaitCancel } from '../internal.js';
import type { RateGate } from './bucket.js';
import { HeadNudges, type Nudge, type OneTimer, OWN_WAKES, wakeOwn } from './own-wakes.js';
import { WAKE_BATCH_MS } from './pacer.js';
import type { Pause } from './pause.js';
import type { AcquireOptions, Permit } from './types.js';
import {
  grantTo,
  type Resolve,
  refuseTo,
  type SeqHolder,
  type Settle,
  type Waiter,
  WaiterQueue,
} from './waiter-queue.js';

/**
 * How long past its deadline (ms) a head that can be granted is still served, under every clock:
 * a real timer fires up to a millisecond after its float target, and a head must not be refused
 * for that. A head that cannot be granted is refused at its deadline itself. In a batched wake, a
 * head whose turn came within this slack of its deadline is served too (see `#dueByDeadline`).
 */
const TIMER_SLACK_MS = 1;
/** The least step of the timer when the head is due now but rounding kept it from going. */
const MIN_STEP_MS = 1e-3;

/**
 * The resolve function of the promise being made, handed out by {@link capture}: one executor for
 * every waiter, so a queued call allocates no executor closure of its own.
 */
let captured: Resolve<Permit> | undefined;
const capture = (resolve: Resolve<Permit>): void => {
  captured = resolve;
};

/**
 * Where waiters wake the line by timers of their own requests' (`OWN_WAKES`), a waiter told by
 * calls (the undici interceptor's request) is woken as one told by its promise is, which needs a
 * promise that settles as it leaves: `told` wrapped to settle it. A Worker's bundle of this
 * package (the `workerd` condition) holds no interceptor, but one made without that condition
 * does, and a waiter with no timer of its own there waits on timers of other requests', which end
 * with them (workerd cancels such a request as hung): it costs a promise a waiter only there.
 */
function toldAndLeaving(told: Waiter<Permit>): [Waiter<Permit>, Promise<void>] {
  let left!: () => void;
  const leaving = new Promise<void>((resolve) => {
    left = resolve;
  });
  const settle: Waiter<Permit> = {
    granted(permit) {
      left();
      told.granted(permit);
    },
    refused(error) {
      left();
      told.refused(error);
    },
  };
  return [settle, leaving];
}

/** What cancels a queued waiter of {@link WaitCancel}: its line. */
export interface CancellableLine {
  /** Takes waiter `seq` out, if it still waits, as an abort of its signal would. */
  cancel(seq: number, reason: unknown): void;
}

/**
 * @internal How an adapter cancels a queued acquire without an `AbortSignal` (a controller and
 * its signal per request cost about 0.7 KiB of heap while it waits), and may be told by calls
 * instead of a promise. Given to `AdaptiveRateLimiter.acquire` under {@link kWaitCancel} in its
 * options (instead of a signal), it is told where the waiter stands when the acquire is queued;
 * `waitingIn.cancel(waitSeq, reason)` then takes it out as an abort of its signal would: its
 * units go back and it is refused with `reason`. The line keeps `waitSeq` right while the waiter
 * waits (its queue may number it again) and lets go of `waitingIn` when it leaves, so a cancel
 * after that does nothing. Read `waitSeq` when cancelling, never keep a copy: once the queue
 * numbered its waiters again, an old number may name another waiter. An acquire granted at once
 * leaves it as it was.
 *
 * With `granted` and `refused`, a queued waiter is told by these calls (made as the line serves,
 * expires, cancels or closes it out, in its call stack) instead of by its promise: the acquire
 * then returns {@link QUEUED}, which never settles, and the waiter holds nothing but its place in
 * the line (in a Cloudflare Worker also a promise, for its own wakes: see `toldAndLeaving`). An
 * acquire that is not queued (granted or refused at once) returns its promise as always.
 */
export interface WaitCancel extends Partial<Waiter<Permit>> {
  waitingIn: CancellableLine | undefined;
  waitSeq: number;
}

/** @internal What an acquire queued with a {@link WaitCancel} that has `granted` returns: it never settles. */
export const QUEUED: Promise<Permit> = new Promise<Permit>(() => {});

/** @internal Acquire options that may carry a {@link WaitCancel}. */
export interface CancellableAcquireOptions extends AcquireOptions {
  readonly [kWaitCancel]?: WaitCancel | undefined;
}

/**
 * For a waiter the limiter's other budgets listen to by its signal: a controller whose signal is
 * aborted by `cancel`.
 */
export function signalFor(cancel: WaitCancel): AbortSignal {
  const controller = new AbortController();
  cancel.waitingIn = { cancel: (_seq, reason) => controller.abort(reason) };
  cancel.waitSeq = 0;
  return controller.signal;
}

/** What a {@link WaitingLine} asks of its limiter. Times are ms on the limiter's clock. */
export interface LineOwner {
  /** The longest wait (ms) the options give now: the rejection of an expired waiter names it. */
  maxWait(): number;
  /** Whether `units` may be granted at `now`: no pause, and the bucket has them. */
  canGrant(units: number, now: number): boolean;
  /**
   * Until when (ms) `units` are held back at `now` by something an answer frees: `Infinity` when
   * only an answer does (the cold start's cap: no timer for them), a fixed window's reset when
   * its credit is used up (a timer then), `-Infinity` when nothing holds them.
   */
  heldUntil(units: number, now: number): number;
  /** Grants `units` at `now` to a waiter queued at `since`. */
  grant(units: number, now: number, since: number): Permit;
  /**
   * The error that refuses `units`; tells the listeners (`rejected`). The line refuses its head,
   * or every waiter in order (closed), or, `behind` the head, a waiter whose deadline came first:
   * `behind` is then what {@link WaitingLine.enqueue} was given as its `tag`.
   */
  rejection(
    reason: RejectionReason,
    units: number,
    detail: string,
    waitMs?: number,
    behind?: { tag: unknown },
  ): RateLimitRejectedError;
  /** A pause ended (the `resumed` event). */
  resumed(): void;
  /**
   * A waiter of `units`, queued `waited` ms, was aborted or cancelled with `reason` (the
   * `canceled` event; a refusal of the adapter's close, `rejected`).
   */
  canceled(units: number, waited: number, reason: unknown): void;
  /** A waiter given `tag` left as it was queued (its signal could not be listened to). */
  notQueued(tag: unknown): void;
}

/**
 * The waiters of a limiter, first in first out, and the one timer that wakes it: for the head's
 * turn, the head's deadline, or the end of a pause. A waiter that is served, expires, is aborted
 * (it gives its units back) or is closed out is settled once and forgets its signal. The timer
 * keeps the process alive only while someone waits, and none is armed when there is nothing to
 * wait for.
 */
export class WaitingLine implements CancellableLine {
  readonly #clock: Clock;
  readonly #bucket: RateGate;
  readonly #pause: Pause;
  readonly #owner: LineOwner;
  readonly #queue = new WaiterQueue<Permit>(this);
  /** Every waiter's abort: cancels it by its number then (the queue may have renumbered it). */
  readonly #onAbort = (seq: number, reason: unknown): void => this.cancel(seq, reason);
  #queuedUnits = 0;
  #timer: unknown;
  #timerAt = Number.POSITIVE_INFINITY;
  #timerKeepsAlive = false;
  /**
   * The head's turn (ms) the armed timer was put off from to serve several slots at once (see
   * `Pacer.wakeAt`; to the head's deadline if that comes sooner), kept until the next timer is
   * armed, so the drain of that wake knows it; `-Infinity` when the timer wakes by the head's
   * turn (at it, at a deadline or a pause's end before it) or for nobody.
   */
  #batchFrom = Number.NEGATIVE_INFINITY;
  #onTimerBound: (() => void) | undefined;
  /** The armed timer's mark where waiters wake the line too (`OWN_WAKES`): a timer left behind does nothing. */
  #timerMark: object | undefined;
  #oneTimer: OneTimer | undefined;
  /** Each waiter's nudge, by what holds its number (`OWN_WAKES`, see {@link wakeOwn}). */
  #nudges: WeakMap<SeqHolder, Nudge> | undefined;
  #headNudges: HeadNudges | undefined;
  /**
   * Units queued since the line was last empty (`OWN_WAKES`): less those still queued, the units
   * that left since, so a waiter's wake knows the least that can still be ahead of it.
   */
  #unitsIn = 0;
  /** The most units of one waiter queued since the line was last empty (`OWN_WAKES`). */
  #mostIn = 0;
  #closed = false;
  /** A drain is running (see {@link kick}). */
  #draining = false;
  /** A kick came during the drain: it drains once more. */
  #drainAgain = false;

  constructor(clock: Clock, bucket: RateGate, pause: Pause, owner: LineOwner) {
    this.#clock = clock;
    this.#bucket = bucket;
    this.#pause = pause;
    this.#owner = owner;
  }

  /** Live waiters. */
  get size(): number {
    return this.#queue.size;
  }

  /** Units of every live waiter. */
  get queuedUnits(): number {
    return this.#queuedUnits;
  }

  /** Units of the head, the first live waiter; 0 when nobody waits. */
  get headUnits(): number {
    const head = this.#queue.first();
    return head === -1 ? 0 : this.#queue.units(head);
  }

  /**
   * Queues `units` from `now` until `deadline` (ms); an abort of `signal`, or `cancel` (see
   * {@link WaitCancel}), takes them out again. `tag`: what the owner is told of the waiter if it
   * is refused from behind the head (see {@link LineOwner.rejection}).
   */
  enqueue(
    units: number,
    now: number,
    deadline: number,
    signal: AbortSignal | undefined,
    cancel?: WaitCancel | undefined,
    tag?: unknown,
  ): Promise<Permit> {
    let promise = QUEUED;
    let settle: Settle<Permit>;
    /** Settles as a waiter told by calls leaves (`OWN_WAKES`): its own wakes end then. */
    let leaving: Promise<void> | undefined;
    if (cancel?.granted !== undefined) {
      settle = cancel as Waiter<Permit>;
      if (OWN_WAKES) [settle, leaving] = toldAndLeaving(settle);
    } else {
      promise = new Promise<Permit>(capture);
      settle = captured!;
      captured = undefined;
    }
    const seq = this.#queue.push(units, now, deadline, settle);
    // As in an executor: what throws from here on rejects the promise.
    let counted = false;
    try {
      if (signal) this.#queue.watch(seq, signal, this.#onAbort);
      if (cancel !== undefined) {
        cancel.waitingIn = this;
        this.#queue.hold(seq, cancel);
      }
      if (tag !== undefined) this.#queue.tag(seq, tag);
      this.#queuedUnits += units;
      counted = true;
      // The head's turn and deadline arm the timer, and the deadline of a waiter behind it that
      // comes sooner than one before it (a retry with less of its maxWait left).
      if (this.#queue.size === 1 || deadline < this.#timerAt) this.arm(now);
      if (OWN_WAKES) {
        // The line was empty: counted in from here.
        if (this.#queue.size === 1) {
          this.#unitsIn = this.#queuedUnits - units;
          this.#mostIn = 0;
        }
        const before = this.#unitsIn;
        this.#unitsIn += units;
        this.#mostIn = Math.max(this.#mostIn, units);
        this.#wakeOwn(promise === QUEUED ? leaving! : promise, seq, units, before, deadline, cancel);
      }
    } catch (error) {
      // Out of the line again (a signal whose addEventListener throws): left there, it held the
      // head with no timer, and every later acquire waited for ever.
      if (this.#queue.alive(seq)) {
        this.#queue.remove(seq);
        if (counted) this.#queuedUnits -= units;
      }
      if (tag !== undefined) this.#owner.notQueued(tag);
      refuseTo(settle, error);
    }
    return promise;
  }

  /** Serves whoever may go now, then arms the timer for the rest. */
  kick(now: number): void {
    // A kick from inside the drain (an announced quota's reset passing in `canGrant`, a listener
    // of `acquired` that acquires or closes) drains again after it, not within it: nested, the
    // outer drain went on with a head the inner one had settled (a waiter settled twice, the
    // counts below 0, a TypeError out of the timer, every later acquire left waiting).
    if (this.#draining) {
      this.#drainAgain = true;
      return;
    }
    this.#draining = true;
    try {
      do {
        this.#drainAgain = false;
        this.#drain(now);
      } while (this.#drainAgain);
    } finally {
      this.#draining = false;
    }
    this.arm(now);
  }

  /**
   * Arms the one timer for the next event: the head's turn, its deadline, or a pause's end. Where
   * waiters wake the line too (`OWN_WAKES`), then nudges the head and the one behind it, each if
   * it is another or the timer moved (see {@link wakeOwn}).
   */
  arm(now: number): void {
    this.#armTimer(now);
    if (OWN_WAKES && !this.#closed) {
      const head = this.#queue.first();
      const holder = head === -1 ? undefined : this.#queue.holderOf(head);
      const nudge = holder === undefined ? undefined : this.#nudges?.get(holder);
      const next = head === -1 ? -1 : this.#queue.next(head);
      const second = next === -1 ? undefined : this.#queue.holderOf(next);
      const nudgeSecond = second === undefined ? undefined : this.#nudges?.get(second);
      this.#headNudges ??= new HeadNudges();
      this.#headNudges.tell(holder, nudge, this.#timerAt, second, nudgeSecond);
    }
  }

  #armTimer(now: number): void {
    if (this.#closed) return;
    let at = this.#pause.resumePending ? this.#pause.until : Number.POSITIVE_INFINITY;
    let batchFrom = Number.NEGATIVE_INFINITY;
    const queue = this.#queue;
    const head = queue.first();
    if (head !== -1) {
      at = Math.min(at, queue.deadline(head));
      const early = queue.earlyBehind(head);
      if (early !== -1) at = Math.min(at, queue.deadline(early));
      const units = queue.units(head);
      const held = this.#owner.heldUntil(units, now);
      if (held !== Number.POSITIVE_INFINITY) {
        const bucket = this.#bucket;
        const ready = bucket.readyAt(units, Math.max(now, this.#pause.until, held));
        const wake = bucket.wakeAt === undefined ? ready : bucket.wakeAt(units, ready, this.#queuedUnits);
        // Put off past the head's turn (to the wake, or to the head's deadline if sooner).
        if (wake > ready && at > ready) batchFrom = ready;
        at = Math.min(at, wake);
      }
    }
    if (at === Number.POSITIVE_INFINITY) {
      // Nothing to wait for (the last waiter left): no timer when idle.
      if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#timerAt = Number.POSITIVE_INFINITY;
      this.#batchFrom = Number.NEGATIVE_INFINITY;
      return;
    }
    // The head could not go now (drain ran first): float rounding at large clock values may put
    // its turn at `now`, so step at least a microsecond to make progress.
    if (at <= now) at = now + MIN_STEP_MS;
    // A waiter keeps the process alive until it is served: an exit must not drop it silently.
    const keepAlive = head !== -1;
    if (this.#timer !== undefined) {
      // Kept when it is due in time and keeps the process alive exactly when a waiter does: the
      // timer of a waiter that left (aborted during a pause) is made again without holding the
      // process open (an idle limiter never does).
      if (this.#timerAt <= at && this.#timerKeepsAlive === keepAlive) return;
      this.#clock.clearTimeout(this.#timer);
    }
    this.#timerAt = at;
    this.#timerKeepsAlive = keepAlive;
    this.#batchFrom = batchFrom;
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, at - now));
    this.#onTimerBound ??= () => this.#onTimer();
    let onTimer = this.#onTimerBound;
    if (OWN_WAKES) {
      const mark = {};
      this.#timerMark = mark;
      onTimer = () => {
        if (this.#timerMark === mark) this.#onTimer();
      };
    }
    this.#timer = this.#clock.setTimeout(onTimer, delay, keepAlive);
  }

  /**
   * Wakes waiter `seq` of `units` by timers of its own request's (`OWN_WAKES`, see
   * {@link wakeOwn}): one at the turn of the waiter ahead of it as the bucket predicts it now
   * (the units that can still be ahead of it: queued before it, `before`, less all that left
   * since; the waiter ahead taken as large as the largest queued since the line was last empty,
   * which goes soonest: a bucket serves a request larger than itself when full, in debt), at its
   * own turn once none can be ahead, and while it is the head or the one behind it, one at the
   * line's timer. Not at its own turn as if a waiter of its own size ahead had left: behind a
   * larger waiter whose request ended (it holds no timer), that came after the larger one's turn,
   * which the line then served late, and every waiter behind it as late (a head of 3 units at 60
   * units/min: 0.5 s each).
   */
  #wakeOwn(
    promise: Promise<unknown>,
    seq: number,
    units: number,
    before: number,
    deadline: number,
    cancel: WaitCancel | undefined,
  ): void {
    // What names it while it waits (the queue may number it again) and lets go once it left.
    let holder: SeqHolder | undefined = cancel;
    if (holder === undefined) {
      holder = { waitSeq: seq, waitingIn: this };
      this.#queue.hold(seq, holder);
    }
    const nudge = wakeOwn(
      this.#clock,
      promise,
      this.#asOneTimer(),
      deadline,
      () => {
        if (holder.waitingIn !== this) return false;
        const head = this.#queue.first();
        return head === holder.waitSeq || this.#queue.next(head) === holder.waitSeq;
      },
      (now) => {
        if (holder.waitingIn !== this) return undefined;
        const ahead = Math.max(0, before - (this.#unitsIn - this.#queuedUnits));
        const pause = this.#pause.left(now);
        if (ahead === 0) return now + this.#bucket.predictWait(units, 0, pause, now);
        const next = Math.min(ahead, this.#mostIn);
        return now + this.#bucket.predictWait(next, ahead - next, pause, now);
      },
    );
    this.#nudges ??= new WeakMap();
    this.#nudges.set(holder, nudge);
  }

  /** The line as its waiters' own wakes see it (`OWN_WAKES`), made at the first. */
  #asOneTimer(): OneTimer {
    const line = this;
    this.#oneTimer ??= {
      get timerAt() {
        return line.#timerAt;
      },
      get closed() {
        return line.#closed;
      },
      fire() {
        line.#timerMark = undefined;
        line.#onTimer();
      },
    };
    return this.#oneTimer;
  }

  /** Clears the timer and rejects every waiter (reason `closed`); the line arms no timer again. */
  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    // Every waiter out first, then each rejected: a listener of `rejected` sees an empty line.
    const queue = this.#queue;
    const waiting: [units: number, settle: Settle<Permit>][] = [];
    for (let seq = queue.first(); seq !== -1; seq = queue.first()) {
      waiting.push([queue.units(seq), queue.resolver(seq)]);
      queue.remove(seq);
    }
    for (const [units, settle] of waiting) {
      this.#queuedUnits -= units;
      const detail = `closed with ${units} units waiting`;
      refuseTo(settle, this.#owner.rejection('closed', units, detail));
    }
    this.#queuedUnits = 0;
  }

  #onTimer(): void {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = this.#clock.now();
    if (this.#pause.resumePending && !this.#pause.active(now)) {
      this.#pause.resumePending = false;
      this.#owner.resumed();
    }
    this.kick(now);
  }

  #drain(now: number): void {
    const queue = this.#queue;
    for (let head = queue.first(); head !== -1; head = queue.first()) {
      const units = queue.units(head);
      const deadline = queue.deadline(head);
      if (this.#owner.canGrant(units, now)) {
        if (now > deadline + TIMER_SLACK_MS && !this.#dueByDeadline(units, deadline, now)) {
          this.#expire(head);
          continue;
        }
        const settle = queue.resolver(head);
        const enqueuedAt = queue.enqueuedAt(head);
        queue.remove(head);
        this.#queuedUnits -= units;
        grantTo(settle, this.#owner.grant(units, now, enqueuedAt));
      } else if (now >= deadline) {
        this.#expire(head);
      } else {
        break;
      }
    }
    // Behind the head that waits on, a waiter whose deadline came first: it cannot go before it.
    for (let early = queue.earlyBehind(); early !== -1; early = queue.earlyBehind()) {
      if (now < queue.deadline(early)) break;
      this.#expire(early, true);
    }
  }

  /**
   * Whether a head past its deadline is late only because the line's timer woke for several
   * slots at once (see `Pacer.wakeAt`; this drain is that wake's, or comes while it is put off):
   * its turn came by its deadline, at most {@link WAKE_BATCH_MS} ago. Its turn is its slot, but
   * not before the turn the wake was put off from, nor before a pause's end (a slot in the
   * pacer's catch-up is not a turn while a pause, or another budget, held the line). It is
   * served, as it would have been had the timer woken at its turn.
   */
  #dueByDeadline(units: number, deadline: number, now: number): boolean {
    const from = this.#batchFrom;
    if (from === Number.NEGATIVE_INFINITY || now > deadline + TIMER_SLACK_MS + WAKE_BATCH_MS) return false;
    const turn = this.#bucket.readyAt(units, Math.max(from, this.#pause.until));
    return turn <= deadline + TIMER_SLACK_MS;
  }

  /** Rejects waiter `seq`, the head or (`behind`) one behind it: its deadline passed. */
  #expire(seq: number, behind = false): void {
    const queue = this.#queue;
    const units = queue.units(seq);
    const enqueuedAt = queue.enqueuedAt(seq);
    const given = Math.round(queue.deadline(seq) - enqueuedAt);
    const settle = queue.resolver(seq);
    const tag = behind ? { tag: queue.tagOf(seq) } : undefined;
    queue.remove(seq);
    this.#queuedUnits -= units;
    const now = this.#clock.now();
    const waited = now - enqueuedAt;
    // The wait it was given: maxWait, less what its request's earlier attempts waited (or a
    // maxWait changed since it was queued).
    const maxWait = this.#owner.maxWait();
    const wait = Math.round(waited);
    const detail =
      given === Math.round(maxWait)
        ? `waited ${wait} ms, maxWait is ${maxWait} ms`
        : `waited ${wait} ms of the ${given} ms it was given, maxWait is ${maxWait} ms`;
    // The wait left is at least its own turn (behind the head: the head's too).
    const head = behind ? queue.first() : -1;
    const ahead = head === -1 ? 0 : queue.units(head);
    const left = this.#bucket.predictWait(units, ahead, this.#pause.left(now), now);
    refuseTo(settle, this.#owner.rejection('max-wait', units, detail, left, tag));
  }

  /** Takes waiter `seq` out (aborted or cancelled), if it still waits: its units go back, it rejects with `reason`. */
  cancel(seq: number, reason: unknown): void {
    const queue = this.#queue;
    if (!queue.alive(seq)) return;
    const units = queue.units(seq);
    const settle = queue.resolver(seq);
    const now = this.#clock.now();
    const waited = now - queue.enqueuedAt(seq);
    queue.remove(seq);
    this.#queuedUnits -= units;
    refuseTo(settle, reason);
    this.#owner.canceled(units, waited, reason);
    // The next in line may be served sooner now.
    this.kick(now);
  }
}
