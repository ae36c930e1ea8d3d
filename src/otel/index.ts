import {
  type Attributes,
  type BatchObservableCallback,
  type Histogram,
  type Meter,
  type MeterProvider,
  metrics,
  type Observable,
  ValueType,
} from '@opentelemetry/api';
import { InvalidArgumentError, type RejectionReason, unknownKeyMessage } from '../errors.js';
import type { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import type { LimiterEventMap } from '../limiter/events.js';
import type { LimiterSnapshot } from '../limiter/types.js';
import {
  addLimiterWatcher,
  limiterOrigins,
  limiterPartition,
  limiterRetired,
  limiterSlotGate,
  type SlotGate,
} from '../limiter/watch.js';
import { redactText } from '../redact.js';

/** Options of {@link enableMetrics}. */
export interface MetricsOptions {
  /** The provider to record through. @default the global one of `@opentelemetry/api` */
  meterProvider?: MeterProvider;
}

/** What {@link enableMetrics} returns. */
export interface MetricsHandle {
  /** Stops recording: listeners removed, observable callbacks dropped. Idempotent. */
  disable(): void;
}

/** The meter's name (the instrumentation scope). */
export const METER_NAME = 'adaptive-rate-limit';

/** The instruments' names; docs/metrics.md says what each answers. */
export const METRICS = {
  requests: 'adaptive_rate_limit.requests',
  responses: 'adaptive_rate_limit.responses',
  queuedRequests: 'adaptive_rate_limit.queued_requests',
  slotQueuedRequests: 'adaptive_rate_limit.slot.queued_requests',
  timeInQueue: 'adaptive_rate_limit.request.time_in_queue',
  rate: 'adaptive_rate_limit.rate.current',
  rateLimit: 'adaptive_rate_limit.rate.limit',
  announcedRate: 'adaptive_rate_limit.rate.announced',
  acceptedRate: 'adaptive_rate_limit.rate.accepted',
  pauses: 'adaptive_rate_limit.pauses',
  pauseDuration: 'adaptive_rate_limit.pause.duration',
  cuts: 'adaptive_rate_limit.cuts',
} as const;

/** The attributes' names besides `server.address` and `server.port`. */
export const ATTRIBUTES = {
  limiter: 'adaptive_rate_limit.limiter',
  controller: 'adaptive_rate_limit.controller',
  result: 'adaptive_rate_limit.result',
  reason: 'adaptive_rate_limit.rejection.reason',
  partition: 'adaptive_rate_limit.partition',
  budget: 'adaptive_rate_limit.budget',
} as const;

/** .NET's `http.client.request.time_in_queue` buckets (s), with the longer waits a limiter has. */
const QUEUE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60];
const PAUSE_BUCKETS = [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
const UNITS_PER_MINUTE = '{unit}/min';

/**
 * Records every limiter of the process (the undici interceptor's, the fetch wrapper's, `wrap`'s,
 * shared budgets', your own `AdaptiveRateLimiter`s) as OpenTelemetry metrics, through
 * `options.meterProvider` or the global MeterProvider. Each limiter is recorded from its first
 * request after this call (whenever it was made). Calls with the same MeterProvider share one
 * recorder (each event counted once); it stops when each call's handle was disabled.
 *
 * The instruments and their attributes are listed in docs/metrics.md (and {@link METRICS}).
 *
 * @throws {InvalidArgumentError} when `options.meterProvider` is not a MeterProvider (`null`
 * included), `options` has a key it does not know (a misspelt `meterProvider`), or is itself a
 * MeterProvider (given where `{ meterProvider }` goes).
 */
export function enableMetrics(options: MetricsOptions = {}): MetricsHandle {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError('enableMetrics', 'options', 'must be an object', options);
  }
  // A provider given as the options (`enableMetrics(provider)`) was told an unknown key of the
  // SDK's own (`_sharedState`).
  if (typeof (options as { getMeter?: unknown }).getMeter === 'function') {
    throw new InvalidArgumentError(
      'enableMetrics',
      'options',
      'must be an object of options: pass the provider as { meterProvider }',
      options,
    );
  }
  // A misspelt key (`meterprovider`) or a provider of null recorded through the global provider,
  // a no-op one until an SDK registers it: every metric lost without a word.
  for (const key of Object.keys(options)) {
    if (!METRICS_OPTION_KEYS.includes(key))
      throw new InvalidArgumentError(
        'enableMetrics',
        key,
        unknownKeyMessage(key, METRICS_OPTION_KEYS),
        (options as Record<string, unknown>)[key],
      );
  }
  const provider = options.meterProvider === undefined ? metrics.getMeterProvider() : options.meterProvider;
  if (typeof provider?.getMeter !== 'function') {
    throw new InvalidArgumentError(
      'enableMetrics',
      'meterProvider',
      'must be a MeterProvider (an object with getMeter)',
      provider,
    );
  }
  const meter = provider.getMeter(METER_NAME);
  // One recorder per meter: the SDK hands each call the same instruments, so a second recorder
  // counted each pause, cut and throttled answer twice (and the requests once). A second call
  // shares the first one's; it stops when every handle was disabled.
  let shared = recorders.get(meter);
  if (shared === undefined || shared.handles === 0) {
    shared = { metrics: new LimiterMetrics(meter), handles: 0 };
    recorders.set(meter, shared);
  }
  const recorder = shared;
  recorder.handles++;
  let disabled = false;
  return {
    disable: () => {
      if (disabled) return;
      disabled = true;
      if (--recorder.handles === 0) recorder.metrics.handle.disable();
    },
  };
}

