import PQueue from 'p-queue';

/**
 * The cap on a limiter's requests in flight (`maxConcurrent`). A request takes a slot before it
 * is sent and gives it back when its response starts (not when the body ends: a body nobody reads
 * would hold its slot forever).
 *
 * While slots are free and nobody waits, a slot is a counter ({@link tryEnter}); only a request
 * that finds the cap reached waits, FIFO and abortable, in a p-queue. The queue starts a waiting
 * request when one of its own requests ends (p-queue's concurrency), or when a slot taken outside
 * it comes back: its concurrency is kept at the slots those leave free (paused at none).
 */
export class ConcurrencyGate {
  /** Requests in flight at most. */
  readonly max: number;
  readonly #queue: PQueue;
  /** Slots taken outside the queue. */
  #direct = 0;
  #fitting = false;

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
  async run<T>(send: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    const release = await this.enter(signal);
    try {
      return await send();
    } finally {
      release();
    }
  }

  /**
   * Waits for a slot: at once when one is free and nobody waits, else after the requests waiting
   * before it (FIFO). Resolves with the function that gives it back (once). An abort while it
   * waits rejects with the signal's reason and takes no slot.
   */
  enter(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.tryEnter()) return Promise.resolve(once(() => this.leave()));
    this.#fit();
    return new Promise((resolve, reject) => {
      // The queued task holds its p-queue slot until the release is called.
      this.#queue.add(() => new Promise<void>((release) => resolve(once(release))), { signal }).catch(reject);
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

function once(fn: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    fn();
  };
}
