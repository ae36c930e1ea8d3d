import { PROBE_DEFAULTS, type ProbeOptions } from '../controllers/probe.js';
import { LIMITER_DEFAULTS } from '../limiter/options.js';
import { SHARED_DEFAULTS } from '../redis/options.js';

/** How requests arrive at an instance's demand (see `SimParams.arrivals`). */
export type ArrivalModel = 'poisson' | 'interval';
export const ARRIVAL_MODELS = ['poisson', 'interval'] as const satisfies readonly ArrivalModel[];

/** A change of the quota or of the demand for a while: the value is multiplied by `factor`. */
export interface TimedFactor {
  /** Start, ms from the start of the run. */
  atMs: number;
  /** Length, ms. */
  durationMs: number;
  /** Multiplies the base value while it lasts (0.5: half; 5: five times). */
  factor: number;
}

/** The limiter options of every limited mode; rates are units/min for the whole budget. */
interface SimLimiterParams {
  initialUnitsPerMinute: number;
  minUnitsPerMinute: number;
  maxUnitsPerMinute: number;
  /** The rate of the `fixed` mode (its initial, min and max). */
  fixedUnitsPerMinute: number;
  maxWait: number;
  queueLimit: number;
  decreaseCooldown: number;
  maxPause: number;
  aimd: { decreaseFactor: number; increaseInterval: number; increaseStep: number };
  cubic: { beta: number; scaleConstant: number };
  /** Options of the probe controller (its defaults unless a preset says otherwise). */
  probe: ProbeOptions;
}

/** The options of the shared modes' `SharedBudget` (see docs/redis.md). */
interface SimSharedParams {
  /** ms between two heartbeats of each instance. */
  heartbeatInterval: number;
  /** Part of the whole rate kept as a floor, split between the instances (0 to 1). */
  floorFraction: number;
}

/** Everything a run depends on. Plain data, so that it prints as JSON. */
export interface SimParams {
  /** Processes sharing the quota, each with its own limiter. */
  instances: number;
  /** The API's hidden quota for all instances together, units/min. */
  quota: number;
  /** Demand of each instance, units/min (one value per instance). */
  demand: number[];
  /** Virtual minutes to run. */
  minutes: number;
  seed: number;
  /**
   * Units of one request: a uniform whole number in [min, max]; with `tail`, heavy-tailed
   * instead: Pareto of that shape (> 1; smaller is heavier) from `min`, capped at `max`.
   */
  unitsPerRequest: { min: number; max: number; tail?: number };
  /**
   * An LLM API, metered as OpenAI meters one: the quota's units are tokens, and a second budget
   * of `requestsPerMinute` is enforced beside it (both buckets hold `apiBurstSeconds`); a 429
   * names the budget that ran out, and the "(headers)" rows read OpenAI's `x-ratelimit-*` fields.
   */
  llm?: { requestsPerMinute: number };
  /** Attempts per request in the attempt loop, the first included. */
  maxAttempts: number;
  /** The model API's bucket holds this many seconds of the quota. */
  apiBurstSeconds: number;
  /**
   * Latency of an answer: log-normal with this median (ms) and spread; with `stallProbability`
   * (0 to 1) an answer stalls `stallMs` more (a GC pause, a slow backend).
   */
  latency: { medianMs: number; sigma: number; stallProbability?: number; stallMs?: number };
  /**
   * A strict leaky bucket (GCRA, as nginx's `limit_req`) instead of the token bucket: it counts
   * requests (not units), lets `burst` requests go early at most, and answers 429 with
   * `Retry-After: 1` to any other early request. `undefined`: the token bucket.
   */
  leakyBucket?: { burst: number };
  /**
   * The "(headers)" rows' API also announces `t` in its `RateLimit` field: the seconds until its
   * bucket holds one more unit, rounded up (a token bucket announcing its state). @default false
   */
  announceNextUnit?: boolean;
  /**
   * A crowd of short-lived processes: each instance sends this many requests one at a time (the
   * next when the last has ended, retries included) from its start, then ends; no Poisson demand.
   */
  crowd?: {
    requestsEach: number;
    /**
     * A request that ends unserved (its 429 after the attempt loop gave up, or a refusal) is called
     * again (at once, a refusal a second later), as a script that must finish its work does.
     */
    untilServed?: boolean;
  };
  /** The API's 429s carry no `Retry-After` (Envoy's `local_ratelimit`). @default false */
  noRetryAfter?: boolean;
  /**
   * How each instance's requests arrive at its demand: `'poisson'`, a Poisson process (gaps drawn
   * at random, some close together); `'interval'`, one request every mean gap exactly (60,000 ms
   * times the mean units over the demand), from a phase drawn at random for each instance in
   * [0, one gap), as the control bench's open load sends (bench/control-client-main.ts). A change
   * of the demand changes the gap from then on. The request sizes are the same in both.
   * @default 'poisson'
   */
  arrivals?: ArrivalModel;
  /** Requests each instance sends at t = 0, on top of its demand (a cold burst). @default 0 */
  initialBurst?: number;
  /**
   * When each instance is active (ms from the start): no request arrives outside its window.
   * One entry per instance; `undefined`: all active for the whole run.
   */
  active?: { fromMs: number; toMs: number }[];
  /**
   * Extra columns of the table: Jain's fairness index, seconds to 90 % of the quota, seconds to
   * the last success (a crowd's completion).
   */
  columns?: ('fairness' | 'secondsTo90' | 'lastSuccess')[];
  /** Times when another client takes part of the quota. */
  quotaEvents: TimedFactor[];
  /** Times when the demand of every instance changes. */
  demandEvents: TimedFactor[];
  limiter: SimLimiterParams;
  /** The shared budget of the `(shared)` modes. */
  shared: SimSharedParams;
}

