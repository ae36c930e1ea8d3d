import { feed, judge } from '../attempt-loop.js';
import type { Outcome, Permit } from '../limiter/types.js';
import type { Attempt, AttemptJudge, BodyDeadline } from './attempt.js';
import { errorOutcome } from './classify.js';
import type { ConcurrencyGate } from './concurrency.js';
import type { HttpRuntime, Route } from './runtime.js';

/** What the judge of a fast-path attempt asks of its request; see `RateLimitedDispatch`. */
export interface FastPathRequest {
  /** The caller's abort reason, if it aborted. */
  readonly abortReason: Error | undefined;
  /** Judges the responses (`classify`, which throws what the user's `classify` throws). */
  readonly runtime: HttpRuntime;
  /** The request's limiter and what it reads of a response. */
  readonly route: Route;
  /** Attempts per request, the first included (the loop's retry rule). */
  readonly maxAttempts: number;
  /** Whether the request's body can be sent again. */
  canRetry(): boolean;
  /** Sends it again through the attempt loop, which holds `attempt` until its retry has units. */
  retry(attempt: Attempt): void;
  /** Fails the request (once). */
  fail(error: unknown): void;
  /** The last answer is judged: the request no longer keeps its limiter. */
  judged(): void;
  /** Whether the answer is judged only once its body is read (an LLM API's 429). */
  readsBody(attempt: Attempt): boolean;
  /** How long such a body is read before the answer is judged without it. */
  bodyDeadline(): BodyDeadline;
  /** What `classify` is given of the attempt's held body. */
  refusalBody(attempt: Attempt): unknown;
}

/**
 * The judge of attempt 1 when it was sent at once (units granted by `tryAcquire`, a slot free):
 * it judges the response synchronously when it starts, as the attempt loop judges an attempt,
 * settles the permit and gives the slot back. Unless the answer is throttled and will be sent
 * again, the response passes straight to the caller: no pause, no promise, nothing buffered.
 */
export class FastPathJudge implements AttemptJudge {
  readonly #request: FastPathRequest;
  /** The attempt's permit, until its response starts or it fails. */
  #permit: Permit | undefined;
  /** The gate whose slot the attempt holds, until its response starts or it fails. */
  #gate: ConcurrencyGate | undefined;

  constructor(request: FastPathRequest, permit: Permit, gate: ConcurrencyGate | undefined) {
    this.#request = request;
    this.#permit = permit;
    this.#gate = gate;
  }

  /**
   * `true` passes the response through; see {@link AttemptJudge.started}. An LLM API's 429 is
   * held and judged once its body is read, or once its read's time is up (then given to the
   * caller, or sent again); its slot is freed when it starts, as any response's is, and its permit
   * is settled once the body is judged.
   */
  started(attempt: Attempt): boolean {
    if (!attempt.delivered && this.#request.readsBody(attempt)) {
      const gate = this.#gate;
      this.#gate = undefined;
      gate?.leave();
      attempt.afterBody(() => {
        if (this.#judge(attempt)) attempt.deliver();
      }, this.#request.bodyDeadline());
      return false;
    }
    return this.#judge(attempt);
  }

  #judge(attempt: Attempt): boolean {
    const permit = this.#settle();
    const request = this.#request;
    let again: boolean;
    try {
      let outcome: Outcome;
      try {
        // Only an LLM API's 429 reads its body.
        const body =
          attempt.body === undefined || request.route.llm === undefined
            ? undefined
            : request.refusalBody(attempt);
        outcome = request.runtime.classify(attempt, () => attempt.headers, request.route, body);
      } catch (error) {
        // A classify that throws fails the request; the answer came, so its permit is answered
        // (failed, no cut), or the limiter counts it in flight (a cold start's cap stays taken).
        permit?.failed(
          undefined,
          request.runtime.thrownQuota(attempt, () => attempt.headers, request.route),
        );
        throw error;
      }
      // A controller or a listener that throws fails the request, as it does in the loop.
      again = judge(permit, outcome, 1, request.maxAttempts, () => !attempt.delivered && request.canRetry());
    } catch (error) {
      // As in the loop: the request fails (an upgraded one is the caller's already).
      if (!attempt.delivered) request.fail(error);
      return false;
    }
    if (again) {
      request.retry(attempt);
      return false;
    }
    if (!attempt.delivered && request.abortReason !== undefined) {
      request.fail(request.abortReason);
      return false;
    }
    request.judged();
    return true;
  }

  /** Attempt 1 failed before its response: as the loop ends on an error. */
  failed(attempt: Attempt, error: Error): void {
    const permit = this.#settle();
    // One that never reached the server gives back its LLM token draws.
    if (permit !== undefined) feed(permit, errorOutcome(error, attempt.controller === undefined));
    this.#request.fail(error);
  }

  /** Gives the slot back and hands over the permit, once. */
  #settle(): Permit | undefined {
    const gate = this.#gate;
    this.#gate = undefined;
    gate?.leave();
    const permit = this.#permit;
    this.#permit = undefined;
    return permit;
  }
}
