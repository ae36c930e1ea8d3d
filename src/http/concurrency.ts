import PQueue from 'p-queue';
import type { Clock } from '../clock.js';
import type { RateLimitRejectedError } from '../errors.js';
import { kHeldDeadlines, kWaitBound } from '../internal.js';
import { untilAborted } from '../limiter/abortable.js';
import type { RateLimiter, WaitBound } from '../limiter/types.js';
import type { CancellableLine } from '../limiter/waiting-line.js';

/**
 * How long a request may still wait for a slot, and how it is refused past that: the limiter's
 * `maxWait` less what the request waited already, on the limiter's clock (see `slotBound`).
 */
export interface SlotBound {
  readonly clock: Clock;
  /** ms the request may wait for the slot (equal is allowed). */
  readonly leftMs: number;
  /** The error a request still waiting after `leftMs` is refused with. */
  refuse(): unknown;
  /**
   * Counts the request among the limiter's waiting requests while it waits for its slot: the
   * function that stops counting it, or the limiter's refusal (`queue-full`) when those already
   * waiting reach its `queueLimit`. Absent: the limiter bounds no line.
   */
  wait?(): (() => void) | RateLimitRejectedError;
  /** The limiter's refusal once it is closed (reason `closed`), else `undefined` (see `WaitBound.closed`). */
  closed?(): RateLimitRejectedError | undefined;
  /** Calls `listener` when the limiter closes (see `WaitBound.onClose`). */
  onClose?(listener: () => void): void;
}

/**
 * The bound of a request's wait for a slot of `limiter`'s gate: what is left of the limiter's
 * `maxWait` (`timeoutDuration`) after `waitedMs` of earlier waits, and its `queueLimit` (the
 * request counts among its waiting requests); `undefined` for a limiter that states none (one of
 * your own). A promise of it while the limiter cannot tell it yet (a shared budget whose code
 * still loads): see {@link ConcurrencyGate.enter}.
 */
export function slotBound(
  limiter: RateLimiter,
  units: number,
  waitedMs: number,
): SlotBound | Promise<SlotBound | undefined> | undefined {
  const bound = (limiter as { [kWaitBound]?: () => WaitBound | Promise<WaitBound | undefined> | undefined })[
    kWaitBound
  ]?.();
  if (bound === undefined) return undefined;
  if (bound instanceof Promise) return bound.then((known) => known && slotOf(known, units, waitedMs));
  return slotOf(bound, units, waitedMs);
}

/**
 * Whether `limiter` would refuse an acquire of `units` now, after `waitedMs` of earlier waits, at
 * once (see `WaitBound.refusesNow`); `false` for a limiter that does not say, or cannot tell yet.
 */
export function refusedAtOnce(limiter: RateLimiter, units: number, waitedMs: number): boolean {
  const bound = (limiter as { [kWaitBound]?: () => WaitBound | Promise<WaitBound | undefined> | undefined })[
    kWaitBound
  ]?.();
  if (bound === undefined || bound instanceof Promise) return false;
  return bound.refusesNow?.(units, waitedMs) === true;
}

function slotOf(bound: WaitBound, units: number, waitedMs: number): SlotBound {
  const slot: {
    -readonly [K in keyof SlotBound]: SlotBound[K];
  } = {
    clock: bound.clock,
    leftMs: bound.maxWait - waitedMs,
    refuse: () => bound.refuse(units, 'maxConcurrent slot', waitedMs),
  };
  if (bound.wait !== undefined) slot.wait = () => bound.wait?.(units) ?? noop;
  if (bound.closed !== undefined) slot.closed = () => bound.closed?.(units);
  if (bound.onClose !== undefined) slot.onClose = (listener) => bound.onClose?.(listener);
  return slot;
}

/**
 * What cancels a wait for a slot instead of a signal (the fetch wrapper's waits behind an adaptive
 * limiter; see `LoopCancel`): once `abortReason` is set, {@link ConcurrencyGate.enter} rejects
 * with it at once; while the request waits, `waitingIn` is the gate's and cancels that wait.
 */
export interface SlotCancel {
  readonly abortReason: unknown;
  waitingIn: CancellableLine | undefined;
}

