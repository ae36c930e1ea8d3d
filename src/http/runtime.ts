import { type Clock, systemClock } from '../clock.js';
import type { LlmApi } from '../config/api.js';
import type { LimiterConfig } from '../config/schema.js';
import { attachDiagnostics } from '../diagnostics.js';
import { ConfigError, type ConfigIssue, configPath, InvalidCallbackValueError } from '../errors.js';
import { type HeaderRecord, headerLookup, type ResponseHeaders } from '../headers.js';
import {
  kAddBusyCheck,
  kChanges,
  kHoldOrigin,
  kKeepPause,
  kPartitionForOrigin,
  kRouteForOrigin,
  kTouchOrigin,
} from '../internal.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { Outcome, RateLimiter } from '../limiter/types.js';
import { limiterRetired, setLimiterSlotGate } from '../limiter/watch.js';
import { OVERFLOW, RateLimiterRegistry } from '../registry/index.js';
import { LazySharedBudget } from '../registry/shared.js';
import { answeredLater, promiseAnswer } from '../thenable.js';
import { type AdapterWait, AdapterWaits } from './adapter-close.js';
import { classifyResponse, type ResponseRules } from './classify.js';
import { ConcurrencyGate } from './concurrency.js';
import { type LlmEstimate, LlmMeter, rateLimitOutcome, refusedCall } from './llm.js';
import { requestBody } from './llm-body.js';
import type { OutgoingRequest, ResolvedInterceptorOptions } from './options.js';
import {
  credentialParts,
  defaultPartitionHeaders,
  partitionId,
  partitionNameOf,
  partitionParts,
  type RequestPartition,
} from './partition.js';
import { type QuotaReader, quotaReader } from './quota-headers/index.js';

/** Where a request goes: its limiter, and the gate that caps its requests in flight. */
export interface Route {
  /**
   * What its requests acquire from: the registry's limiter, or a named limiter's `limiter`
   * instance (a `SharedBudget`, any `RateLimiter`): only `tryAcquire` and `acquire` are used.
   */
  readonly limiter: RateLimiter;
  /** Present when the limiter's config sets `maxConcurrent`. */
  readonly gate: ConcurrencyGate | undefined;
  /**
   * The registry's key of a per-origin (or partition) limiter: each use is reported to the
   * registry, which drops idle ones; `undefined` for a named limiter or the overflow limiter.
   */
  readonly held: string | undefined;
  /**
   * A named limiter's `shared` budget that the registry made (`replace` may take it out): each
   * request holds it too (see {@link HttpRuntime.hold}).
   */
  readonly sharedBudget: boolean;
  /** What reads the quotas its responses announce (`headers`, `quotaFromHeaders`); none: `undefined`. */
  readonly quotas: QuotaReader | undefined;
  /**
   * The key (an origin, or a partition's key) whose requests an overflow limiter serves here
   * because the registry had no room: a 429's pause is kept for it too (see `kKeepPause`), so
   * its next limiter of its own starts with it. `undefined` on any other route.
   */
  readonly overflowed: string | undefined;
  /** The limiter's name (for errors). */
  readonly name: string;
  /** Its `AdaptiveRateLimiter`, for corrections after the answer; none for another kind. */
  readonly adaptive: AdaptiveRateLimiter | undefined;
  /** The meter of its LLM API (`api`), one per limiter; none without `api`. */
  readonly llm: LlmMeter | undefined;
  /**
   * How its requests are split into partitions, each with a limiter of its own (an origin's route
   * only; a partition's own route has none): `undefined` when they are not.
   */
  readonly partitioner: Partitioner | undefined;
  /** Whether `maxConcurrent` caps each partition (`'partition'`) or the origin's requests together. */
  readonly gatePer: 'partition' | 'origin';
  /**
   * Whether the adapter's `close()` closes its limiter (a limiter its own registry made): that
   * limiter then refuses the adapter's waiting requests itself. `false` for a registry passed in
   * or a `limiter` instance, which stay open: the adapter refuses its own requests (see
   * `HttpRuntime.close`).
   */
  readonly closesWithAdapter: boolean;
}

/**
 * A request as partitioning reads it: its headers as the caller gave them (read for the
 * credential headers only), and the {@link OutgoingRequest} a `partition` function sees, made on
 * demand.
 */
export interface PartitionSource {
  readonly headers: unknown;
  readonly request: () => OutgoingRequest;
}

