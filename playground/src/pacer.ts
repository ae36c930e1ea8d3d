import type { Speed } from './settings.js';

/** Ends a run early: the page reset it or left its view. */
export class StoppedError extends Error {
  override name = 'StoppedError';
}

/** Wall time a run may take before it lets the page draw, ms. */
const SLICE_MS = 12;

/**
 * Paces runs of the simulator on the wall clock: its `pace` goes to `runMode`, which asks it
 * between two virtual instants whether to wait. At a speed of N, virtual time runs N times as
 * fast as the wall clock; at `max` as fast as the browser can, in slices that leave the page
 * time to draw. Several runs may share one pacer (the comparison runs its modes side by side).
 * Waiting never changes a run's numbers (the virtual clock offers only quiet moments).
 */
export class Pacer {
  #speed: Speed;
  #paused = false;
  #stopped = false;
  /** Virtual time (ms) at the wall time `#anchorWall`: where the speed was last set. */
  #anchorVirtual = 0;
  #anchorWall = performance.now();
  /** The furthest virtual time a run has reached, ms. */
  #virtual = 0;
  #sliceEnd = performance.now() + SLICE_MS;
  /** The one pending yield to the page, shared by the runs. */
  #yield: Promise<void> | undefined;
  readonly #waiting = new Set<{ resolve: () => void; reject: (e: Error) => void }>();

  constructor(speed: Speed) {
    this.#speed = speed;
  }

  get paused(): boolean {
    return this.#paused;
  }

  get speed(): Speed {
    return this.#speed;
  }

  set speed(speed: Speed) {
    this.#anchor();
    this.#speed = speed;
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.#anchor();
    for (const w of this.#waiting) w.resolve();
    this.#waiting.clear();
  }

  /** Stops every run that uses this pacer: each rejects with {@link StoppedError}. */
  stop(): void {
    this.#stopped = true;
    for (const w of this.#waiting) w.reject(new StoppedError('stopped'));
    this.#waiting.clear();
  }

  /** For `runMode`'s `pace`: `undefined` to go on, or a promise to wait for. */
  readonly pace = (virtualMs: number): Promise<void> | undefined => {
    if (this.#stopped) return Promise.reject(new StoppedError('stopped'));
    if (virtualMs > this.#virtual) this.#virtual = virtualMs;
    if (this.#paused) return this.#park();
    const now = performance.now();
    if (this.#speed !== 'max') {
      const ahead = (virtualMs - this.#target(now)) / this.#speed;
      if (ahead > 1) return this.#sleep(ahead);
    }
    return now > this.#sliceEnd ? this.#yieldToPage() : undefined;
  };

  #target(now: number): number {
    return this.#anchorVirtual + (now - this.#anchorWall) * (this.#speed === 'max' ? 1 : this.#speed);
  }

  #anchor(): void {
    this.#anchorVirtual = this.#virtual;
    this.#anchorWall = performance.now();
  }

  #park(): Promise<void> {
    return new Promise((resolve, reject) => this.#waiting.add({ resolve, reject }));
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const entry = {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject,
      };
      const timer = setTimeout(() => {
        this.#waiting.delete(entry);
        this.#sliceEnd = performance.now() + SLICE_MS;
        if (this.#stopped) reject(new StoppedError('stopped'));
        else resolve();
      }, ms);
      this.#waiting.add(entry);
    });
  }

  #yieldToPage(): Promise<void> {
    this.#yield ??= new Promise<void>((resolve) => {
      setTimeout(() => {
        this.#yield = undefined;
        this.#sliceEnd = performance.now() + SLICE_MS;
        resolve();
      }, 0);
    });
    return this.#yield.then(() => {
      if (this.#stopped) throw new StoppedError('stopped');
      if (this.#paused) return this.#park();
      return undefined;
    });
  }
}
