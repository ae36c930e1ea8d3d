import { type AttemptPlan, runAttempts } from '../attempt-loop.js';
import { RateLimitRejectedError } from '../errors.js';
import { headerLookup } from '../headers.js';
import { withQuota } from '../http/classify.js';
import { quotaReader } from '../http/quota-headers/index.js';
import type { AcquireOptions, Outcome, Permit, RateLimiter } from '../limiter/types.js';
import type { RunCollector } from './metrics.js';
import type { ApiAnswer, ModelApi } from './model-api.js';
import type { Prng } from './prng.js';
import { type ArrivalModel, factorAt, meanUnits, type SimParams, type TimedFactor } from './scenarios.js';
import type { VirtualClock } from './virtual-clock.js';

/**
 * Counts the simulated requests whose code is running in promise callbacks rather than parked
 * on a virtual timer (waiting for the limiter's units or for the API's answer). The virtual
 * clock lets microtasks run until it is 0 before it moves time on.
 */
export interface WorkCounter {
  busy: number;
}

/** A limiter that tells when it settles an acquire: the library's limiter does, by its events. */
export interface SettleEvents {
  on(event: 'acquired' | 'rejected', listener: () => void): unknown;
}

/**
 * Hands the attempt loop a limiter and watches it; the real limiter does all the work (this adds
 * no rule of its own). A request that calls `acquire` stays busy when the limiter settles it at
 * once (granted or rejected: the promise callbacks still have to run), and parks when it joins
 * the queue; the limiter's `acquired` or `rejected` event for it, fired from the limiter's
 * timer, makes it busy again. Records each acquire's wait. The events come from `events`: the
 * limiter itself, or the local limiter of a shared budget.
 */
export class TrackedLimiter implements RateLimiter {
  readonly #work: WorkCounter;
  #inAcquire = false;
  #settledNow = false;

  readonly #events: Partial<SettleEvents>;