/** The partition of a request, or `undefined` for none (it shares its origin's limiter). */
export type Partitioner = (source: PartitionSource) => RequestPartition | undefined;

/** Routes remembered per runtime, at most (a crawler's many hosts must not grow it without end). */
const MAX_ROUTES = 1024;

/**
 * The registry an adapter makes from its own `limiters`, `default` and `clock`. Its `ConfigError`
 * (a bad field of `default`) names the adapter's options, where the user wrote the field, not the
 * registry's.
 */
function ownRegistry(options: ResolvedInterceptorOptions, source: string): RateLimiterRegistry {
  try {
    return new RateLimiterRegistry({
      ...(options.limiters !== undefined && { limiters: options.limiters }),
      ...(options.default !== undefined && { default: options.default }),
      ...(options.clock !== undefined && { clock: options.clock }),
    });
  } catch (error) {
    throw error instanceof ConfigError ? new ConfigError(error.issues, source) : error;
  }
}

/**
 * What the HTTP adapters share, built once per factory call: the registry, the routes (limiter
 * and concurrency gate per origin, remembered until the registry changes), the units and the
 * verdict of a response. No limiter logic lives here.
 */
export class HttpRuntime {
  readonly registry: RateLimiterRegistry;
  readonly options: ResolvedInterceptorOptions;
  readonly #ownsRegistry: boolean;
  readonly #rules: ResponseRules;
  /** One gate per limiter (per `limiter` instance): a named limiter's origins share its cap. */
  readonly #gates = new WeakMap<RateLimiter, ConcurrencyGate>();
  /** The last gate of each named limiter with `maxConcurrent`, by its name (see `#resolve`). */
  readonly #namedGates = new Map<string, { limiter: RateLimiter; gate: ConcurrencyGate }>();
  /** One LLM meter per limiter (its running averages). */
  readonly #meters = new WeakMap<RateLimiter, LlmMeter>();
  readonly #removeBusyCheck: () => void;
  /** By normalized origin; `null` for an origin passed through. Valid for `registry[kChanges]`. */
  readonly #routes = new Map<string, Route | null>();
  /** Partitions' routes, by the registry's key of the partition. Valid for `registry[kChanges]`. */
  readonly #partitionRoutes = new Map<string, Route>();
  /** Its requests that may wait now, behind a limiter its close leaves open (see {@link close}). */
  readonly #waits = new AdapterWaits();
  /** What ends the reads of held bodies before their retries at the close (see {@link onClose}). */
  readonly #onClose = new Set<() => void>();
  #seenChanges: number;

