import { apiLimiterOptions } from '../config/api.js';
import type { RateController } from '../controllers/types.js';
import { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import { type AdaptiveLimiterOptions, type BudgetOptions, LIMITER_DEFAULTS } from '../limiter/options.js';
import type { LimiterSnapshot } from '../limiter/types.js';
import { MemoryBudgetStore } from '../redis/memory-store.js';
import { SharedBudget } from '../redis/shared-budget.js';
import { SimInstance, TrackedLimiter, type WorkCounter } from './instance.js';
import { computeMetrics, type Metrics, meanQuota, RunCollector, unitsInLastMinute } from './metrics.js';
import { ModelApi } from './model-api.js';
import { PassThroughLimiter } from './pass-through.js';
import { Prng } from './prng.js';
import { boundaries, fitDemand, type ModeName, quotaAt, type SimParams } from './scenarios.js';
import { VirtualClock } from './virtual-clock.js';

/** A mode to run: a built-in one, or a user's controller (`custom`). */
export interface ModeSpec {
  name: ModeName;
  /** The row's name in the table. */
  label: string;
  /** The controller of the `custom` mode. */
  controller?: RateController;
  /** Where the custom controller came from (a path), for the report. */
  source?: string;
  /**
   * One budget shared by the instances, as `adaptive-rate-limit/redis` shares it (a
   * `SharedBudget` per instance, one `MemoryBudgetStore`), instead of static shares.
   */
  shared?: boolean;
  /** The model API announces its quota in the IETF RateLimit fields, which the limiters read. */
  headers?: boolean;
}

const LABELS: Record<Exclude<ModeName, 'custom'>, string> = {
  none: 'No limiter',
  fixed: 'Fixed rate',
  aimd: 'AIMD',
  cubic: 'CUBIC',
  probe: 'Probe',
  defaults: 'Defaults',
  api: "api: 'openai'",
};

export function builtInMode(name: Exclude<ModeName, 'custom'>): ModeSpec {
  // The preset reads the LLM API's headers: it runs against the announcing API only.
  return name === 'api' ? { name, label: LABELS[name], headers: true } : { name, label: LABELS[name] };
}

/** The same mode with one shared budget (`AIMD (shared)`); `undefined` for `none` (no limiter). */
export function sharedMode(mode: ModeSpec): ModeSpec | undefined {
  if (mode.name === 'none' || mode.shared) return undefined;
  return { ...mode, shared: true, label: `${mode.label} (shared)` };
}

/** The same mode against the API announcing its quota (`AIMD (headers)`); `undefined` for `none`. */
export function headersMode(mode: ModeSpec): ModeSpec | undefined {
  if (mode.name === 'none' || mode.headers) return undefined;
  return { ...mode, headers: true, label: `${mode.label} (headers)` };
}

/** One sample per virtual second, column by column; rates and quota in units/min. */
export interface Series {
  /** End of each sampled second, s. */
  t: number[];
  quota: number[];
  /** Sum of the instances' rates; `null` without a limiter. */
  sumRate: (number | null)[];
  /** Each instance's rate: `rates[i][k]` is instance i at sample k. */
  rates: (number | null)[][];
  /** Units the API accepted in the last 60 s. */
  used60: number[];
  /** Requests waiting in the limiters' queues, all instances. */
  queued: number[];
  /** 429 answers in that second. */
  throttled: number[];
  /** Units the API accepted in that second. */
  accepted: number[];
}

/** The result of one mode on one scenario: plain data, ready for JSON. */
export interface ModeResult extends Metrics {
  scenario: string;
  mode: ModeName;
  /** One budget shared by the instances (a `SharedBudget` each), rather than static shares. */
  shared: boolean;
  label: string;
  /** Counts behind the columns. */
  details: {
    requests: number;
    demandUnits: number;
    acceptedUnits: number;
    succeeded: number;
    rejectedQueueFull: number;
    rejectedMaxWait: number;
    /** Of the rejected, those refused on a retry after a 429: the attempt loop returned that 429. */
    retriesRefused: number;
    /** Requests still waiting or in flight at the end. */
    unfinished: number;
    meanQuota: number;
    /** Cuts of each instance's limiter. */
    cuts: number[];
    /** Retry-After pauses of each instance's limiter. */
    pauses: number[];
    /** Each instance's rate at the end, units/min (in a shared mode: its share). */
    finalRates: (number | null)[];
    /** The shared budget at the end: its whole rate (units/min) and its cuts; `null` without one. */
    sharedBudget: { rate: number | null; cuts: number } | null;
    /** Virtual timers run (events of the simulation). */
    events: number;
  };
  parameters: SimParams & {
    /** The options each instance's limiter got (rates for the whole budget); `null` without one. */
    limiterOptions: Record<string, unknown> | null;
    controllerSource?: string;
  };
  /** Real time the run took, ms: the only field that differs between two runs of the same seed. */
  wallMs: number;
  series?: Series;
}

export interface RunOptions {
  /** Keep the time series in the result. @default false */
  series?: boolean;
  /** Told each virtual second how far the run is (ms of virtual time done). */
  onProgress?: (virtualMs: number) => void;
  /** Told each virtual second what the run has counted so far (a live view's counters). */
  onSecond?: (live: LiveCounts) => void;
  /** Paces the run between two instants (see the virtual clock's `pace`): a live view's speed. */
  pace?: (virtualMs: number) => Promise<void> | undefined;
}

/** What a run has counted up to a virtual second. */
export interface LiveCounts {
  /** Whole virtual seconds done. */
  second: number;
  /** The time series so far (the run's own arrays: read, do not change). */
  series: Series;
  /** 429 answers so far. */
  throttled: number;
  /** Requests the limiter did not send so far. */
  rejected: number;
  /** Requests that got a 429 on each attempt so far. */
  gaveUp: number;
  /** The 95th percentile of the waits so far, s (sorts them: call it only when shown). */
  p95WaitSeconds(): number;
}

/** Limiter options of a mode (whole-budget rates), or `undefined` for no limiter. */
export function limiterOptionsFor(
  mode: ModeSpec,
  params: SimParams,
): Omit<AdaptiveLimiterOptions, 'clock' | 'name'> | undefined {
  const options = modeOptions(mode, params);
  if (options === undefined || params.llm === undefined || mode.name === 'api') return options;
  // An LLM API: the units are tokens; a second budget meters the requests (each request draws 1).
  return {
    ...options,
    budgets: { tokens: {}, requests: requestBudget(mode, params.llm.requestsPerMinute) },
  };
}

/**
 * The requests budget of a mode against an LLM API: the library's defaults with no option; the
 * other modes the API's requests/min, which the vendors publish (the tokens are what they learn).
 */
function requestBudget(mode: ModeSpec, requestsPerMinute: number): BudgetOptions {
  if (mode.name === 'defaults') return {};
  return { initialUnitsPerMinute: requestsPerMinute, maxUnitsPerMinute: requestsPerMinute };
}

/** The limiter options of a mode, before an LLM API's budgets. */
function modeOptions(
  mode: ModeSpec,
  params: SimParams,
): Omit<AdaptiveLimiterOptions, 'clock' | 'name'> | undefined {
  const l = params.limiter;
  const common = {
    instanceCount: params.instances,
    maxWait: l.maxWait,
    queueLimit: l.queueLimit,
    decreaseCooldown: l.decreaseCooldown,
    maxPause: l.maxPause,
  };
  switch (mode.name) {
    case 'none':
      return undefined;
    case 'defaults':
      // The library with no options: what a user gets from the quick start.
      return {};
    case 'api':
      // The preset as a user sets it (`api: 'openai'`), nothing else.
      if (params.llm === undefined) throw new TypeError('the api mode needs an LLM API (the llm scenario)');
      return apiLimiterOptions('openai');
    case 'fixed':
      return {
        ...common,
        burst: 'second',
        initialUnitsPerMinute: l.fixedUnitsPerMinute,
        minUnitsPerMinute: l.fixedUnitsPerMinute,
        maxUnitsPerMinute: l.fixedUnitsPerMinute,
      };
    default: {
      const controller = mode.name === 'custom' ? mode.controller : mode.name;
      if (controller === undefined) throw new TypeError('the custom mode needs a controller');
      return {
        ...common,
        controller,
        // RateLimiting.Adaptive's modes (AIMD, CUBIC) keep its one-second bucket; probe and custom controllers pace.
        ...(mode.name === 'aimd' || mode.name === 'cubic' ? { burst: 'second' as const } : {}),
        initialUnitsPerMinute: l.initialUnitsPerMinute,
        minUnitsPerMinute: l.minUnitsPerMinute,
        maxUnitsPerMinute: l.maxUnitsPerMinute,
        ...(mode.name === 'aimd' ? { aimd: { ...l.aimd } } : {}),
        ...(mode.name === 'cubic' ? { cubic: { ...l.cubic } } : {}),
        ...(mode.name === 'probe' ? { probe: { ...l.probe } } : {}),
      };
    }
  }
}

/** Runs one mode of a scenario on the virtual clock. */
export async function runMode(
  scenario: string,
  input: SimParams,
  mode: ModeSpec,
  options: RunOptions = {},
): Promise<ModeResult> {
  const started = performance.now();
  const params: SimParams = { ...input, demand: fitDemand(input.demand, input.instances) };
  const endMs = params.minutes * 60_000;
  const clock = new VirtualClock();
  const work: WorkCounter = { busy: 0 };
  const collector = new RunCollector();
  const api = new ModelApi({
    clock,
    quota: quotaAt(params, 0),
    burstSeconds: params.apiBurstSeconds,
    latencyMedianMs: params.latency.medianMs,
    latencySigma: params.latency.sigma,
    random: new Prng(params.seed, 'latency'),
    ...(params.latency.stallProbability
      ? {
          stallProbability: params.latency.stallProbability,
          stallMs: params.latency.stallMs ?? 0,
          stalls: new Prng(params.seed, 'stalls'),
        }
      : {}),
    ...(params.leakyBucket ? { leakyBurst: params.leakyBucket.burst } : {}),
    announce: mode.headers === true,
    ...(params.announceNextUnit ? { announceNextUnit: true } : {}),
    ...(params.llm ? { requestQuota: params.llm.requestsPerMinute } : {}),
  });
  for (const t of boundaries(params.quotaEvents, endMs)) {
    clock.setTimeout(() => api.setQuota(quotaAt(params, t)), t);
  }

  const limiterOptions = limiterOptionsFor(mode, params);
  // A shared mode: one store for the budget, in memory, on the virtual clock (Redis's role).
  const store = mode.shared && limiterOptions !== undefined ? new MemoryBudgetStore({ clock }) : undefined;
  const limiters: (AdaptiveRateLimiter | undefined)[] = [];
  const pauses: number[] = [];
  const instances: SimInstance[] = [];
  const acceptedByInstance: number[][] = [];
  for (let i = 0; i < params.instances; i++) {
    const name = `instance-${i + 1}`;
    let tracked: TrackedLimiter;
    let limiter: AdaptiveRateLimiter | undefined;
    if (limiterOptions === undefined) {
      tracked = new TrackedLimiter(new PassThroughLimiter(name), clock, work, collector);
    } else if (store !== undefined) {
      // The budget's rates are whole-budget; `instanceCount` is only its first guess.
      const budget = new SharedBudget({
        ...limiterOptions,
        ...params.shared,
        name: 'budget',
        store,
        clock,
        random: limiterRandom(params, i),
      });
      limiter = budget.limiter;
      tracked = new TrackedLimiter(budget, clock, work, collector, limiter);
    } else {
      limiter = new AdaptiveRateLimiter({ ...limiterOptions, name, clock, random: limiterRandom(params, i) });
      tracked = new TrackedLimiter(limiter, clock, work, collector);
    }
    pauses.push(0);
    limiter?.on('paused', () => {
      pauses[i]!++;
    });
    limiters.push(limiter);
    const accepted: number[] = [];
    acceptedByInstance.push(accepted);
    const active = params.active?.[i];
    const instance = new SimInstance({
      clock,
      api,
      limiter: tracked,
      work,
      collector,
      demand: params.demand[i]!,
      demandEvents: params.demandEvents,
      unitsPerRequest: params.unitsPerRequest,
      maxAttempts: params.maxAttempts,
      ...(params.llm
        ? { llm: { first: mode.name === 'api' ? ('requests' as const) : ('tokens' as const) } }
        : {}),
      // The same streams in every mode: the same arrivals and sizes for each instance.
      arrivals: new Prng(params.seed, `arrivals-${i}`),
      ...(params.arrivals === 'interval'
        ? { arrivalModel: 'interval' as const, phase: new Prng(params.seed, `phase-${i}`).next() }
        : {}),
      endMs: active === undefined ? endMs : Math.min(endMs, active.toMs),
      startMs: active?.fromMs ?? 0,
      initialBurst: params.initialBurst ?? 0,
      ...(params.crowd ? { crowd: params.crowd.requestsEach } : {}),
      ...(params.crowd?.untilServed ? { untilServed: true } : {}),
      ...(params.noRetryAfter ? { noRetryAfter: true } : {}),
      acceptedBySecond: accepted,
    });
    instances.push(instance);
  }

  const series = emptySeries(params.instances);
  const sample = (second: number) => {
    const t = second * 1000;
    let sum: number | null = 0;
    let queued = 0;
    for (let i = 0; i < limiters.length; i++) {
      const limiter = limiters[i];
      if (limiter === undefined) {
        sum = null;
        series.rates[i]!.push(null);
        continue;
      }
      const snapshot = limiter.snapshot();
      queued += snapshot.queued;
      series.rates[i]!.push(round2(snapshot.rate));
      if (sum !== null) sum += snapshot.rate;
    }
    series.t.push(second);
    series.quota.push(round2(api.quota));
    series.sumRate.push(sum === null ? null : round2(sum));
    series.used60.push(unitsInLastMinute(api.acceptedBySecond, second));
    series.queued.push(queued);
    series.throttled.push(api.throttledBySecond[second - 1] ?? 0);
    series.accepted.push(api.acceptedBySecond[second - 1] ?? 0);
    options.onProgress?.(t);
    options.onSecond?.({
      second,
      series,
      throttled: api.throttled,
      rejected: collector.rejectedQueueFull + collector.rejectedMaxWait,
      gaveUp: collector.gaveUp,
      p95WaitSeconds: () => collector.waitQuantile(0.95) / 1000,
    });
  };
  const seconds = Math.floor(endMs / 1000);
  const tick = (second: number) => {
    sample(second);
    if (second < seconds) clock.setTimeout(() => tick(second + 1), 1000);
  };
  clock.setTimeout(() => tick(1), 1000);

  for (const instance of instances) instance.start();
  // Each rejection builds a RateLimitRejectedError whose stack trace costs more than the rest of
  // its request; the simulator only counts them, so stacks are off while it runs.
  const stackTraceLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    await clock.runUntil(endMs, { busy: () => work.busy, pace: options.pace });
  } finally {
    Error.stackTraceLimit = stackTraceLimit;
  }
  for (const instance of instances) if (instance.error !== undefined) throw instance.error;

  const metrics = computeMetrics(params, collector, api, acceptedByInstance);
  const result: ModeResult = {
    scenario,
    mode: mode.name,
    shared: store !== undefined,
    label: mode.label,
    ...metrics,
    details: {
      requests: collector.requests,
      demandUnits: collector.demandUnits,
      acceptedUnits: api.acceptedUnits,
      succeeded: collector.succeeded,
      rejectedQueueFull: collector.rejectedQueueFull,
      rejectedMaxWait: collector.rejectedMaxWait,
      retriesRefused: collector.retriesRefused,
      unfinished: collector.unfinished,
      meanQuota: meanQuota(params),
      cuts: limiters.map((l) => (l === undefined ? 0 : cutsOf(l.snapshot()))),
      pauses,
      finalRates: limiters.map((l) => (l === undefined ? null : round2(l.rate))),
      sharedBudget:
        store === undefined
          ? null
          : { rate: store.rate === undefined ? null : round2(store.rate), cuts: store.cuts },
      events: clock.timersRun,
    },
    parameters: {
      ...params,
      limiterOptions: limiterOptions === undefined ? null : describeOptions(limiterOptions),
      ...(mode.source !== undefined ? { controllerSource: mode.source } : {}),
    },
    wallMs: 0,
  };
  if (options.series) result.series = series;
  result.wallMs = Math.round(performance.now() - started);
  return result;
}

