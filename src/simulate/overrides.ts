import { NUMBER_TEXT } from '../config/appsettings.js';
import { tryParseDuration } from '../config/duration.js';
import { MIN_HEARTBEAT_INTERVAL } from '../config/shared.js';
import { UsageError, type Values } from './args.js';
import { ARRIVAL_MODELS, type SimParams, type TimedFactor } from './scenarios.js';
import { MAX_INSTANCES } from './workload.js';

/** The longest run `--minutes` takes: one virtual day. */
const MAX_MINUTES = 1440;

/**
 * The shortest run `--minutes` takes (0.0167, a second): when a run takes its first sample of the
 * rates and the quota. A shorter run has none, and its throughput is its first requests over a
 * sliver of a minute: 0.001 printed 200 % of the quota with no limiter and with AIMD alike, and
 * 1e-300 a table of zeros.
 */
const MIN_MINUTES = 0.0167;

/** The range of `--quota`, units/min. */
const MIN_QUOTA = 1;
const MAX_QUOTA = 1e9;

/** The largest `--latency-sigma` (the sigma of the latency's log). */
const MAX_LATENCY_SIGMA = 5;

/** The largest `--seed`: the generator is seeded with 32 bits, so a larger seed would repeat a smaller one's run. */
const MAX_SEED = 0xffff_ffff;

/**
 * The flags that set a limiter option of the scenario, with the option (its path in
 * `SimParams.limiter`) and how the flag is read. The fixed mode's rate is its own flag.
 */
export const LIMITER_FLAGS = [
  ['initial-units-per-minute', 'initialUnitsPerMinute', 'positive'],
  ['min-units-per-minute', 'minUnitsPerMinute', 'positive'],
  ['max-units-per-minute', 'maxUnitsPerMinute', 'positive'],
  ['fixed-units-per-minute', 'fixedUnitsPerMinute', 'positive'],
  ['max-wait', 'maxWait', 'duration'],
  ['queue-limit', 'queueLimit', 'count'],
  ['decrease-cooldown', 'decreaseCooldown', 'duration'],
  ['max-pause', 'maxPause', 'duration'],
  ['increase-step', 'aimd.increaseStep', 'positive'],
  ['increase-interval', 'aimd.increaseInterval', 'duration'],
  ['decrease-factor', 'aimd.decreaseFactor', 'fraction'],
  ['beta', 'cubic.beta', 'fraction'],
  ['scale-constant', 'cubic.scaleConstant', 'positive'],
] as const satisfies readonly (readonly [
  keyof Values,
  string,
  'positive' | 'duration' | 'fraction' | 'count',
])[];