/** The keys of {@link MetricsOptions}. */
const METRICS_OPTION_KEYS: readonly string[] = ['meterProvider'];

/** The recorder of each meter, and how many handles of `enableMetrics` it serves. */
const recorders = new WeakMap<Meter, { metrics: LimiterMetrics; handles: number }>();
/** The series of each meter, whichever recorder counts into them (see `LimiterMetrics`). */
const seriesOfMeter = new WeakMap<Meter, Map<string, Series>>();

/** The series of one limiter name (a limiter made again under the same name continues it). */
interface Series {
  readonly key: string;
  /** Whether it is in the series reported (see `#prune`); an event of its limiter puts it back. */
  kept: boolean;
  readonly attributes: Attributes;
  acquired: number;
  waited: number;
  /** Waits the caller aborted (reported once there was one). */
  canceled: number;
  rejected: Map<RejectionReason, number>;
}

/** One limiter's listeners and series. */

interface Watched {
  /** The series its events count into; another after `rekey`. */
  series: Series;
  /** Counts into the series of the limiter's attributes now (its controller changed by `update`). */
  rekey(limiter: AdaptiveRateLimiter): void;
  readonly ref: WeakRef<AdaptiveRateLimiter>;
  readonly listeners: { [K in keyof LimiterEventMap]?: (...args: LimiterEventMap[K]) => void };
  /** The series' attributes with `budget` (a limiter of several budgets), made once per budget. */
  forBudget(budget: string | undefined, extra?: Attributes): Attributes;
}

/**
 * The series reported before the idle ones are left out (see `#prune`): the requests counter has
 * two points a series (acquired, waited) and one a reason of refusal, and the OpenTelemetry SDK
 * keeps 2,000 points a metric by default (more go to its overflow point).
 */
const MAX_KEPT_SERIES = 800;

class LimiterMetrics {
  readonly #watched = new WeakMap<AdaptiveRateLimiter, Watched>();
  /** What the observable instruments read, pruned of collected limiters at each collection. */
  readonly #live = new Set<Watched>();
  readonly #series: Map<string, Series>;
  readonly #timeInQueue: Histogram;
  readonly #pauseDuration: Histogram;
  readonly #responses;
  readonly #pauses;
  readonly #cuts;
  readonly #stop: () => void;
  #disabled = false;