/** Runs a scenario in each mode, one after the other. */
export async function runScenario(
  scenario: string,
  params: SimParams,
  modes: readonly ModeSpec[],
  options: RunOptions = {},
): Promise<ModeResult[]> {
  const results: ModeResult[] = [];
  for (const mode of modes) results.push(await runMode(scenario, params, mode, options));
  return results;
}

/** A series with no samples yet, for `instances` instances (the playground fills one live). */
export function emptySeries(instances: number): Series {
  return {
    t: [],
    quota: [],
    sumRate: [],
    rates: Array.from({ length: instances }, () => []),
    used60: [],
    queued: [],
    throttled: [],
    accepted: [],
  };
}

/** Limiter options as JSON: a custom controller shows as `"custom"`. */
function describeOptions(options: Omit<AdaptiveLimiterOptions, 'clock' | 'name'>): Record<string, unknown> {
  const { controller, ...rest } = options;
  return {
    controller: typeof controller === 'object' ? 'custom' : (controller ?? LIMITER_DEFAULTS.controller),
    ...rest,
  };
}

/** The seeded random numbers of instance `i`'s limiter: runs repeat, byte for byte. */
function limiterRandom(params: SimParams, i: number): () => number {
  const prng = new Prng(params.seed, `limiter-${i}`);
  return () => prng.next();
}

/** Cuts of a limiter, of every budget when it has several. */
function cutsOf(snapshot: LimiterSnapshot): number {
  if (snapshot.budgets === undefined) return snapshot.cuts;
  return Object.values(snapshot.budgets).reduce((sum, b) => sum + b.cuts, 0);
}

function round2(x: number): number {
  return Number.isFinite(x) ? Math.round(x * 100) / 100 : x;
}
