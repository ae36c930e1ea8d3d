import type { AttemptPlan, LoopCancel } from '../attempt-loop.js';
import type { Costs } from '../limiter/budgets.js';
import type { Outcome, RateLimiter } from '../limiter/types.js';
import { closedRefusal } from './adapter-close.js';
import {
  Attempt,
  type AttemptJudge,
  type AttemptOwner,
  type BodyDeadline,
  HELD_BODY_DRAIN_MS,
  untilSocketReturned,
} from './attempt.js';
import type { CallerController } from './caller-controller.js';
import { dispatcherClosed, errorOutcome } from './classify.js';
import { refusedAtOnce, slotBound } from './concurrency.js';
import { type AttemptBodies, bodyNeverSent } from './request-body.js';
import type { HttpRuntime, Route } from './runtime.js';

/** What the attempt loop's plan asks of its request; see `RateLimitedDispatch`. */
export interface LoopRequest extends AttemptOwner {
  readonly controller: CallerController;
  readonly runtime: HttpRuntime;
  /** The request's limiter, concurrency gate and what it reads of a response. */
  readonly route: Route;
  /** Units charged for each attempt. */
  readonly units: number;
  /** Units drawn from the limiter's other budgets (an LLM API's tokens). */
  readonly costs: Costs | undefined;
  /** Attempts per request, the first included. */
  readonly maxAttempts: number;
  /** ms attempt 1 waited for its units in the limiter's line before the loop. */
  readonly waitedMs: number;
  /** The request body of each attempt; `undefined` only before the request starts. */
  readonly bodies: AttemptBodies | undefined;
  /** Whether the request's body can be sent again and the caller has not aborted. */
  canRetry(): boolean;
  /** Whether the answer is judged only once its body is read (an LLM API's 429). */
  readsBody(attempt: Attempt): boolean;
  /** How long such a body is read before the answer is judged without it. */
  bodyDeadline(): BodyDeadline;
  /** What `classify` is given of the attempt's held body. */
  refusalBody(attempt: Attempt): unknown;
  /** Sends `attempt` down the dispatcher as the request's next attempt. */
  dispatchAttempt(attempt: Attempt): void;
}

/**
 * The attempt loop's plan for one request (`runAttempts`): made when the loop runs, for a retry,
 * a wait behind a `maxConcurrent` gate or a limiter other than the adaptive one, never for a
 * request waiting in an adaptive limiter's line (that one waits as itself). Every answer the
 * loop sends is held for the loop to judge; the loop gives the request its last one.
 */
export class LoopPlan implements AttemptPlan<Attempt> {
  readonly #request: LoopRequest;
  /** The throttled attempt 1 the loop starts from (`AttemptPlan.throttledFirst`), until it has read it. */
  throttledFirst: Attempt | undefined;

  constructor(request: LoopRequest, throttledFirst: Attempt | undefined) {
    this.#request = request;
    this.throttledFirst = throttledFirst;
  }

  get limiter(): RateLimiter {
    return this.#request.route.limiter;
  }

  get units(): number {
    return this.#request.units;
  }

  get costs(): Costs | undefined {
    return this.#request.costs;
  }

  get maxAttempts(): number {
    return this.#request.maxAttempts;
  }

  get waitedMs(): number {
    return this.#request.waitedMs;
  }

  get signal(): AbortSignal | undefined {
    return this.#request.controller.cancel?.signal;
  }

  /** The caller's controller cancels an adaptive limiter's wait when no signal was made for it. */
  get waitCancel(): LoopCancel | undefined {
    const { controller } = this.#request;
    return controller.cancel === undefined ? controller : undefined;
  }

  /** The adapter closed (its own registry too, which tells no wait): nothing more is sent. */
  readonly closed = (): unknown => {
    const { runtime, route } = this.#request;
    return runtime.closed ? closedRefusal(route) : undefined;
  };

  get slot(): AttemptPlan<Attempt>['slot'] {
    const { route, units } = this.#request;
    const gate = route.gate;
    return gate === undefined
      ? undefined
      : (signal, waitedMs) => gate.enter(signal, slotBound(route.limiter, units, waitedMs));
  }

  /** Units before the slot when the slots are the origin's, over its partitions' limiters. */
  get unitsFirst(): boolean {
    return this.#request.route.gatePer === 'origin';
  }

  /**
   * An upgraded attempt is never sent again: its caller has the socket (a CONNECT a proxy
   * answered 429 is upgraded whatever its status).
   */
  canRetry(attempt: Attempt): boolean {
    return !attempt.upgraded && this.#request.canRetry();
  }

