import type { Clock } from '../clock.js';
import { goDuration } from './go-duration.js';
import type { Prng } from './prng.js';

/** Response headers of the model API: lower-case names. */
export type ApiHeaders = Readonly<Record<string, string>>;

/** What the model API answers to one request; `headers` when it announces its quota. */
export type ApiAnswer =
  | { status: 200; headers?: ApiHeaders }
  | { status: 429; retryAfterMs: number; headers?: ApiHeaders; budget?: LlmBudget };

/** The budgets of an LLM API (`requestQuota`): the units are its tokens. */
type LlmBudget = 'requests' | 'tokens';

export interface ModelApiOptions {
  clock: Clock;
  /** The hidden quota for all our instances together, units/min. */
  quota: number;
  /** The bucket holds this many seconds of the quota (at least one request's units). */
  burstSeconds: number;
  /** Median of the log-normal latency of an answer, ms. */
  latencyMedianMs: number;
  /** Spread (sigma of the log) of the latency. */
  latencySigma: number;
  /** The stream the latencies are drawn from. */
  random: Prng;
  /** Chance (0 to 1) that an answer stalls `stallMs` more; drawn from `stalls`. @default 0 */
  stallProbability?: number;
  stallMs?: number;
  stalls?: Prng;
  /** A strict leaky bucket (GCRA) of requests with this burst, instead of the token bucket of units. */
  leakyBurst?: number;
  /**
   * Announces the quota on every answer in the IETF RateLimit fields: the quota per minute
   * (`RateLimit-Policy: "default";q=<quota>;w=60`) and the units in the bucket
   * (`RateLimit: "default";r=<units>`), without a reset (a bucket refills all the time); the leaky
   * bucket (`leakyBurst`) announces nothing. @default false
   */
  announce?: boolean;
  /**
   * With `announce`: the `RateLimit` field also carries `t`, the seconds until the bucket holds one
   * more unit, rounded up (at least 1), as a token bucket announcing its state (Envoy's local rate
   * limit) sends it. @default false
   */
  announceNextUnit?: boolean;
  /**
   * An LLM API, as OpenAI meters one: a second budget of this many requests/min besides the quota
   * of units (its tokens), a bucket of `burstSeconds` too that starts full. A request is accepted
   * when both buckets hold it (one request, its units) and takes from both; a 429 names the
   * budget that ran out (`budget`) and takes one request all the same (failed requests count).
   * `announce` sends OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` fields.
   */
  requestQuota?: number;
}

/** The OK answer, shared: it carries no data. */
const OK: ApiAnswer = { status: 200 };
/** The leaky bucket's refusal: nginx's `limit_req` with `Retry-After: 1` added. */
const LEAKY_429: ApiAnswer = { status: 429, retryAfterMs: 1_000 };
/** The least latency of an answer, ms. */
export const MIN_LATENCY_MS = 5;

/**
 * A model of an API that rate-limits its callers with a hidden quota: a token bucket refilled at
 * the quota (units/min) that holds `burstSeconds` of it and starts full. A request is judged
 * when it is sent: if the bucket holds its units they are taken and it is accepted, otherwise it
 * gets a 429 with a `Retry-After` in whole seconds (at least 1): the time until the bucket will
 * hold its units, rounded up, as servers that count in seconds send it. A 429 costs no quota.
 * The answer reaches the caller after a latency drawn from a seeded log-normal distribution.
 *
 * Quota events (another client taking part of the quota) call {@link setQuota}.
 */
export class ModelApi {
  readonly #clock: Clock;
  readonly #burstSeconds: number;
  readonly #latencyMedianMs: number;
  readonly #latencySigma: number;
  readonly #random: Prng;
  readonly #stallProbability: number;
  readonly #stallMs: number;
  readonly #stalls: Prng | undefined;
  readonly #leakyBurst: number | undefined;
  /** The leaky bucket's excess, in requests (nginx keeps it in 1/1000 requests). */
  #excess = 0;
  /** Whether the leaky bucket has accepted a request (nginx has made the key's node). */
  #leakyUsed = false;
  readonly #announce: boolean;
  readonly #announceNextUnit: boolean;
  #quota: number;
  #capacity: number;
  #tokens: number;
  #refilledAt: number;
  /** The LLM API's request bucket (`requestQuota`): its rate (requests/min), capacity, level. */
  readonly #requests: { quota: number; capacity: number; level: number } | undefined;

