import { UsageError, type Values } from './args.js';
import { MIN_LATENCY_MS } from './model-api.js';
import { boundaries, factorAt, fitDemand, meanUnits, type SimParams } from './scenarios.js';

/**
 * The most instances `--instances` takes: each is a limiter with its own state and timers, and
 * the per-second samples visit every one (a billion ran the process out of memory).
 */
export const MAX_INSTANCES = 1_000;

/**
 * The most steps a command may take, its runs together (see {@link runSteps}): some minutes of
 * a core at worst (the count is an upper bound). `--scenario all` takes some 10 million, the
 * steady scenario over a virtual day (`--minutes 1440`) some 70 million.
 */
const MAX_STEPS = 200_000_000;

/**
 * The most samples the time series of a whole command may keep (`--series`, `--html`): each
 * instance's rate and seven totals, once per virtual second and mode. Past it the JSON or the
 * page runs to gigabytes, and past 512 MiB JavaScript cannot hold it as one string.
 */
const MAX_SERIES_SAMPLES = 10_000_000;

/** The flags that change how many steps a run takes, in the order the message lists them. */
const STEP_FLAGS = [
  'instances',
  'demand',
  'minutes',
  'units',
  'max-attempts',
  'burst-at',
  'burst-for',
  'burst-factor',
  'heartbeat-interval',
  'latency',
  'latency-sigma',
  'scenario',
  'modes',
] as const satisfies readonly (keyof Values)[];

/**
 * An upper bound of the work of one run of one mode, in steps: each request's attempts
 * (`maxAttempts` each at most), each instance's per-second sample, and in a shared mode each
 * instance's heartbeats. Requests: the demand integrated over the run with its events, over the
 * mean units of a request, plus the initial bursts and a crowd's requests.
 */
function runSteps(p: SimParams, shared: boolean): number {
  const endMs = p.minutes * 60_000;
  const demand = fitDemand(p.demand, p.instances).reduce((sum, d) => sum + d, 0);
  const times = [0, ...boundaries(p.demandEvents, endMs), endMs];
  let unitMinutes = 0;
  for (let i = 0; i + 1 < times.length; i++) {
    const from = times[i] as number;
    unitMinutes += (demand * factorAt(p.demandEvents, from) * ((times[i + 1] as number) - from)) / 60_000;
  }
  const requests =
    unitMinutes / meanUnits(p.unitsPerRequest) +
    p.instances * ((p.initialBurst ?? 0) + (p.crowd?.requestsEach ?? 0));
  const samples = p.instances * (endMs / 1000);
  const heartbeats = shared ? (p.instances * endMs) / p.shared.heartbeatInterval : 0;
  return requests * p.maxAttempts + recalls(p, endMs) + samples + heartbeats;
}

/**
 * The attempts of a crowd whose unserved requests are called again (`untilServed`), at most: each
 * process calls again at once after a 429, so with no limiter it sends one attempt per answer's
 * latency for the whole run. The mean of one over a log-normal latency is `e^(sigma²/2)` over its
 * median; no answer comes sooner than {@link MIN_LATENCY_MS}.
 */
function recalls(p: SimParams, endMs: number): number {
  if (p.crowd?.untilServed !== true) return 0;
  const { medianMs, sigma } = p.latency;
  const perMs = Math.min(1 / MIN_LATENCY_MS, Math.exp((sigma * sigma) / 2) / medianMs);
  return p.instances * endMs * perMs;
}

/**
 * Refuses, before anything runs, a command that would run for hours or run out of memory: runs
 * past {@link MAX_STEPS} in all, time series past {@link MAX_SERIES_SAMPLES}. The message
 * names the flags given that weigh on it, with their values.
 */
export function checkWorkload(
  plan: readonly { params: SimParams; modes: readonly { shared?: boolean }[] }[],
  values: Partial<Values>,
  wantSeries: boolean,
): void {
  const given = (flags: readonly (keyof Values)[]) =>
    flags
      .filter((flag) => typeof values[flag] === 'string')
      .map((flag) => `--${flag} ${JSON.stringify(values[flag])}`)
      .join(', ');
  const steps = plan.reduce(
    (sum, { params, modes }) =>
      sum + modes.reduce((n, mode) => n + runSteps(params, mode.shared === true), 0),
    0,
  );
  if (!(steps <= MAX_STEPS)) {
    const runs = plan.reduce((n, p) => n + p.modes.length, 0);
    throw new UsageError(
      `${given(STEP_FLAGS) || '--scenario'}: ${runs} ${runs === 1 ? 'run' : 'runs'} would take up to ${steps.toExponential(1)} steps (requests × attempts, heartbeats, per-second samples), more than ${MAX_STEPS.toLocaleString('en-US')} (some minutes); lower --demand, --instances, --minutes, --max-attempts or --burst-factor, raise --heartbeat-interval (or a crowd's --latency), or run fewer scenarios or modes`,
    );
  }
  if (!wantSeries) return;
  const samples = plan.reduce(
    (sum, { params, modes }) => sum + modes.length * (params.instances + 7) * params.minutes * 60,
    0,
  );
  if (samples > MAX_SERIES_SAMPLES) {
    const flag = values.html !== undefined ? `--html ${JSON.stringify(values.html)}` : '--series';
    throw new UsageError(
      `${flag}: the time series would keep ${samples.toLocaleString('en-US')} samples (one per instance and virtual second, per mode), more than ${MAX_SERIES_SAMPLES.toLocaleString('en-US')}; lower --instances or --minutes, or run fewer scenarios or modes`,
    );
  }
}