  /**
   * A retry waits for the body of the answer it replaces to end (read on for at most
   * {@link HELD_BODY_DRAIN_MS}: dropped while it comes, it closed its connection), then for undici
   * to take its socket back (see {@link untilSocketReturned}).
   */
  async beforeRetry(held: Attempt | undefined): Promise<void> {
    const since = this.#readSince;
    this.#readSince = undefined;
    if (held?.held === true && !held.heldToTheEnd) {
      const { runtime, route } = this.#request;
      // Counted from the read before the slot, when there was one: a body still coming then is cut at once.
      const deadline = { clock: runtime.clockOf(route), ms: HELD_BODY_DRAIN_MS, since };
      // Or until the adapter closes: then nothing more is sent (see `HttpRuntime.onClose`).
      await new Promise<void>((resolve) => {
        const forget = runtime.onClose(resolve);
        held.afterBody(() => {
          forget();
          resolve();
        }, deadline);
      });
    }
    return untilSocketReturned();
  }

  /** When the retry began to read the rest of its held answer's body (`heldBodyRead`), on the route's clock. */
  #readSince: number | undefined;

  /**
   * With `maxConcurrent`: the rest of the held answer's body read before the retry's slot, for
   * {@link HELD_BODY_DRAIN_MS} at most, cutting nothing (see `AttemptPlan.heldBodyRead`); or until
   * the adapter closes or the caller aborts (which ends the held body's read too). None for a
   * retry the limiter would refuse at once: it is refused with no wait (see {@link refusedAtOnce}).
   */
  heldBodyRead(held: Attempt, waitedMs: number): Promise<void> | undefined {
    if (!held.held || held.heldToTheEnd) return undefined;
    const { runtime, route, units } = this.#request;
    if (refusedAtOnce(route.limiter, units, waitedMs)) return undefined;
    const clock = runtime.clockOf(route);
    this.#readSince = clock.now();
    return new Promise<void>((resolve) => {
      let timer: unknown;
      let forget: (() => void) | undefined;
      const done = () => {
        forget?.();
        clock.clearTimeout(timer);
        resolve();
      };
      // keepAlive: a request waits on it (its socket keeps the process running anyway).
      timer = clock.setTimeout(done, HELD_BODY_DRAIN_MS, true);
      forget = runtime.onClose(done);
      held.afterBody(done);
    });
  }

  classify(attempt: Attempt): Outcome {
    const { route, runtime } = this.#request;
    // Only an LLM API's 429 reads its body (parsing every held body as JSON cost ~3 µs a request).
    const body = route.llm === undefined ? undefined : this.#request.refusalBody(attempt);
    return runtime.classify(attempt, () => attempt.headers, route, body);
  }

  thrownQuota(attempt: Attempt): Outcome['quota'] {
    const { route, runtime } = this.#request;
    return runtime.thrownQuota(attempt, () => attempt.headers, route);
  }

  discard(attempt: Attempt): void {
    attempt.discard();
  }

  keepable(attempt: Attempt): boolean {
    return attempt.heldToTheEnd;
  }

  #lastSent: Attempt | undefined;

  /** Whether undici never started the last attempt (no onRequestStart: nothing of it was written). */
  get #unstarted(): boolean {
    return this.#lastSent !== undefined && this.#lastSent.controller === undefined;
  }

  transportClosed(error: unknown): boolean {
    // Only an attempt undici never started was refused by the closed dispatcher. A body that
    // passed maxReplayBodyBytes as the retry went out failed it before any of its bytes.
    return (this.#unstarted && dispatcherClosed(error)) || bodyNeverSent(error);
  }

  /** A request that never reached the server gives back its LLM token draws (see `notSent`). */
  classifyError(error: unknown): Outcome {
    return errorOutcome(error, this.#unstarted);
  }

  send(_attempt: number, started?: () => void): Promise<Attempt> {
    return new Promise<Attempt>((resolve, reject) => {
      const judge: AttemptJudge = {
        // Held for the loop to judge (an LLM API's 429 once its body is read, or its read's time
        // is up: its slot is freed now, when the response starts, its permit once it is judged).
        started: (attempt) => {
          if (this.#request.readsBody(attempt)) {
            started?.();
            attempt.afterBody(() => resolve(attempt), this.#request.bodyDeadline());
          } else resolve(attempt);
          return false;
        },
        failed: (_attempt, error) => reject(error),
      };
      const attempt = new Attempt(this.#request, judge);
      this.#lastSent = attempt;
      this.#request.dispatchAttempt(attempt);
    });
  }
}