/**
 * The built-in modes; `custom` is a user's controller module. `defaults` is the library with no
 * options at all (no initial rate, no maximum, each process unaware of the others). `api` (not
 * in every scenario: an LLM API's only) is the `api: 'openai'` preset with nothing else.
 */
export type ModeName = 'none' | 'fixed' | 'aimd' | 'cubic' | 'probe' | 'defaults' | 'api' | 'custom';
export const BUILT_IN_MODES = [
  'none',
  'fixed',
  'aimd',
  'cubic',
  'probe',
  'defaults',
] as const satisfies readonly ModeName[];

export interface Scenario {
  name: string;
  description: string;
  params: SimParams;
  /** Modes the preset runs unless `--modes` says otherwise. */
  modes: ModeName[];
  /** Also runs each limited mode with one shared budget unless `--no-shared` says otherwise. */
  shared?: boolean;
  /** Also runs each limited mode against the API announcing its quota unless `--no-headers` says otherwise. */
  headers?: boolean;
}

const MINUTE = 60_000;

/**
 * RateLimiting.Adaptive's setting (its "Rate controllers" page; docs/simulator.md): 2 instances of 2,000 units/min against a hidden quota of 3,000, 15 min,
 * seed 42, an initial rate of 1,500 units/min for the whole budget and a maximum of 5,625
 * (2,812.5 for each of 2 instances). Limiter options it does not give are the library's
 * defaults: maxWait 60 s, queueLimit 10,000, decreaseCooldown 1 s, min 1 unit/min.
 */
export function baseParams(): SimParams {
  return {
    instances: 2,
    quota: 3_000,
    demand: [2_000, 2_000],
    minutes: 15,
    seed: 42,
    unitsPerRequest: { min: 1, max: 3 },
    maxAttempts: 4,
    apiBurstSeconds: 2,
    latency: { medianMs: 100, sigma: 0.5 },
    quotaEvents: [],
    demandEvents: [],
    limiter: {
      initialUnitsPerMinute: 1_500,
      minUnitsPerMinute: LIMITER_DEFAULTS.minUnitsPerMinute,
      maxUnitsPerMinute: 5_625,
      fixedUnitsPerMinute: 1_500,
      maxWait: LIMITER_DEFAULTS.maxWait,
      queueLimit: LIMITER_DEFAULTS.queueLimit,
      decreaseCooldown: LIMITER_DEFAULTS.decreaseCooldown,
      maxPause: LIMITER_DEFAULTS.maxPause,
      // The controllers' own defaults (src/controllers/aimd.ts, cubic.ts).
      aimd: { decreaseFactor: 0.7, increaseInterval: 10_000, increaseStep: 120 },
      cubic: { beta: 0.7, scaleConstant: 0.4 },
      probe: { ...PROBE_DEFAULTS },
    },
    shared: {
      heartbeatInterval: SHARED_DEFAULTS.heartbeatInterval,
      floorFraction: SHARED_DEFAULTS.floorFraction,
    },
  };
}