  /** Units accepted in each second of the run (index: whole seconds of virtual time). */
  readonly acceptedBySecond: number[] = [];
  /** 429 answers in each second of the run. */
  readonly throttledBySecond: number[] = [];
  acceptedUnits = 0;
  acceptedRequests = 0;
  throttled = 0;

  constructor(options: ModelApiOptions) {
    this.#clock = options.clock;
    this.#burstSeconds = options.burstSeconds;
    this.#latencyMedianMs = options.latencyMedianMs;
    this.#latencySigma = options.latencySigma;
    this.#random = options.random;
    this.#stallProbability = options.stallProbability ?? 0;
    this.#stallMs = options.stallMs ?? 0;
    this.#stalls = options.stalls;
    this.#leakyBurst = options.leakyBurst;
    this.#announce = options.announce === true;
    this.#announceNextUnit = options.announceNextUnit === true;
    this.#quota = options.quota;
    this.#capacity = this.#capacityOf(options.quota);
    this.#tokens = this.#capacity;
    this.#refilledAt = this.#clock.now();
    if (options.requestQuota !== undefined) {
      const capacity = Math.max((options.requestQuota * this.#burstSeconds) / 60, 1);
      this.#requests = { quota: options.requestQuota, capacity, level: capacity };
    }
  }

  /** The quota now, units/min. */
  get quota(): number {
    return this.#quota;
  }

  /** Changes the quota (units/min); the bucket keeps its units, up to its new capacity. */
  setQuota(quota: number): void {
    if (this.#leakyBurst !== undefined) {
      const now = this.#clock.now();
      this.#excess = Math.max(0, this.#excess - ((now - this.#refilledAt) * this.#quota) / 60_000);
      this.#refilledAt = now;
      this.#quota = quota;
      return;
    }
    this.#refill();
    this.#quota = quota;
    this.#capacity = this.#capacityOf(quota);
    if (this.#tokens > this.#capacity) this.#tokens = this.#capacity;
  }

  /** Judges a request of `units` sent now. */
  decide(units: number): ApiAnswer {
    const now = this.#clock.now();
    if (this.#leakyBurst !== undefined) return this.#decideLeaky(units, now);
    this.#refill();
    if (this.#requests !== undefined) return this.#decideLlm(units, now, this.#requests);
    const second = Math.floor(now / 1000);
    if (this.#tokens >= units || (units > this.#capacity && this.#tokens >= this.#capacity)) {
      this.#tokens -= units;
      this.acceptedUnits += units;
      this.acceptedRequests++;
      this.acceptedBySecond[second] = (this.acceptedBySecond[second] ?? 0) + units;
      return this.#announce ? { status: 200, headers: this.#announcement() } : OK;
    }
    this.throttled++;
    this.throttledBySecond[second] = (this.throttledBySecond[second] ?? 0) + 1;
    const need = Math.min(units, this.#capacity) - this.#tokens;
    const waitMs = this.#quota > 0 ? (need * 60_000) / this.#quota : 60_000;
    const retryAfterMs = Math.max(1, Math.ceil(waitMs / 1000)) * 1000;
    return this.#announce
      ? { status: 429, retryAfterMs, headers: this.#announcement() }
      : { status: 429, retryAfterMs };
  }

  /** Both budgets of an LLM API at once (see `requestQuota`); the buckets are refilled to `now`. */
  #decideLlm(
    units: number,
    now: number,
    requests: { quota: number; capacity: number; level: number },
  ): ApiAnswer {
    const second = Math.floor(now / 1000);
    const tokensFit = this.#tokens >= units || (units > this.#capacity && this.#tokens >= this.#capacity);
    if (requests.level >= 1 && tokensFit) {
      requests.level -= 1;
      this.#tokens -= units;
      this.acceptedUnits += units;
      this.acceptedRequests++;
      this.acceptedBySecond[second] = (this.acceptedBySecond[second] ?? 0) + units;
      return this.#announce ? { status: 200, headers: this.#openaiFields(requests) } : OK;
    }
    this.throttled++;
    this.throttledBySecond[second] = (this.throttledBySecond[second] ?? 0) + 1;
    const budget: LlmBudget = requests.level < 1 ? 'requests' : 'tokens';
    const waitMs =
      budget === 'requests'
        ? ((1 - requests.level) * 60_000) / requests.quota
        : this.#quota > 0
          ? ((Math.min(units, this.#capacity) - this.#tokens) * 60_000) / this.#quota
          : 60_000;
    requests.level = Math.max(0, requests.level - 1);
    const retryAfterMs = Math.max(1, Math.ceil(waitMs / 1000)) * 1000;
    return this.#announce
      ? { status: 429, retryAfterMs, budget, headers: this.#openaiFields(requests) }
      : { status: 429, retryAfterMs, budget };
  }

  /** OpenAI's fields for both budgets: limits per minute, what is left, the time until full again. */
  #openaiFields(requests: { quota: number; capacity: number; level: number }): ApiHeaders {
    const untilFull = (level: number, capacity: number, perMinute: number) =>
      perMinute > 0 ? goDuration(((capacity - level) * 60_000) / perMinute) : '0s';
    return {
      'x-ratelimit-limit-requests': String(Math.floor(requests.quota)),
      'x-ratelimit-limit-tokens': String(Math.floor(this.#quota)),
      'x-ratelimit-remaining-requests': String(Math.max(0, Math.floor(requests.level))),
      'x-ratelimit-remaining-tokens': String(Math.max(0, Math.floor(this.#tokens))),
      'x-ratelimit-reset-requests': untilFull(requests.level, requests.capacity, requests.quota),
      'x-ratelimit-reset-tokens': untilFull(this.#tokens, this.#capacity, this.#quota),
    };
  }

  /** The quota and what is left of it, as the IETF RateLimit fields say them. */
  #announcement(): ApiHeaders {
    const r = Math.max(0, Math.floor(this.#tokens));
    let ratelimit = `"default";r=${r}`;
    if (this.#announceNextUnit) {
      const nextMs = this.#quota > 0 ? ((r + 1 - this.#tokens) * 60_000) / this.#quota : 60_000;
      ratelimit += `;t=${Math.max(1, Math.ceil(nextMs / 1000))}`;
    }
    return { 'ratelimit-policy': `"default";q=${Math.floor(this.#quota)};w=60`, ratelimit };
  }

  /** A latency for one answer, ms. */
  latency(): number {
    const base = Math.max(MIN_LATENCY_MS, this.#random.logNormal(this.#latencyMedianMs, this.#latencySigma));
    if (this.#stalls === undefined || this.#stallProbability === 0) return base;
    return this.#stalls.next() < this.#stallProbability ? base + this.#stallMs : base;
  }

  /**
   * nginx's `limit_req`: the excess (requests) drains at the quota; a request adds one, and is
   * refused when that would leave more than `burst` (with a full drain, the one that finds it
   * empty costs nothing: `burst + 1` may go at once). The first request costs nothing either
   * (nginx makes the key's node with no excess), so `burst + 1` go at the start too. A refusal
   * changes nothing; it answers 429 with `Retry-After: 1`. Requests, not units, are counted.
   */
  #decideLeaky(units: number, now: number): ApiAnswer {
    const elapsed = now - this.#refilledAt;
    const excess = this.#leakyUsed ? Math.max(0, this.#excess - (elapsed * this.#quota) / 60_000 + 1) : 0;
    const second = Math.floor(now / 1000);
    if (excess <= this.#leakyBurst! + 1e-9) {
      this.#leakyUsed = true;
      this.#excess = excess;
      this.#refilledAt = now;
      this.acceptedUnits += units;
      this.acceptedRequests++;
      this.acceptedBySecond[second] = (this.acceptedBySecond[second] ?? 0) + units;
      return OK;
    }
    this.throttled++;
    this.throttledBySecond[second] = (this.throttledBySecond[second] ?? 0) + 1;
    return LEAKY_429;
  }

  #capacityOf(quota: number): number {
    return Math.max((quota * this.#burstSeconds) / 60, 1);
  }

  #refill(): void {
    const now = this.#clock.now();
    const elapsed = now - this.#refilledAt;
    if (elapsed > 0) {
      this.#tokens = Math.min(this.#capacity, this.#tokens + (elapsed * this.#quota) / 60_000);
      this.#refilledAt = now;
      const requests = this.#requests;
      if (requests !== undefined) {
        requests.level = Math.min(requests.capacity, requests.level + (elapsed * requests.quota) / 60_000);
      }
    }
  }
}