/** A slot taken: its release (once), and the ms waited for it on the bound's clock (0 without one). */
export interface HeldSlot {
  readonly release: () => void;
  readonly waitedMs: number;
}

/**
 * The cap on a limiter's requests in flight (`maxConcurrent`). A request takes a slot before it
 * is sent and gives it back when its response starts (not when the body ends: a body nobody reads
 * would hold its slot forever).
 *
 * While slots are free and nobody waits, a slot is a counter ({@link tryEnter}); only a request
 * that finds the cap reached waits, FIFO and abortable, in a p-queue. The queue starts a waiting
 * request when one of its own requests ends (p-queue's concurrency), or when a slot taken outside
 * it comes back: its concurrency is kept at the slots those leave free (paused at none).
 *
 * A waiter given a {@link SlotBound} waits as one of its limiter's waiting requests: it is
 * refused at once (the limiter's `queue-full`) when those already waiting, for a slot or in the
 * limiter's line, reach its `queueLimit` (the rule is the limiter's: {@link SlotBound.wait}). One
 * still waiting when its time is up (the limiter's `maxWait`) is refused with the bound's error
 * and leaves the queue, as the limiter refuses a waiter at its deadline; the others keep their
 * order. One timer per gate at most, for the earliest deadline of those waiting; none when nobody
 * waits. When its limiter closes, each request waiting with its bound is refused at once with the
 * limiter's `closed` refusal, as the limiter's line rejects its waiters; a request that comes to
 * a closed limiter's gate is refused at once (neither takes a slot nor is sent).
 *
 * A caller's abort after its request got its slot ends p-queue's task at once: the slot counts
 * free before the request's release. That lets no more than `max` requests be in flight: the
 * request's send is aborted by the same abort, synchronously (the interceptor's controller aborts
 * the wait's signal and then the attempt; fetch's signal tells p-queue and fetch in one dispatch
 * of its event), while p-queue starts the next waiter a microtask later at the earliest; an
 * attempt undici has not started yet is aborted when it starts, before a byte is written
 * (test/slot-queue-limit.test.ts tries it, through the interceptor and the fetch wrapper). A wait
 * cancelled through a {@link SlotCancel} lets go of it when the slot is given: an abort after
 * that frees the slot at the request's release only.
 */
export class ConcurrencyGate {
  /** Requests in flight at most. */
  readonly max: number;
  readonly #queue: PQueue;
  readonly #deadlines = new Deadlines();
  /** Slots taken outside the queue. */
  #direct = 0;
  #fitting = false;
  /** The requests waiting with a bound: refused when their limiter closes. */
  readonly #bounded = new Set<{ readonly bound: SlotBound; readonly abort: (reason: unknown) => void }>();
  /** Told by a waiter's limiter when it closes (one function: a limiter keeps it once). */
  readonly #closed = () => {
    for (const waiter of [...this.#bounded]) {
      const refusal = waiter.bound.closed?.();
      if (refusal !== undefined) waiter.abort(refusal);
    }
  };

  constructor(max: number) {
    this.max = max;
    this.#queue = new PQueue({ concurrency: max });
  }

  /** Requests holding a slot now. */
  get inFlight(): number {
    return this.#direct + this.#queue.pending;
  }

  /** Requests waiting for a slot. */
  get waiting(): number {
    return this.#queue.size;
  }

  /** The deadlines held (see {@link Deadlines}): one per request still waiting with a bound. */
  get [kHeldDeadlines](): number {
    return this.#deadlines.size;
  }