const ALL_MODES: ModeName[] = [...BUILT_IN_MODES];

/** The named presets, in the order `--scenario all` runs them. */
export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'steady',
    description: 'Two instances that together want more than the hidden quota.',
    params: baseParams(),
    modes: ALL_MODES,
  },
  {
    name: 'quota-drop',
    description: 'As steady; after 5 min another client takes half of the quota for 60 s.',
    params: { ...baseParams(), quotaEvents: [{ atMs: 5 * MINUTE, durationMs: MINUTE, factor: 0.5 }] },
    modes: ALL_MODES,
  },
  {
    name: 'many-instances',
    description: '10 instances share the quota; the same total demand (10 of 400 units/min).',
    params: { ...baseParams(), instances: 10, demand: Array.from({ length: 10 }, () => 400) },
    modes: ALL_MODES,
  },
  {
    name: 'uneven-demand',
    description:
      'One busy instance (3,800 units/min), one nearly idle (200), max 3,000: a static share caps each ' +
      'at 1,500; the "(shared)" rows share one budget by demand.',
    params: (() => {
      const p = { ...baseParams(), demand: [3_800, 200] };
      // A maximum at the API's documented quota: what a static share (max / instanceCount) costs.
      p.limiter.maxUnitsPerMinute = 3_000;
      return p;
    })(),
    modes: ALL_MODES,
    shared: true,
  },
  {
    name: 'burst',
    description: 'As steady; after 5 min the demand jumps to 5 times for 30 s.',
    params: { ...baseParams(), demandEvents: [{ atMs: 5 * MINUTE, durationMs: 30_000, factor: 5 }] },
    modes: ALL_MODES,
  },
  {
    name: 'leaky-bucket',
    description:
      "A strict leaky bucket (GCRA, nginx's limit_req) of 3,000 requests/min with a burst of 5 requests; " +
      'requests of 1 unit; 429 with Retry-After: 1. Static shares and one shared budget (--no-shared: static only).',
    params: { ...baseParams(), unitsPerRequest: { min: 1, max: 1 }, leakyBucket: { burst: 5 } },
    modes: ALL_MODES,
    shared: true,
  },
  {
    name: 'staggered',
    description:
      '4 instances of 2,000 units/min join 30 s apart and leave 30 s apart after 6 min; fairness is ' +
      "Jain's index over the minute before the first leaves.",
    params: {
      ...baseParams(),
      instances: 4,
      demand: [2_000],
      minutes: 8,
      active: [0, 1, 2, 3].map((i) => ({ fromMs: i * 30_000, toMs: 6 * MINUTE + i * 30_000 })),
      columns: ['fairness'],
    },
    modes: ALL_MODES,
  },
  {
    name: 'big-quota',
    description:
      'A quota 100 times the initial rate (6,000 against 60 units/min), 2 instances of 5,000 units/min: ' +
      'seconds to 90 % of the quota (the Defaults row starts with no initial rate).',
    params: (() => {
      const p: SimParams = {
        ...baseParams(),
        quota: 6_000,
        demand: [5_000],
        minutes: 2,
        columns: ['secondsTo90'],
      };
      p.limiter.initialUnitsPerMinute = 60;
      p.limiter.fixedUnitsPerMinute = 60;
      p.limiter.maxUnitsPerMinute = 60_000;
      return p;
    })(),
    modes: ALL_MODES,
  },
  {
    name: 'cold-burst',
    description:
      'One instance sends 2,000 requests at t = 0 (more than 3 minutes of a 600 units/min quota with a ' +
      'burst of 10), then 300 units/min; requests of 1 unit.',
    params: (() => {
      const p = {
        ...baseParams(),
        instances: 1,
        quota: 600,
        demand: [300],
        minutes: 5,
        unitsPerRequest: { min: 1, max: 1 },
        apiBurstSeconds: 1,
        initialBurst: 2_000,
      };
      p.limiter.initialUnitsPerMinute = 300;
      p.limiter.fixedUnitsPerMinute = 300;
      p.limiter.maxUnitsPerMinute = 1_125;
      return p;
    })(),
    modes: ALL_MODES,
  },
  {
    name: 'noisy',
    description:
      'As steady, with heavy-tailed latency (median 100 ms, sigma 1.2) and 1 answer in 100 stalled 5 s more.',
    params: {
      ...baseParams(),
      latency: { medianMs: 100, sigma: 1.2, stallProbability: 0.01, stallMs: 5_000 },
    },
    modes: ALL_MODES,
  },
  {
    name: 'headers',
    description:
      'As steady for 5 min, then 2 min idle and a cold burst (5 times for 30 s); AIMD, CUBIC and probe, each beside ' +
      'the same mode against the API announcing its quota (RateLimit headers).',
    params: {
      ...baseParams(),
      minutes: 10,
      demandEvents: [
        { atMs: 5 * MINUTE, durationMs: 2 * MINUTE, factor: 0 },
        { atMs: 7 * MINUTE, durationMs: 30_000, factor: 5 },
      ],
    },
    modes: ['aimd', 'cubic', 'probe'],
    headers: true,
  },
  {
    name: 'token-bucket-headers',
    description:
      'A token bucket of 600 requests/min holding 1 s of it, announcing its state on every answer ' +
      '(RateLimit r=<requests left>;t=<seconds to the next, rounded up>); one instance at twice the quota, 5 min.',
    params: (() => {
      const p: SimParams = {
        ...baseParams(),
        instances: 1,
        quota: 600,
        demand: [1_200],
        minutes: 5,
        unitsPerRequest: { min: 1, max: 1 },
        apiBurstSeconds: 1,
        announceNextUnit: true,
      };
      p.limiter.initialUnitsPerMinute = 300;
      p.limiter.fixedUnitsPerMinute = 300;
      p.limiter.maxUnitsPerMinute = 1_125;
      return p;
    })(),
    modes: ALL_MODES,
    headers: true,
  },
  {
    name: 'crowd',
    description:
      '50 short-lived processes, each sending 2 requests one at a time from t = 0, against one token bucket of 40 ' +
      'requests/min holding 50 that answers 429 with no Retry-After (ideal: the last request at 75 s).',
    params: crowdParams(50, 2),
    modes: ALL_MODES,
  },
  {
    name: 'crowd-10x10',
    description:
      '10 short-lived processes, each sending 10 requests one at a time from t = 0, against the same bucket (ideal: ' +
      'the last request at 75 s).',
    params: crowdParams(10, 10),
    modes: ALL_MODES,
  },
  {
    name: 'llm',
    description:
      'An LLM API: 40,000 tokens/min and 500 requests/min, buckets of a minute; 2 instances of 30,000 tokens/min in ' +
      'heavy-tailed requests (50 tokens and up, a few of thousands); after 5 min the demand triples for 30 s. Rates in tokens/min.',
    params: (() => {
      const p: SimParams = {
        ...baseParams(),
        quota: 40_000,
        demand: [30_000, 30_000],
        minutes: 10,
        unitsPerRequest: { min: 50, max: 8_000, tail: 1.5 },
        apiBurstSeconds: 60,
        llm: { requestsPerMinute: 500 },
        latency: { medianMs: 800, sigma: 0.6 },
        demandEvents: [{ atMs: 5 * MINUTE, durationMs: 30_000, factor: 3 }],
      };
      p.limiter.initialUnitsPerMinute = 20_000;
      p.limiter.fixedUnitsPerMinute = 40_000;
      p.limiter.maxUnitsPerMinute = 60_000;
      // Steps in proportion to the rates (the page's 120 of 3,000 units/min).
      p.limiter.aimd.increaseStep = 1_600;
      return p;
    })(),
    modes: [...ALL_MODES, 'api'],
    headers: true,
  },
  {
    name: 'try-aimd-step-600',
    description: '"Bigger steps": AIMD with an increaseStep of 600 units/min.',
    params: (() => {
      const p = baseParams();
      p.limiter.aimd.increaseStep = 600;
      return p;
    })(),
    modes: ['aimd'],
  },
  {
    name: 'try-cubic-max-2700',
    description: '"Maximum below the quota": CUBIC with maxUnitsPerMinute 2,700 (quota 3,000).',
    params: (() => {
      const p = baseParams();
      p.limiter.maxUnitsPerMinute = 2_700;
      return p;
    })(),
    modes: ['cubic'],
  },
];