  constructor(
    readonly inner: RateLimiter,
    readonly clock: VirtualClock,
    work: WorkCounter,
    readonly collector: RunCollector,
    events: Partial<SettleEvents> = inner as Partial<SettleEvents>,
  ) {
    this.#work = work;
    this.#events = events;
    const onSettle = () => {
      if (this.#inAcquire) this.#settledNow = true;
      else work.busy++;
    };
    events.on?.('acquired', onSettle);
    events.on?.('rejected', onSettle);
  }

  get name(): string {
    return this.inner.name;
  }

  acquire(units?: number, options?: AcquireOptions): Promise<Permit> {
    const start = this.clock.now();
    // Without settle events, a limiter is taken to settle every acquire at once.
    this.#settledNow = this.#events.on === undefined;
    this.#inAcquire = true;
    let promise: Promise<Permit>;
    try {
      promise = this.inner.acquire(units, options);
    } finally {
      this.#inAcquire = false;
    }
    if (!this.#settledNow) this.#work.busy--;
    return promise.then(
      (permit) => {
        this.collector.recordWait(this.clock.now() - start);
        return permit;
      },
      (error: unknown) => {
        // Every refusal ends its request: a first attempt rejects, a retry returns its last 429.
        if (error instanceof RateLimitRejectedError) this.collector.recordRefusal(error.reason);
        throw error;
      },
    );
  }

  tryAcquire(units?: number): Permit | undefined {
    return this.inner.tryAcquire(units);
  }
}

export interface InstanceOptions {
  clock: VirtualClock;
  api: ModelApi;
  limiter: TrackedLimiter;
  work: WorkCounter;
  collector: RunCollector;
  /** Base demand, units/min. */
  demand: number;
  demandEvents: readonly TimedFactor[];
  unitsPerRequest: SimParams['unitsPerRequest'];
  maxAttempts: number;
  /**
   * An LLM API (units are tokens): 429s name the budget that ran out, answers carry OpenAI's
   * fields, and each attempt draws from two budgets. `first` is the limiter's first budget, which
   * `acquire(units)` draws from: `tokens` (a request's tokens, and 1 from `requests`) or `requests`
   * (1, and its tokens from `tokens`, as the `api: 'openai'` preset's limiter counts).
   */
  llm?: { first: 'tokens' | 'requests' };
  /** Arrival times and request sizes; the same stream in every mode, so modes see the same demand. */
  arrivals: Prng;
  /**
   * `'interval'`: one request every mean gap from `phase` (a fraction of a gap in [0, 1), drawn
   * once per instance) after `startMs`, instead of Poisson gaps drawn from `arrivals` (which then
   * draws only the sizes). @default 'poisson'
   */
  arrivalModel?: ArrivalModel;
  /** With `'interval'` arrivals, the part of a gap before the first arrival, in [0, 1). @default 0 */
  phase?: number;
  /** No request arrives at or after this time, ms. */
  endMs: number;
  /** No request arrives before this time, ms. @default 0 */
  startMs?: number;
  /** Requests that arrive at once at the start (a cold burst). @default 0 */
  initialBurst?: number;
  /** Units the API accepted from this instance in each second (index: whole seconds). */
  acceptedBySecond: number[];
  /** A short-lived process: this many requests one at a time from `startMs`, no Poisson demand. */
  crowd?: number;
  /**
   * A crowd process calls again a request that ended without being served: at once after its
   * 429 (the attempt loop gave up), a second later after a refusal (as a script that must get its
   * work done, the crowd bench's).
   */
  untilServed?: boolean;
  /** The API's 429s are read without their `Retry-After`. */
  noRetryAfter?: boolean;
}

/**
 * One process: Poisson arrivals of requests, or one every mean gap (`arrivalModel`; their rate in
 * units/min follows the demand and its events), each sent through the library's attempt loop (`runAttempts`) with its own limiter,
 * against the shared model API.
 */
export class SimInstance {
  readonly #o: InstanceOptions;
  readonly #meanUnits: number;
  /** The exact (unrounded) time of the last arrival, ms: the Poisson process runs on it. */
  #lastArrival = 0;
  /** Interval arrivals: the part of a gap (at the demand then) left before the next arrival. */
  #gapLeft = 1;
  /** The first unexpected error of a request, rethrown by the run. */
  error: unknown;
  /** A crowd process's requests still to send after the current one. */
  #left = 0;

  constructor(options: InstanceOptions) {
    this.#o = options;
    this.#meanUnits = meanUnits(options.unitsPerRequest);
  }

  /** Schedules the first arrival (and the cold burst). */
  start(): void {
    const { startMs = 0, initialBurst = 0, clock, crowd, phase = 0 } = this.#o;
    this.#lastArrival = startMs;
    this.#gapLeft = phase;
    if (crowd !== undefined) {
      if (crowd <= 0) return;
      this.#left = crowd - 1;
      clock.setTimeout(() => this.#arrive(false), startMs);
      return;
    }
    if (initialBurst > 0) {
      clock.setTimeout(() => {
        for (let i = 0; i < initialBurst; i++) this.#arrive(false);
      }, startMs);
    }
    this.#scheduleNext();
  }

  #scheduleNext(): void {
    const at = this.#nextArrival(this.#lastArrival);
    if (!(at < this.#o.endMs)) return;
    this.#lastArrival = at;
    const { clock } = this.#o;
    clock.setTimeout(() => this.#arrive(), at - clock.now());
  }

  /**
   * The next arrival after `t` (ms) of a Poisson process whose rate changes at event bounds, or
   * with interval arrivals, where the part of a gap left runs out at the rates of the way there.
   */
  #nextArrival(t: number): number {
    const { demand, demandEvents, arrivals, endMs, arrivalModel } = this.#o;
    if (arrivalModel === 'interval') return this.#nextInterval(t);
    let from = t;
    while (from < endMs) {
      const until = nextBoundary(demandEvents, from);
      const perMinute = (demand * factorAt(demandEvents, from)) / this.#meanUnits;
      if (perMinute > 0) {
        const at = from + arrivals.exponential(60_000 / perMinute);
        if (at < until) return at;
      }
      from = until;
    }
    return Number.POSITIVE_INFINITY;
  }

  /** The next interval arrival after `t` (ms): the gap left runs out at each span's demand. */
  #nextInterval(t: number): number {
    const { demand, demandEvents, endMs } = this.#o;
    let from = t;
    let left = this.#gapLeft;
    while (from < endMs) {
      const until = nextBoundary(demandEvents, from);
      const perMinute = (demand * factorAt(demandEvents, from)) / this.#meanUnits;
      if (perMinute > 0) {
        const at = from + (left * 60_000) / perMinute;
        if (at < until) {
          this.#gapLeft = 1;
          return at;
        }
        left -= ((until - from) * perMinute) / 60_000;
      }
      from = until;
    }
    return Number.POSITIVE_INFINITY;
  }

  #arrive(next = true): void {
    const { arrivals, unitsPerRequest, collector, work } = this.#o;
    const { min, max, tail } = unitsPerRequest;
    const units =
      tail === undefined
        ? arrivals.int(min, max)
        : Math.min(max, Math.round(min / (1 - arrivals.next()) ** (1 / tail)));
    collector.requests++;
    collector.demandUnits += units;
    work.busy++;
    void this.#request(units);
    if (next) this.#scheduleNext();
  }

  async #request(units: number): Promise<void> {
    const { work, collector, clock } = this.#o;
    const request = new SimRequest(this.#o, units);
    /** How it ended: served, its 429 (given up or a retry refused), or refused before any attempt. */
    let ended: 'served' | '429' | 'refused' = 'refused';
    try {
      const answer = await runAttempts(request);
      if (answer.status !== 429) {
        collector.succeeded++;
        ended = 'served';
      } else {
        ended = '429';
        if (request.attempts >= request.maxAttempts) collector.gaveUp++;
        // The limiter refused a retry (counted as rejected) and the loop returned the last 429.
        else collector.retriesRefused++;
      }
    } catch (error) {
      // A refused first attempt is counted by the tracked limiter; anything else is a bug.
      if (!(error instanceof RateLimitRejectedError)) this.error ??= error;
    } finally {
      if (ended !== 'served' && this.#o.crowd !== undefined && this.#o.untilServed === true) {
        // Called again: at once after its 429, a second later after a refusal.
        if (ended === '429') this.#arrive(false);
        else clock.setTimeout(() => this.#arrive(false), 1_000);
      } else if (this.#left > 0) {
        // A crowd process sends its next request when this one has ended.
        this.#left--;
        this.#arrive(false);
      }
      work.busy--;
    }
  }
}

/**
 * One request's plan for the attempt loop: send asks the model API, whose answer arrives after
 * its latency; a 429 is throttled with its Retry-After. (A class rather than an object literal:
 * a run makes tens of thousands, and methods on the prototype cost no closures.)
 */
class SimRequest implements AttemptPlan<ApiAnswer> {
  readonly limiter: TrackedLimiter;
  readonly maxAttempts: number;
  /** Units drawn from the limiter's first budget for each attempt. */
  readonly units: number;
  /** An LLM API's other budget: what each attempt draws from it (see `InstanceOptions.llm`). */
  readonly costs: Readonly<Record<string, number>> | undefined;
  readonly #o: InstanceOptions;
  /** Attempts sent so far. */
  attempts = 0;

  constructor(
    options: InstanceOptions,
    /** The request's units as the API counts them (an LLM API's tokens). */
    readonly size: number,
  ) {
    this.#o = options;
    this.limiter = options.limiter;
    this.maxAttempts = options.maxAttempts;
    const first = options.llm?.first;
    this.units = first === 'requests' ? 1 : size;
    this.costs = first === undefined ? undefined : first === 'tokens' ? ONE_REQUEST : { tokens: size };
  }

  send(): Promise<ApiAnswer> {
    const { api, work, clock } = this.#o;
    const answer = api.decide(this.size);
    if (answer.status === 200) {
      const second = Math.floor(clock.now() / 1000);
      const accepted = this.#o.acceptedBySecond;
      accepted[second] = (accepted[second] ?? 0) + this.size;
    }
    this.attempts++;
    work.busy--;
    return new Promise<ApiAnswer>((resolve) => {
      clock.setTimeout(() => {
        work.busy++;
        resolve(answer);
      }, api.latency());
    });
  }

  classify(answer: ApiAnswer): Outcome {
    // An LLM API's 429 names the budget that ran out: only that one is cut.
    const outcome: Outcome =
      answer.status !== 429
        ? SUCCESS
        : this.#o.noRetryAfter === true
          ? THROTTLED_NO_WAIT
          : answer.budget === undefined
            ? { kind: 'throttled', retryAfterMs: answer.retryAfterMs }
            : { kind: 'throttled', retryAfterMs: answer.retryAfterMs, budgets: [answer.budget] };
    const { headers } = answer;
    if (headers === undefined) return outcome;
    // Read as the HTTP adapters read a response (the default `headers: 'standard'`; an LLM API's
    // with the `'openai'` profile).
    const read = this.#o.llm !== undefined ? READ_OPENAI : READ_STANDARD;
    const quota = read(headerLookup(headers), () => headers, 0);
    return quota === undefined ? outcome : withQuota(outcome, quota);
  }
}

const SUCCESS: Outcome = { kind: 'success' };
const THROTTLED_NO_WAIT: Outcome = { kind: 'throttled' };
const ONE_REQUEST = { requests: 1 } as const;
const READ_STANDARD = quotaReader('standard', undefined) as NonNullable<ReturnType<typeof quotaReader>>;
const READ_OPENAI = quotaReader('openai', undefined) as NonNullable<ReturnType<typeof quotaReader>>;

/** The first event start or end after `t` (ms), or Infinity. */
function nextBoundary(events: readonly TimedFactor[], t: number): number {
  let next = Number.POSITIVE_INFINITY;
  for (const e of events) {
    if (e.atMs > t && e.atMs < next) next = e.atMs;
    const end = e.atMs + e.durationMs;
    if (end > t && end < next) next = end;
  }
  return next;
}