  /** Takes a slot if one is free and nobody waits; give it back with {@link leave}. */
  tryEnter(): boolean {
    if (this.#queue.size > 0 || this.#direct + this.#queue.pending >= this.max) return false;
    this.#direct++;
    return true;
  }

  /** Gives back a slot taken with {@link tryEnter}. */
  leave(): void {
    this.#direct--;
    // Started from a microtask: the slot comes back inside undici's response callback, and the
    // next request is better not dispatched from there.
    if (this.#queue.size > 0 && !this.#fitting) {
      this.#fitting = true;
      queueMicrotask(() => {
        this.#fitting = false;
        this.#fit();
      });
    }
  }

  /** Runs `send` in a slot, held until the promise it returns settles (see {@link enter}). */
  async run<T>(
    send: () => Promise<T>,
    signal?: AbortSignal,
    bound?: SlotBound | Promise<SlotBound | undefined>,
  ): Promise<T> {
    const { release } = await this.enter(signal, bound);
    try {
      return await send();
    } finally {
      release();
    }
  }

  /**
   * Waits for a slot: at once when one is free and nobody waits, else after the requests waiting
   * before it (FIFO). Resolves with the function that gives it back (once) and the time waited.
   * An abort while it waits rejects with the signal's reason and takes no slot; so does a wait
   * that reaches `bound.leftMs`, with `bound.refuse()` (at once when no time is left).
   *
   * A bound still to come (a promise: a shared budget's, while its code loads) holds the request
   * back until it is known (an abort ends that wait at once), then it waits as any other: so its wait is bounded and counted by the
   * limiter's own rule from the first request on, and is refused with the limiter's own error and
   * event. The load itself (once, a module import) is not counted in `maxWait`, as the units'
   * acquire does not count it either. Such a promise never rejects (it is dropped when a slot is
   * free); a bound that turns out to be none (a budget that failed to load) bounds nothing. Those
   * held back keep their order (each resumes in the order it asked).
   *
   * Given a `cancel` (and no signal), the wait is cancelled through it: a request that gets its
   * slot at once makes no `AbortController`; one that waits is cancelled through the controller
   * its wait makes anyway when it has a bound (`cancel.waitingIn` is the gate's until it leaves).
   */
  enter(
    signal?: AbortSignal,
    bound?: SlotBound | Promise<SlotBound | undefined>,
    cancel?: SlotCancel,
  ): Promise<HeldSlot> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (cancel?.abortReason !== undefined) return Promise.reject(cancel.abortReason);
    const closed = bound instanceof Promise ? undefined : bound?.closed?.();
    if (closed !== undefined) return Promise.reject(closed);
    if (this.tryEnter()) return Promise.resolve({ release: once(() => this.leave()), waitedMs: 0 });
    // Its caller's abort ends this wait too, at once.
    if (bound instanceof Promise)
      return untilAborted(bound, signal).then((known) => this.enter(signal, known, cancel));
    // It waits: one of its limiter's waiting requests (queue-full first, as the limiter's order is).
    const counted = bound?.wait?.();
    if (counted instanceof Error) return Promise.reject(counted);
    const stopWaiting = counted ?? noop;
    if (bound !== undefined && !(bound.leftMs > 0)) {
      stopWaiting();
      return Promise.reject(bound.refuse());
    }
    this.#fit();
    const since = bound?.clock.now() ?? 0;
    return new Promise((resolve, reject) => {
      let deadline: Deadline | undefined;
      let queued = signal;
      let waiter: { readonly bound: SlotBound; readonly abort: (reason: unknown) => void } | undefined;
      let line: CancellableLine | undefined;
      if (bound !== undefined || cancel !== undefined) {
        const controller = new AbortController();
        const abort = (reason: unknown) => controller.abort(reason);
        queued = signal === undefined ? controller.signal : AbortSignal.any([signal, controller.signal]);
        if (bound !== undefined) {
          deadline = this.#deadlines.add(since + bound.leftMs, bound.clock, () => abort(bound.refuse()));
          waiter = { bound, abort };
          this.#bounded.add(waiter);
          bound.onClose?.(this.#closed);
        }
        if (cancel !== undefined) {
          line = { cancel: (_seq, reason) => abort(reason) };
          cancel.waitingIn = line;
        }
      }
      const leave = () => {
        stopWaiting();
        if (deadline !== undefined) this.#deadlines.remove(deadline);
        if (waiter !== undefined) this.#bounded.delete(waiter);
        if (cancel !== undefined && cancel.waitingIn === line) cancel.waitingIn = undefined;
      };
      // The queued task holds its p-queue slot until the release is called.
      this.#queue
        .add(
          () =>
            new Promise<void>((release) => {
              leave();
              const waitedMs = bound === undefined ? 0 : bound.clock.now() - since;
              resolve({ release: once(release), waitedMs });
            }),
          { signal: queued },
        )
        .catch((error: unknown) => {
          // Once: an abort after the slot was given lands here too.
          leave();
          reject(error);
        });
    });
  }

  /** Lets the queue run only as many requests as the slots taken outside it leave free. */
  #fit(): void {
    const free = this.max - this.#direct;
    if (free < 1) {
      this.#queue.pause();
      return;
    }
    // Each starts what now fits: the setter when the concurrency changes, start() when paused.
    if (this.#queue.concurrency !== free) this.#queue.concurrency = free;
    this.#queue.start();
  }
}

interface Deadline {
  /** ms on the clock it was given with. */
  readonly at: number;
  readonly expire: () => void;
  /** Its neighbours in the list: the one due before it and the one due after it. */
  prev: Deadline | undefined;
  next: Deadline | undefined;
  /** Out of the list: its waiter got its slot, left, or was expired. */
  done: boolean;
}

/**
 * The deadlines of a gate's waiters, earliest first (a doubly linked list), and the one timer,
 * for the earliest. First attempts queue in deadline order (the same maxWait from the moment they
 * queue), so an insert is at the end; a retry, which has less of maxWait left, walks back from
 * the end past the later ones. A waiter that gets its slot or leaves (its caller aborted) is taken
 * out at once, wherever it stands: a long line of aborted waits at a full gate holds none of them
 * until maxWait. When it was the earliest, the timer moves to the next one, or stops when none is
 * left.
 */
class Deadlines {
  #first: Deadline | undefined;
  #last: Deadline | undefined;
  #size = 0;
  #clock: Clock | undefined;
  #timer: unknown;
  #timerAt = Number.POSITIVE_INFINITY;