  constructor(meter: Meter) {
    // The totals of a meter's series outlive its recorder: `enableMetrics()` again after every
    // handle was disabled counted from 0 again, and the cumulative requests counter went down.
    this.#series = seriesOfMeter.get(meter) ?? new Map();
    seriesOfMeter.set(meter, this.#series);
    this.#timeInQueue = meter.createHistogram(METRICS.timeInQueue, {
      description:
        'Time a request waited in the limiter before it was sent, for the requests that waited (those sent at once are requests{result="acquired"}).',
      unit: 's',
      advice: { explicitBucketBoundaries: QUEUE_BUCKETS },
    });
    this.#pauseDuration = meter.createHistogram(METRICS.pauseDuration, {
      description: 'Length of each pause of sends, after a Retry-After or an exhausted quota.',
      unit: 's',
      advice: { explicitBucketBoundaries: PAUSE_BUCKETS },
    });
    this.#responses = meter.createCounter(METRICS.responses, {
      description:
        'Answers that slowed the limiter, by result: throttled (a throttle status, 429 by default) or failed.',
      unit: '{response}',
      valueType: ValueType.INT,
    });
    this.#pauses = meter.createCounter(METRICS.pauses, {
      description: 'Pauses of every send of a limiter, after a Retry-After or an exhausted quota.',
      unit: '{pause}',
      valueType: ValueType.INT,
    });
    this.#cuts = meter.createCounter(METRICS.cuts, {
      description: 'Cuts of the rate after a throttled answer.',
      unit: '{cut}',
      valueType: ValueType.INT,
    });
    const requests = meter.createObservableCounter(METRICS.requests, {
      description:
        'Requests that asked the limiter for units, by result: acquired (at once), waited (acquired after a wait), rejected (by reason), canceled (the caller aborted its wait).',
      unit: '{request}',
      valueType: ValueType.INT,
    });
    const queued = meter.createObservableUpDownCounter(METRICS.queuedRequests, {
      description: 'Requests waiting in the limiter now.',
      unit: '{request}',
      valueType: ValueType.INT,
    });
    const slotQueued = meter.createObservableUpDownCounter(METRICS.slotQueuedRequests, {
      description: 'Requests waiting for a maxConcurrent slot of the HTTP adapters now.',
      unit: '{request}',
      valueType: ValueType.INT,
    });
    const gauge = (name: string, description: string) =>
      meter.createObservableGauge(name, { description, unit: UNITS_PER_MINUTE });
    const rate = gauge(METRICS.rate, "The limiter's current rate in this process (units per minute).");
    const limit = gauge(
      METRICS.rateLimit,
      'The highest rate the limiter may reach in this process (maxUnitsPerMinute).',
    );
    const announced = gauge(METRICS.announcedRate, "The rate the API's quota headers allow this process.");
    const accepted = gauge(METRICS.acceptedRate, 'The rate the API accepted over the last window.');

    const observables: Observable[] = [requests, queued, slotQueued, rate, limit, announced, accepted];
    const collect: BatchObservableCallback = (result) => {
      for (const series of this.#series.values()) {
        const { attributes } = series;
        result.observe(requests, series.acquired, { ...attributes, [ATTRIBUTES.result]: 'acquired' });
        result.observe(requests, series.waited, { ...attributes, [ATTRIBUTES.result]: 'waited' });
        if (series.canceled > 0) {
          result.observe(requests, series.canceled, { ...attributes, [ATTRIBUTES.result]: 'canceled' });
        }
        for (const [reason, count] of series.rejected) {
          result.observe(requests, count, {
            ...attributes,
            [ATTRIBUTES.result]: 'rejected',
            [ATTRIBUTES.reason]: reason,
          });
        }
      }
      // By series: the queued requests of its live limiters add up (two unnamed limiters share
      // one); the rates are its newest limiter's (a registry's limiter made again for an origin,
      // while the one it dropped lives on until it is collected, reported its old rate).
      const bySeries = new Map<
        Series,
        { queued: number; slots: number | undefined; watched: Watched; s: LimiterSnapshot; retired: boolean }
      >();
      // A gate an origin's partitions share counts once, under the first of them read.
      const gates = new Set<SlotGate>();
      for (const watched of this.#live) {
        const limiter = watched.ref.deref();
        if (limiter === undefined) {
          this.#live.delete(watched);
          continue;
        }
        const s = limiter.snapshot();
        // Closed: no queue and no rate to report. Its listeners stay (a refusal or a late 429
        // after the close still counts) until it is collected, or `disable()`.
        if (s.closed) continue;
        // `update({ controller })`: its series from now on name the new one.
        if (limiter.controllerName !== watched.series.attributes[ATTRIBUTES.controller])
          watched.rekey(limiter);
        // A budget's own limiter (one of several): its owner reports it, under its name.
        if (s.budget !== undefined && s.budgets === undefined) continue;
        // Left out of the report (idle past MAX_KEPT_SERIES, see `#prune`): its gauges too.
        if (!watched.series.kept) continue;
        const gate = limiterSlotGate(limiter);
        let slots: number | undefined;
        if (gate !== undefined && !gates.has(gate)) {
          gates.add(gate);
          slots = gate.waiting;
        }
        const seen = bySeries.get(watched.series);
        // `#live` keeps the order limiters were first watched in: the later one is the newer,
        // unless the registry took it out (`replace`): its gauges give way to the one in its place.
        const retired = limiterRetired(limiter);
        if (seen === undefined)
          bySeries.set(watched.series, { queued: s.queued, slots, watched, s, retired });
        else {
          seen.queued += s.queued;
          if (slots !== undefined) seen.slots = (seen.slots ?? 0) + slots;
          if (!retired || seen.retired) {
            seen.watched = watched;
            seen.s = s;
            seen.retired = retired;
          }
        }
      }
      for (const [{ attributes }, { queued: count, slots, watched, s }] of bySeries) {
        result.observe(queued, count, attributes);
        if (slots !== undefined) result.observe(slotQueued, slots, attributes);
        for (const [budget, b] of s.budgets === undefined
          ? [[undefined, s] as const]
          : Object.entries(s.budgets)) {
          const at = watched.forBudget(budget);
          if (Number.isFinite(b.rate)) result.observe(rate, b.rate, at);
          if (Number.isFinite(b.maxRate)) result.observe(limit, b.maxRate, at);
          if (b.announcedRate !== undefined) result.observe(announced, b.announcedRate, at);
          if (b.acceptedRate !== undefined) result.observe(accepted, b.acceptedRate, at);
        }
      }
    };
    meter.addBatchObservableCallback(collect, observables);
    const removeWatcher = addLimiterWatcher({
      watch: (limiter: AdaptiveRateLimiter) => this.#watch(limiter),
    });
    this.#stop = () => {
      removeWatcher();
      meter.removeBatchObservableCallback(collect, observables);
      for (const watched of this.#live) {
        const limiter = watched.ref.deref();
        if (limiter !== undefined) this.#forget(limiter, watched);
      }
      this.#live.clear();
    };
  }

  readonly handle: MetricsHandle = {
    disable: () => {
      if (this.#disabled) return;
      this.#disabled = true;
      this.#stop();
    },
  };

  #watch(limiter: AdaptiveRateLimiter): void {
    if (this.#disabled || this.#watched.has(limiter)) return;
    let series = this.#seriesOf(limiter);
    let base = series.attributes;
    const made = new Map<string, Attributes>();
    // The limiter is given, not kept: what the registry holds of it is a WeakRef.
    const rekey = (current: AdaptiveRateLimiter) => {
      series = this.#seriesOf(current);
      base = series.attributes;
      made.clear();
      watched.series = series;
    };
    const forBudget = (budget: string | undefined, extra?: Attributes): Attributes => {
      const key = `${budget ?? ''}\u0000${extra === undefined ? '' : JSON.stringify(extra)}`;
      let attributes = made.get(key);
      if (attributes === undefined) {
        attributes = { ...base, ...(budget === undefined ? {} : { [ATTRIBUTES.budget]: budget }), ...extra };
        made.set(key, attributes);
      }
      return attributes;
    };
    const throttled = { [ATTRIBUTES.result]: 'throttled' };
    const failed = { [ATTRIBUTES.result]: 'failed' };
    const listeners: Watched['listeners'] = {
      acquired: (e) => {
        if (!series.kept) watched.series = series = this.#keep(series);
        // As ASP.NET Core's time_in_queue: only requests that waited. Recording each request
        // sent at once (a zero) would cost the SDK an attribute hash per request, several µs;
        // they are `requests{result="acquired"}`.
        if (e.waited > 0) {
          series.waited++;
          this.#timeInQueue.record(e.waited / 1000, base);
        } else series.acquired++;
      },
      rejected: (e) => {
        if (!series.kept) watched.series = series = this.#keep(series);
        series.rejected.set(e.reason, (series.rejected.get(e.reason) ?? 0) + 1);
      },
      canceled: () => {
        if (!series.kept) watched.series = series = this.#keep(series);
        series.canceled++;
      },
      throttled: (e) => {
        this.#responses.add(1, forBudget(e.budget, throttled));
        if (e.cut) this.#cuts.add(1, forBudget(e.budget));
      },
      failed: (e) => this.#responses.add(1, forBudget(e.budget, failed)),
      paused: (e) => {
        this.#pauses.add(1, forBudget(e.budget));
        this.#pauseDuration.record(e.ms / 1000, forBudget(e.budget));
      },
    };
    const watched: Watched = { series, rekey, ref: new WeakRef(limiter), listeners, forBudget };
    this.#watched.set(limiter, watched);
    this.#live.add(watched);
    for (const [event, listener] of Object.entries(listeners)) {
      limiter.on(event as 'acquired', listener as (...args: LimiterEventMap['acquired']) => void);
    }
  }

  #forget(limiter: AdaptiveRateLimiter, watched: Watched): void {
    for (const [event, listener] of Object.entries(watched.listeners)) {
      limiter.off(event as 'acquired', listener as (...args: LimiterEventMap['acquired']) => void);
    }
    this.#live.delete(watched);
  }

  #seriesOf(limiter: AdaptiveRateLimiter): Series {
    const attributes = limiterAttributes(limiter);
    const key = JSON.stringify(attributes);
    let series = this.#series.get(key);
    if (series === undefined) {
      series = { key, kept: false, attributes, acquired: 0, waited: 0, canceled: 0, rejected: new Map() };
      this.#keep(series);
    }
    return series;
  }

  /**
   * Reports `series` again (made, or counted into after `#prune` left it out), and returns the
   * series to count into from now on: when another limiter made a series of the same key while
   * this one was left out (a limiter made again under its name), that one, with this one's totals
   * added: the reported totals never go down, and neither limiter's counts are lost.
   */
  #keep(series: Series): Series {
    const current = this.#series.get(series.key);
    if (current !== undefined && current !== series) {
      current.acquired += series.acquired;
      current.waited += series.waited;
      current.canceled += series.canceled;
      for (const [reason, n] of series.rejected)
        current.rejected.set(reason, (current.rejected.get(reason) ?? 0) + n);
      series.acquired = series.waited = series.canceled = 0;
      series.rejected.clear();
      return current;
    }
    if (this.#series.size >= MAX_KEPT_SERIES) this.#prune();
    series.kept = true;
    this.#series.set(series.key, series);
    return series;
  }

  /**
   * Leaves out of the report every series whose limiter waits for nothing now (an origin's the
   * registry dropped, an idle one): a crawler's 100,000 origins kept one series each for good,
   * 79 MiB walked at each collection. A limiter counted again puts its series back with its
   * totals (a gap in the series, not a reset); one collected or closed is gone.
   */
  #prune(): void {
    const busy = new Set<Series>();
    for (const watched of this.#live) {
      const limiter = watched.ref.deref();
      if (limiter === undefined) continue;
      const snapshot = limiter.snapshot();
      if (!snapshot.closed && snapshot.queued > 0) busy.add(watched.series);
    }
    for (const [key, series] of this.#series) {
      if (busy.has(series)) continue;
      series.kept = false;
      this.#series.delete(key);
    }
  }
}

/**
 * A limiter's attributes: its name, its controller, its partition's short id (a limiter of a
 * partition), and `server.address` / `server.port` when it serves one known origin (a per-origin
 * limiter or a partition's, or a named one that lists one exact origin). Events of a limiter of
 * several budgets add `adaptive_rate_limit.budget`.
 */
export function limiterAttributes(limiter: AdaptiveRateLimiter): Attributes {
  const attributes: Attributes = {
    [ATTRIBUTES.limiter]: redactText(limiter.name),
    [ATTRIBUTES.controller]: limiter.controllerName,
  };
  const partition = limiterPartition(limiter);
  if (partition !== undefined) attributes[ATTRIBUTES.partition] = partition;
  const origins = limiterOrigins(limiter);
  if (origins.length === 1 && origins[0] !== undefined) {
    const url = new URL(origins[0]);
    attributes['server.address'] = url.hostname.replace(/^\[(.*)\]$/, '$1');
    attributes['server.port'] = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
  }
  return attributes;
}