/**
 * A crowd of `instances` short-lived processes, each sending `requestsEach` requests one at a time
 * from t = 0, against one token bucket of 40 requests/min holding 50 that answers 429 with no
 * Retry-After (Envoy's `local_ratelimit`); 5 min.
 */
function crowdParams(instances: number, requestsEach: number): SimParams {
  const p: SimParams = {
    ...baseParams(),
    instances,
    quota: 40,
    demand: [0],
    minutes: 5,
    unitsPerRequest: { min: 1, max: 1 },
    apiBurstSeconds: 75,
    crowd: { requestsEach, untilServed: true },
    noRetryAfter: true,
    columns: ['lastSuccess'],
  };
  p.limiter.initialUnitsPerMinute = 10;
  p.limiter.fixedUnitsPerMinute = 40;
  p.limiter.maxUnitsPerMinute = 80;
  // A process waits up to 2 min for its turn: a share of the quota (0.8 a minute) takes 75 s.
  p.limiter.maxWait = 120_000;
  return p;
}

export function findScenario(name: string): Scenario | undefined {
  return SCENARIOS.find((s) => s.name === name);
}

/** A deep copy of a scenario's parameters, safe to change. */
export function cloneParams(params: SimParams): SimParams {
  return structuredClone(params);
}

/**
 * Fits the demand list to the instance count: one value applies to every instance; a longer
 * list is used in turn (3800,200 for 4 instances is 3800,200,3800,200).
 */