  /** Deadlines held: the waiters with a bound still waiting. */
  get size(): number {
    return this.#size;
  }

  add(at: number, clock: Clock, expire: () => void): Deadline {
    const deadline: Deadline = { at, expire, prev: undefined, next: undefined, done: false };
    let before = this.#last;
    while (before !== undefined && before.at > at) before = before.prev;
    deadline.prev = before;
    deadline.next = before === undefined ? this.#first : before.next;
    if (before === undefined) this.#first = deadline;
    else before.next = deadline;
    if (deadline.next === undefined) this.#last = deadline;
    else deadline.next.prev = deadline;
    this.#size++;
    if (at < this.#timerAt) this.#arm(clock, at);
    return deadline;
  }

  /** Takes `deadline` out (once; a later call does nothing), and moves the timer when it was the earliest. */
  remove(deadline: Deadline): void {
    if (deadline.done) return;
    const wasFirst = deadline === this.#first;
    this.#unlink(deadline);
    if (!wasFirst) return;
    const next = this.#first;
    if (next === undefined) this.#disarm();
    else if (next.at !== this.#timerAt) this.#arm(this.#clock as Clock, next.at);
  }

  #unlink(deadline: Deadline): void {
    deadline.done = true;
    const { prev, next } = deadline;
    if (prev === undefined) this.#first = next;
    else prev.next = next;
    if (next === undefined) this.#last = prev;
    else next.prev = prev;
    deadline.prev = undefined;
    deadline.next = undefined;
    this.#size--;
  }

  #arm(clock: Clock, at: number): void {
    this.#disarm();
    this.#clock = clock;
    this.#timerAt = at;
    // A request waits on it: it keeps the process alive.
    this.#timer = clock.setTimeout(() => this.#fire(), at - clock.now(), true);
  }

  #disarm(): void {
    if (this.#timer !== undefined) this.#clock?.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
  }

  /** Expires every waiter whose deadline has come, then arms for the next one. */
  #fire(): void {
    const clock = this.#clock as Clock;
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = clock.now();
    for (let first = this.#first; first !== undefined && first.at <= now; first = this.#first) {
      this.#unlink(first);
      first.expire();
    }
    const next = this.#first;
    if (next !== undefined && next.at !== this.#timerAt) this.#arm(clock, next.at);
  }
}

function noop(): void {}

function once(fn: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    fn();
  };
}