/** Applies the flags to a copy of a scenario's parameters (`scenario`: its name, for errors). */
export function applyOverrides(params: SimParams, v: Partial<Values>, scenario = 'the scenario'): SimParams {
  const p = params;
  const l = p.limiter;
  const num = (flag: keyof Values, ok: (x: number) => boolean, what: string): number | undefined => {
    const text = v[flag];
    if (typeof text !== 'string') return undefined;
    const x = Number(text);
    if (!NUMBER_TEXT.test(text.trim()) || !Number.isFinite(x) || !ok(x)) {
      throw new UsageError(`--${flag}: must be ${what}, received "${text}"`);
    }
    return x;
  };
  const positive = (flag: keyof Values) => num(flag, (x) => x > 0, 'a number > 0');
  const whole = (flag: keyof Values, min: number) =>
    num(flag, (x) => Number.isInteger(x) && x >= min, `a whole number >= ${min}`);
  const fraction = (flag: keyof Values) => num(flag, (x) => x > 0 && x < 1, 'a number > 0 and < 1');
  const duration = (flag: keyof Values): number | undefined => {
    const text = v[flag];
    if (typeof text !== 'string') return undefined;
    const ms = tryParseDuration(/^\d+(\.\d+)?$/.test(text.trim()) ? Number(text) : text);
    if (ms === undefined)
      throw new UsageError(`--${flag}: must be a duration such as 500, "10s" or "2m", received "${text}"`);
    return ms;
  };
  // An event the flags set that starts after the run's end would change nothing, in silence.
  const mustStartInRun = (event: TimedFactor | undefined, flags: (keyof Values)[], what: string) => {
    const given = flags.filter((flag) => typeof v[flag] === 'string');
    if (event === undefined || given.length === 0 || event.atMs < p.minutes * 60_000) return;
    const at = given.includes(flags[0] as keyof Values)
      ? ''
      : ` (the scenario's or the default --${flags[0]})`;
    throw new UsageError(
      `${given.map((flag) => `--${flag} "${v[flag]}"`).join(', ')}: the ${what} would start at ${event.atMs / 1000} s${at}, not before the run's end (${p.minutes} min), so it would change nothing; give --${flags[0]} within the run`,
    );
  };
  const set = <T>(value: T | undefined, apply: (x: T) => void) => {
    if (value !== undefined) apply(value);
  };

  set(
    num(
      'instances',
      (x) => Number.isInteger(x) && x >= 1 && x <= MAX_INSTANCES,
      `a whole number from 1 to ${MAX_INSTANCES}`,
    ),
    (x) => {
      p.instances = x;
    },
  );
  // Below a unit a minute the shares and rates print as noise (1e-300 printed a share of 3e302 %).
  set(
    num('quota', (x) => x >= MIN_QUOTA && x <= MAX_QUOTA, 'a number from 1 to 1e9 (units/min)'),
    (x) => {
      p.quota = x;
    },
  );
  if (typeof v.demand === 'string') {
    // An empty entry (`--demand=`, `100,,100`) is no demand of 0: Number('') would read it so.
    const entries = v.demand.split(',').map((d) => d.trim());
    const list = entries.map((d) => Number(d));
    if (
      entries.some((d, i) => !NUMBER_TEXT.test(d) || !Number.isFinite(list[i]) || (list[i] as number) < 0)
    ) {
      throw new UsageError(`--demand: must be numbers >= 0 separated by commas, received "${v.demand}"`);
    }
    // A value past the last instance would be dropped in silence (the list is used in turn).
    if (list.length > p.instances) {
      const instances = `${p.instances} ${p.instances === 1 ? 'instance' : 'instances'}`;
      const whose =
        typeof v.instances === 'string'
          ? `${instances} (--instances "${v.instances}")`
          : `the ${instances} of ${scenario} (its own; --instances sets it)`;
      throw new UsageError(
        `--demand: ${list.length} values for ${whose}, received "${v.demand}"; give at most one per instance`,
      );
    }
    p.demand = list;
  }
  // A virtual day at most: 15 virtual minutes take about 0.3 s, so 1e9 would run for years in silence.
  set(
    num(
      'minutes',
      (x) => x >= MIN_MINUTES && x <= MAX_MINUTES,
      `a number from ${MIN_MINUTES} (a second, the first sample of a run) to ${MAX_MINUTES} (a virtual day)`,
    ),
    (x) => {
      p.minutes = x;
    },
  );
  set(
    num(
      'seed',
      (x) => Number.isInteger(x) && x >= 0 && x <= MAX_SEED,
      `a whole number from 0 to ${MAX_SEED} (the generator takes 32 bits)`,
    ),
    (x) => {
      p.seed = x;
    },
  );
  if (typeof v.units === 'string') {
    const m = /^(\d+)(?:-(\d+))?$/.exec(v.units.trim());
    const min = m ? Number(m[1]) : Number.NaN;
    const max = m?.[2] !== undefined ? Number(m[2]) : min;
    // Past 2^53-1 a number is no longer the whole number written (99999999999999999999 is 1e20).
    if (!(min >= 1 && max >= min && max <= Number.MAX_SAFE_INTEGER)) {
      throw new UsageError(
        `--units: must be N or MIN-MAX (whole, from 1 to ${Number.MAX_SAFE_INTEGER}), received "${v.units}"`,
      );
    }
    p.unitsPerRequest = { ...p.unitsPerRequest, min, max };
  }
  set(duration('latency'), (x) => {
    p.latency.medianMs = x;
  });
  // A sigma of 5 already spreads the latency over 1e4 times its median either way; 1e6 overflowed.
  set(
    num('latency-sigma', (x) => x >= 0 && x <= MAX_LATENCY_SIGMA, `a number from 0 to ${MAX_LATENCY_SIGMA}`),
    (x) => {
      p.latency.sigma = x;
    },
  );
  set(
    num('api-burst-seconds', (x) => x > 0 && x <= 3600, 'a number > 0 and <= 3600 (an hour)'),
    (x) => {
      p.apiBurstSeconds = x;
    },
  );
  set(whole('leaky-burst', 0), (x) => {
    p.leakyBucket = { burst: x };
  });
  if (typeof v.arrivals === 'string') {
    const model = ARRIVAL_MODELS.find((m) => m === v.arrivals);
    if (model === undefined) {
      throw new UsageError(
        `--arrivals: must be one of ${ARRIVAL_MODELS.join(', ')}, received "${v.arrivals}"`,
      );
    }
    p.arrivals = model;
  }
  set(whole('max-attempts', 1), (x) => {
    p.maxAttempts = x;
  });

  const dropAt = duration('drop-at');
  const dropFor = duration('drop-for');
  const dropTo = num('drop-to', (x) => x >= 0 && x <= 1, 'a number from 0 to 1');
  if (dropAt !== undefined || dropFor !== undefined || dropTo !== undefined) {
    p.quotaEvents = [
      event(p.quotaEvents[0], dropAt, dropFor, dropTo, { atMs: 300_000, durationMs: 60_000, factor: 0.5 }),
    ];
  }
  mustStartInRun(p.quotaEvents[0], ['drop-at', 'drop-for', 'drop-to'], 'quota drop');
  const burstAt = duration('burst-at');
  const burstFor = duration('burst-for');
  const burstFactor = num('burst-factor', (x) => x >= 0, 'a number >= 0');
  if (burstAt !== undefined || burstFor !== undefined || burstFactor !== undefined) {
    p.demandEvents = [
      event(p.demandEvents[0], burstAt, burstFor, burstFactor, {
        atMs: 300_000,
        durationMs: 30_000,
        factor: 5,
      }),
    ];
  }

  mustStartInRun(p.demandEvents[0], ['burst-at', 'burst-for', 'burst-factor'], 'demand burst');

  const read = { positive, duration, fraction, count: (flag: keyof Values) => whole(flag, 0) };
  for (const [flag, option, kind] of LIMITER_FLAGS) {
    set(read[kind](flag), (x) => {
      const [group, key] = option.split('.') as [string, string | undefined];
      const options = l as unknown as Record<string, number | Record<string, number>>;
      if (key === undefined) options[group] = x;
      else (options[group] as Record<string, number>)[key] = x;
    });
  }
  // A shared budget's own minimum: each heartbeat is a Redis round trip (see MIN_HEARTBEAT_INTERVAL).
  set(duration('heartbeat-interval'), (x) => {
    if (!(x >= MIN_HEARTBEAT_INTERVAL)) {
      throw new UsageError(
        `--heartbeat-interval: must be a duration of at least ${MIN_HEARTBEAT_INTERVAL} ms, received "${v['heartbeat-interval']}"`,
      );
    }
    p.shared.heartbeatInterval = x;
  });
  set(
    num('floor-fraction', (x) => x >= 0 && x <= 1, 'a number from 0 to 1'),
    (x) => {
      p.shared.floorFraction = x;
    },
  );
  return p;
}

function event(
  current: TimedFactor | undefined,
  atMs: number | undefined,
  durationMs: number | undefined,
  factor: number | undefined,
  fallback: TimedFactor,
): TimedFactor {
  const base = current ?? fallback;
  return {
    atMs: atMs ?? base.atMs,
    durationMs: durationMs ?? base.durationMs,
    factor: factor ?? base.factor,
  };
}