export function fitDemand(demand: readonly number[], instances: number): number[] {
  if (demand.length === 0) throw new RangeError('demand: at least one value is needed');
  return Array.from({ length: instances }, (_, i) => demand[i % demand.length]!);
}

/** The mean units of a request (`unitsPerRequest`): the Poisson arrivals' rate is the demand over it. */
export function meanUnits(units: SimParams['unitsPerRequest']): number {
  const { min, max, tail } = units;
  if (tail === undefined) return (min + max) / 2;
  // E[min(X, max)] for X Pareto(min, tail): min + min / (tail - 1) * (1 - (min / max)^(tail - 1)).
  return min + (min / (tail - 1)) * (1 - (min / max) ** (tail - 1));
}

/** The quota (units/min) at time `t` (ms): the base times every event in force. */
export function quotaAt(params: SimParams, t: number): number {
  return params.quota * factorAt(params.quotaEvents, t);
}

/** The product of the factors of the events in force at `t` (ms). */
export function factorAt(events: readonly TimedFactor[], t: number): number {
  let factor = 1;
  for (const e of events) if (t >= e.atMs && t < e.atMs + e.durationMs) factor *= e.factor;
  return factor;
}

/** The times (ms) where some event starts or ends, sorted, within (0, end). */
export function boundaries(events: readonly TimedFactor[], endMs: number): number[] {
  const times = new Set<number>();
  for (const e of events) {
    for (const t of [e.atMs, e.atMs + e.durationMs]) if (t > 0 && t < endMs) times.add(t);
  }
  return [...times].sort((a, b) => a - b);
}