  /** `source`: what a `ConfigError` names, the factory the user called (`'rateLimitedFetch options'`). */
  constructor(options: ResolvedInterceptorOptions, source = 'adaptiveRateLimit options') {
    this.options = options;
    this.#ownsRegistry = options.registry === undefined;
    this.registry = options.registry ?? ownRegistry(options, source);
    this.#removeBusyCheck = this.registry[kAddBusyCheck]((limiter) => {
      const gate = this.#gates.get(limiter);
      return gate !== undefined && (gate.inFlight > 0 || gate.waiting > 0);
    });
    this.#rules = {
      throttleStatuses: options.throttleStatuses,
      classify: options.classify,
      responseUnits: options.responseUnits,
    };
    this.#seenChanges = this.registry[kChanges];
    const issues = this.#sharedPartitionIssues();
    if (issues.length > 0) {
      this.close();
      throw new ConfigError(issues, source);
    }
  }

  /**
   * A `shared` limiter told to partition (`partitionBy`) without `partitionSecret`: each process
   * would name a partition's budget by its own random hash, and share nothing.
   */
  #sharedPartitionIssues(): ConfigIssue[] {
    if (this.options.partitionSecret !== undefined) return [];
    const issues: ConfigIssue[] = [];
    for (const name of this.registry.names()) {
      const config = this.registry.configFor(name);
      const by = config?.partitionBy;
      if (config?.shared === undefined || config.limiter !== undefined || by === undefined || by === false)
        continue;
      if (by.length === 0) continue;
      issues.push({
        path: configPath(['limiters', name, 'partitionBy']),
        message:
          "a shared budget per partition needs `partitionSecret` (the same in every process), so that every process names a partition's budget alike",
        received: by,
      });
    }
    return issues;
  }

  /**
   * The limiter (and gate) for a normalized origin, or `undefined` to pass the request through.
   * Remembered per origin until the registry adds, removes or replaces a limiter; a per-origin
   * limiter still counts as used at every request, so it is not dropped as idle.
   */
  route(origin: string): Route | undefined {
    const changes = this.registry[kChanges];
    if (this.#seenChanges !== changes) {
      this.#seenChanges = changes;
      this.#routes.clear();
      this.#partitionRoutes.clear();
    }
    const known = this.#routes.get(origin);
    if (known === null) return undefined;
    // The overflow limiter's route is looked up again once its requests are done (none in flight
    // or waiting at its `maxConcurrent` gate, which a new limiter's would not count): the origin
    // gets a limiter of its own once there is room (another's 429 would pause it for good).
    if (
      known !== undefined &&
      (known.name !== OVERFLOW ||
        (known.gate !== undefined && known.gate.inFlight + known.gate.waiting > 0)) &&
      (known.held === undefined || this.registry[kTouchOrigin](known.held) === known.limiter)
    ) {
      return known;
    }
    return this.#resolve(origin, known);
  }

  /**
   * The route of `source`'s partition, when `route` (the origin's, from {@link route}) partitions
   * its requests and the request belongs to a partition; else `route` itself.
   * @throws {InvalidCallbackValueError} when `partition` or `partitionName` returns a bad value.
   */
  partitionRoute(origin: string, route: Route, source: PartitionSource): Route {
    const partition = route.partitioner?.(source);
    if (partition === undefined) return route;
    const found = this.registry[kPartitionForOrigin](origin, partition);
    if (found === undefined) return route;
    const { key, instance, own } = found;
    // A shared budget's local limiter comes once its code has loaded: attached then.
    if (found.limiter !== undefined && found.limiter !== route.limiter) attachDiagnostics(found.limiter);
    else if (found.instance instanceof LazySharedBudget) found.instance.onLimiter(attachDiagnostics);
    const known = this.#partitionRoutes.get(key);
    if (known !== undefined && known.limiter === instance) return known;
    let gate = route.gate;
    if (gate !== undefined && route.gatePer === 'partition' && instance !== route.limiter) {
      const max = gate.max;
      gate = this.#gates.get(instance);
      if (gate === undefined || gate.max !== max) {
        gate = new ConcurrencyGate(max);
        this.#gates.set(instance, gate);
      }
    } else if (gate !== undefined && own) {
      // One cap for the origin: the partition's limiter is busy while that gate is.
      this.#gates.set(instance, gate);
    }
    if (gate !== undefined && found.limiter !== undefined) setLimiterSlotGate(found.limiter, gate);
    const partitioned: Route = {
      limiter: instance,
      gate,
      held: own ? key : undefined,
      overflowed: own ? undefined : key,
      sharedBudget: false,
      quotas: route.quotas,
      partitioner: undefined,
      gatePer: route.gatePer,
      closesWithAdapter: route.closesWithAdapter,
      name: key,
      adaptive: found.limiter,
      llm: route.llm === undefined ? undefined : this.#meterOf(instance, route.llm.api),
    };
    if (this.#partitionRoutes.size >= MAX_ROUTES) this.#partitionRoutes.clear();
    this.#partitionRoutes.set(key, partitioned);
    return partitioned;
  }

  /**
   * Looks the route of `origin` up in the registry and builds it. `known`: the route remembered
   * for it, looked up again (see {@link route}); when that is the overflow limiter's and the
   * registry still has no room, it is returned as it is: it was built again at every request
   * (its entry's config read, its quota reader, partitioner and meter made anew). The registry's
   * look for room (at most 16 limiters looked at) still runs at each of them: it is how the origin
   * leaves the overflow limiter as soon as a limiter's requests are done.
   */
  #resolve(origin: string, known?: Route): Route | undefined {
    // A limiter made now (a change of the registry) clears the routes at the next request:
    // simpler than telling which routes the look-up's own changes leave valid.
    const found = this.registry[kRouteForOrigin](origin);
    // Nothing it was built from changed: the registry's entries (else `route` cleared it), the
    // limiter, and `held`, which is never set for the overflow limiter.
    if (known?.name === OVERFLOW && found?.name === OVERFLOW && found.limiter === known.limiter) return known;
    if (this.#routes.size >= MAX_ROUTES) this.#routes.clear();
    if (found === undefined) {
      this.#routes.set(origin, null);
      return undefined;
    }
    const { limiter, adaptive } = found;
    // A limiter instance without an AdaptiveRateLimiter (neither one nor holding one) publishes nothing.
    if (adaptive !== undefined) attachDiagnostics(adaptive);
    else if (limiter instanceof LazySharedBudget) limiter.onLimiter(attachDiagnostics);
    const config = this.registry.configFor(found.name);
    const maxConcurrent = config?.maxConcurrent;
    let gate: ConcurrencyGate | undefined;
    if (maxConcurrent !== undefined) {
      const named = found.name !== origin && found.name !== OVERFLOW;
      gate = this.#gates.get(limiter);
      // A named limiter `replace` made anew with the same cap keeps the gate of the one it
      // replaced: the requests in flight through that one still hold their slots. Not after
      // `remove` (its limiter is closed, not taken out), nor a `limiter` instance's gate.
      const before = named && gate === undefined ? this.#namedGates.get(found.name) : undefined;
      if (before !== undefined && limiterRetired(before.limiter) && config?.limiter === undefined)
        gate = before.gate;
      // A `limiter` instance outlives a `replace` that changes its cap: a new cap, a new gate.
      if (gate === undefined || gate.max !== maxConcurrent) gate = new ConcurrencyGate(maxConcurrent);
      this.#gates.set(limiter, gate);
      if (named) this.#namedGates.set(found.name, { limiter, gate });
      // The metrics count the waits for its slots under the limiter (a shared budget's local
      // limiter once its code has loaded).
      const slots = gate;
      if (adaptive !== undefined) setLimiterSlotGate(adaptive, slots);
      else if (limiter instanceof LazySharedBudget)
        limiter.onLimiter((local) => setLimiterSlotGate(local, slots));
    }
    const api = config?.api;
    // A shared budget per partition needs ids every process computes alike: `partitionSecret`.
    const partitionable =
      config !== undefined &&
      config.limiter === undefined &&
      (config.shared === undefined || this.options.partitionSecret !== undefined);
    const held = this.registry[kTouchOrigin](origin) === limiter ? origin : undefined;
    const route: Route = {
      limiter,
      gate,
      held,
      overflowed: found.name === OVERFLOW ? origin : undefined,
      sharedBudget: held === undefined && limiter instanceof LazySharedBudget,
      quotas: quotaReader(config?.headers ?? api, config?.quotaFromHeaders),
      partitioner: partitionable ? this.#partitioner(config) : undefined,
      gatePer: config?.maxConcurrentPer ?? 'partition',
      closesWithAdapter: this.#ownsRegistry && config?.limiter === undefined,
      name: found.name,
      adaptive,
      llm: api === undefined ? undefined : this.#meterOf(limiter, api),
    };
    this.#routes.set(origin, route);
    return route;
  }

  /**
   * How the requests of a limiter made from `config` are partitioned: by the limiter's own
   * `partitionBy` headers when it sets them (`false` or `[]`: not by credential), else by the
   * adapter's `partition` function, else by the credential headers (see
   * `defaultPartitionHeaders`); a limiter with `api` also by the request body's `model`.
   */
  #partitioner(config: LimiterConfig): Partitioner | undefined {
    const { partition, partitionName, partitionSecret: secret } = this.options;
    const by = config.partitionBy;
    const named =
      partitionName === undefined
        ? () => undefined
        : (source: PartitionSource) => () =>
            partitionNameOf(partitionName(source.request()), () => describe(source));
    const off = by === false || (by !== undefined && by.length === 0);
    if (off && config.api === undefined) return undefined;
    if (by === undefined && partition !== undefined) {
      return (source) => {
        const parts = partitionParts(partition(source.request()), () => describe(source));
        return parts === undefined ? undefined : { id: partitionId(parts, secret), name: named(source) };
      };
    }
    const headers = off
      ? []
      : by === undefined
        ? defaultPartitionHeaders(config.headers)
        : (by as readonly string[]).map((h) => h.toLowerCase());
    if (config.api !== undefined) {
      // An LLM API limits each model apart: a limiter per (credential, model), and per model
      // alone when partitioning by credential is off.
      return (source) => {
        const credential = headers.length === 0 ? undefined : credentialParts(source.headers, headers);
        const model = modelOf(source.request());
        if (credential === undefined && model === undefined) return undefined;
        const parts = [...(credential ?? []), ...(model === undefined ? [] : ['model', model])];
        return { id: partitionId(parts, secret), name: named(source) };
      };
    }
    return (source) => {
      const parts = credentialParts(source.headers, headers);
      return parts === undefined ? undefined : { id: partitionId(parts, secret), name: named(source) };
    };
  }

  /** The LLM meter of `limiter` (its running averages), made at its first use. */
  #meterOf(limiter: RateLimiter, api: LlmApi): LlmMeter {
    let meter = this.#meters.get(limiter);
    if (meter === undefined || meter.api !== api) {
      meter = new LlmMeter(api);
      this.#meters.set(limiter, meter);
    }
    return meter;
  }

  /** The gate capping `limiter`'s requests in flight, if one was made (read-only: for tests). */
  gateOf(limiter: RateLimiter): ConcurrencyGate | undefined {
    return this.#gates.get(limiter);
  }

  /**
   * Counts a request in progress through `route`: its per-origin (or partition) limiter is not
   * dropped, and a named `shared` budget that `replace` took out is not closed (its answer may
   * pause it, its retry needs it), until the returned function is called, once the request's
   * last answer is judged.
   */
  hold(route: Route): () => void {
    return route.held !== undefined || route.sharedBudget
      ? this.registry[kHoldOrigin](route.held, route.limiter)
      : noop;
  }

  /**
   * Whether a request through `route` has its body read before it is sent: by an LLM API's
   * estimate and split by model, by the options' `units`, or by `partition` or `partitionName`
   * when the route partitions its requests (a limiter with `partitionBy: false` and no `api` asks
   * neither). Such a body sent compressed is decoded first (see `decodingOf`): one no callback
   * reads is not waited for.
   */
  readsBody(route: Route): boolean {
    const { units, partition, partitionName } = this.options;
    return (
      route.llm !== undefined ||
      units !== undefined ||
      (route.partitioner !== undefined && (partition !== undefined || partitionName !== undefined))
    );
  }

  /** The units a request is charged: `units(request)`, default 1. @throws {InvalidCallbackValueError} on a bad answer. */
  unitsFor(request: () => OutgoingRequest): number {
    const units = this.options.units;
    if (units === undefined) return 1;
    const r = request();
    const n = units(r);
    if (typeof n !== 'number' || !(n > 0) || !Number.isFinite(n)) {
      throw new InvalidCallbackValueError(
        'units',
        `units(${r.method} ${r.origin}${r.path}) returned ${answeredLater(n) ? promiseAnswer('units') : String(n)}; it must return a finite number > 0`,
        n,
      );
    }
    return n;
  }

  /**
   * The outcome of a response, with the quotas `route` reads from it; see {@link classifyResponse}.
   * For an LLM API's limiter, a throttled answer names the budgets that ran out, and one refused
   * for a spend cap or a used-up quota (`refusal` of its body, when read) fails: no cut, no retry.
   * A 4xx it judges a success (400 `invalid_request_error`: the API refused the call without
   * doing it) is `refused`: the call gives back its token budgets' draws (see `BudgetedPermit`),
   * and so is a 429 that says the call alone is larger than a whole budget (OpenAI's "Request too
   * large"): no cut, no pause, no retry. A rate limit's 429 is judged by {@link rateLimitOutcome}:
   * the wait its message asks for when its headers ask for none, and no cut for a limit per day.
   */
  classify(
    { status, headers }: { readonly status: number; readonly headers: ResponseHeaders },
    record: () => HeaderRecord,
    route?: Route,
    body?: unknown,
  ): Outcome {
    const outcome = this.#outcome(status, headers, record, route, body);
    // Through an overflow limiter, the pause is the requests' key's too: kept for its own next
    // limiter, or it was lost once the key left the overflow limiter.
    const key = route?.overflowed;
    if (
      key !== undefined &&
      outcome.kind === 'throttled' &&
      outcome.retryAfterMs !== undefined &&
      outcome.retryAfterMs > 0
    )
      this.registry[kKeepPause](key, outcome.retryAfterMs);
    return outcome;
  }

  /**
   * The quotas `route` reads from an answer whose `classify` threw, for its permit: the call was
   * sent and answered, so the API counted it, and the window's credit counts it whatever
   * `classify` did. Settled with no quota, the call's unit was released as an answer with no quota
   * headers is, and a burst that followed sent one call more than the window had left.
   * `undefined` when the answer announces none, or when reading them threw too (a
   * `quotaFromHeaders` of the caller's): the caller gets the error `classify` threw.
   */
  thrownQuota(
    { headers }: { readonly headers: ResponseHeaders },
    record: () => HeaderRecord,
    route?: Route,
  ): Outcome['quota'] {
    const quotas = route?.quotas;
    if (quotas === undefined) return undefined;
    try {
      return quotas(headerLookup(headers), record, Date.now());
    } catch {
      return undefined;
    }
  }

  #outcome(
    status: number,
    headers: ResponseHeaders,
    record: () => HeaderRecord,
    route: Route | undefined,
    body: unknown,
  ): Outcome {
    const outcome = classifyResponse(status, headers, this.#rules, record, route?.quotas);
    const llm = route?.llm;
    if (llm === undefined) return outcome;
    if (outcome.kind === 'success') return refusedCall(status) ? { ...outcome, refused: true } : outcome;
    if (outcome.kind !== 'throttled') return outcome;
    const refusal = llm.refusal(body);
    if (refusal.kind === 'quota') return { kind: 'failed', quota: outcome.quota };
    if (refusal.kind === 'call') return { kind: 'success', quota: outcome.quota, refused: true };
    return rateLimitOutcome(outcome, refusal);
  }

  /** An LLM API's estimate of a request (`undefined` for another limiter); see {@link LlmMeter}. */
  estimate(route: Route, request: () => OutgoingRequest): LlmEstimate | undefined {
    const llm = route.llm;
    if (llm === undefined) return undefined;
    const made = request();
    // The body read for the split by model is not read again (see `requestBody`).
    return llm.estimateOf(() => requestBody(made), made.method, made.path);
  }

  /**
   * The clock `route`'s timers run on: its limiter's (the registry's clock, a `ManualClock` in
   * tests), else the adapter's `clock` option, else the system's. What bounds the read of an LLM
   * API's 429 body (see `REFUSAL_READ_TIMEOUT_MS`).
   */
  clockOf(route: Route): Clock {
    return route.adaptive?.clock ?? this.options.clock ?? systemClock;
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#waits.closed;
  }

  /**
   * Counts `wait` among the adapter's requests that may wait, until {@link untrack}: when the
   * adapter closes, or at once when it is closed, one behind a limiter the close leaves open is
   * refused (`adapterClosed`). One behind a limiter the close closes is left to that limiter.
   */
  track(wait: AdapterWait): void {
    this.#waits.track(wait);
  }

  untrack(wait: AdapterWait): void {
    this.#waits.untrack(wait);
  }

  /**
   * Closes the registry if this runtime made it (its limiters refuse their waiting requests,
   * reason `closed`). A registry passed in and a `limiter` instance stay open for their other
   * users: the adapter's own requests that wait for them (for a slot of its gates or for units)
   * are refused at once with `RateLimitRejectedError` `'closed'`, and so are the later ones and
   * the retries of those in flight (whose callers get the answer held for the retry); a request
   * in flight runs to its answer. Idempotent.
   */
  close(): void {
    if (this.#waits.closed) return;
    const refuseWaits = this.#waits.close();
    this.#removeBusyCheck();
    if (this.#ownsRegistry) this.registry.close();
    refuseWaits();
    const stops = [...this.#onClose];
    this.#onClose.clear();
    for (const stop of stops) stop();
  }

  /**
   * Calls `stop` once when the adapter closes (at once if it is closed); returns what forgets it.
   * A retry reading the rest of the body of the answer it replaces (`HELD_BODY_DRAIN_MS`) stops
   * there: nothing more is sent, and the caller gets that answer, its body still coming, at once.
   * It waited for the body's end or the limiter's clock (for ever on a clock never advanced).
   */
  onClose(stop: () => void): () => void {
    if (this.closed) {
      stop();
      return () => {};
    }
    this.#onClose.add(stop);
    return () => this.#onClose.delete(stop);
  }
}

/** A request as a callback's error names it: method, origin and path, never a header. */
function describe(source: PartitionSource): string {
  const r = source.request();
  // The path without its query, which may carry a secret.
  return `${r.method} ${r.origin}${r.path.split('?')[0]}`;
}

/** The `model` of an LLM API request's body, when it names one. */
function modelOf(request: OutgoingRequest): string | undefined {
  // Read as the estimate reads it, once for both (a compressed body decoded, a string parsed).
  const model = requestBody(request).object?.model;
  return typeof model === 'string' && model !== '' ? model : undefined;
}

function noop(): void {}
