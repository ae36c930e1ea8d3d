import { tryParseDuration } from '../config/duration.js';
import { UsageError, type Values } from './args.js';
import { ARRIVAL_MODELS, type SimParams, type TimedFactor } from './scenarios.js';
import { MAX_INSTANCES } from './workload.js';

/** The longest run `--minutes` takes: one virtual day. */
const MAX_MINUTES = 1440;

/** The largest `--seed`: the generator is seeded with 32 bits, so a larger seed would repeat a smaller one's run. */
const MAX_SEED = 0xffff_ffff;

/**
 * A number as the flags take it: decimal, with an optional exponent (`1500`, `0.5`, `1e3`).
 * `Number()` alone also reads `0x10`, `0b11` and `0o7`, and an empty string as 0.
 */
const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/** Applies the flags to a copy of a scenario's parameters. */
export function applyOverrides(params: SimParams, v: Partial<Values>): SimParams {
  const p = params;
  const l = p.limiter;
  const num = (flag: keyof Values, ok: (x: number) => boolean, what: string): number | undefined => {
    const text = v[flag];
    if (typeof text !== 'string') return undefined;
    const x = Number(text);
    if (!DECIMAL.test(text.trim()) || !Number.isFinite(x) || !ok(x)) {
      throw new UsageError(`--${flag}: expected ${what}, received "${text}"`);
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
      throw new UsageError(`--${flag}: expected a duration such as 500, "10s" or "2m", received "${text}"`);
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
  set(positive('quota'), (x) => {
    p.quota = x;
  });
  if (typeof v.demand === 'string') {
    // An empty entry (`--demand=`, `100,,100`) is no demand of 0: Number('') would read it so.
    const entries = v.demand.split(',').map((d) => d.trim());
    const list = entries.map((d) => Number(d));
    if (entries.some((d, i) => !DECIMAL.test(d) || !Number.isFinite(list[i]) || (list[i] as number) < 0)) {
      throw new UsageError(`--demand: expected numbers >= 0 separated by commas, received "${v.demand}"`);
    }
    // A value past the last instance would be dropped in silence (the list is used in turn).
    if (list.length > p.instances) {
      throw new UsageError(
        `--demand: ${list.length} values for ${p.instances} ${p.instances === 1 ? 'instance' : 'instances'} (--instances), received "${v.demand}"; give at most one per instance`,
      );
    }
    p.demand = list;
  }
  // A virtual day at most: 15 virtual minutes take about 0.3 s, so 1e9 would run for years in silence.
  set(
    num('minutes', (x) => x > 0 && x <= MAX_MINUTES, `a number > 0 and <= ${MAX_MINUTES} (a virtual day)`),
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
    if (!(min >= 1 && max >= min))
      throw new UsageError(`--units: expected N or MIN-MAX (whole, >= 1), received "${v.units}"`);
    p.unitsPerRequest = { ...p.unitsPerRequest, min, max };
  }
  set(duration('latency'), (x) => {
    p.latency.medianMs = x;
  });
  set(
    num('latency-sigma', (x) => x >= 0, 'a number >= 0'),
    (x) => {
      p.latency.sigma = x;
    },
  );
  set(positive('api-burst-seconds'), (x) => {
    p.apiBurstSeconds = x;
  });
  set(whole('leaky-burst', 0), (x) => {
    p.leakyBucket = { burst: x };
  });
  if (typeof v.arrivals === 'string') {
    const model = ARRIVAL_MODELS.find((m) => m === v.arrivals);
    if (model === undefined) {
      throw new UsageError(
        `--arrivals: expected one of ${ARRIVAL_MODELS.join(', ')}, received "${v.arrivals}"`,
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

  set(positive('initial-units-per-minute'), (x) => {
    l.initialUnitsPerMinute = x;
  });
  set(positive('min-units-per-minute'), (x) => {
    l.minUnitsPerMinute = x;
  });
  set(positive('max-units-per-minute'), (x) => {
    l.maxUnitsPerMinute = x;
  });
  set(positive('fixed-units-per-minute'), (x) => {
    l.fixedUnitsPerMinute = x;
  });
  set(duration('max-wait'), (x) => {
    l.maxWait = x;
  });
  set(whole('queue-limit', 0), (x) => {
    l.queueLimit = x;
  });
  set(duration('decrease-cooldown'), (x) => {
    l.decreaseCooldown = x;
  });
  set(duration('max-pause'), (x) => {
    l.maxPause = x;
  });
  set(positive('increase-step'), (x) => {
    l.aimd.increaseStep = x;
  });
  set(duration('increase-interval'), (x) => {
    l.aimd.increaseInterval = x;
  });
  set(fraction('decrease-factor'), (x) => {
    l.aimd.decreaseFactor = x;
  });
  set(fraction('beta'), (x) => {
    l.cubic.beta = x;
  });
  set(positive('scale-constant'), (x) => {
    l.cubic.scaleConstant = x;
  });
  set(duration('heartbeat-interval'), (x) => {
    if (!(x > 0)) {
      throw new UsageError(
        `--heartbeat-interval: expected a duration > 0, received "${v['heartbeat-interval']}"`,
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
