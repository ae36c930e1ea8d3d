import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { tryParseDuration } from '../config/duration.js';
import { ConfigError } from '../errors.js';
import { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import { loadControllerModule } from './controller-module.js';
import { type ReportGroup, renderHtml } from './report-html.js';
import {
  builtInMode,
  limiterOptionsFor,
  type ModeResult,
  type ModeSpec,
  runMode,
  sharedMode,
} from './run.js';
import {
  BUILT_IN_MODES,
  cloneParams,
  type ModeName,
  SCENARIOS,
  type Scenario,
  type SimParams,
  type TimedFactor,
} from './scenarios.js';
import { describeParams, formatTable } from './table.js';
import { VirtualClock } from './virtual-clock.js';

const HELP = `Usage: npm run simulate -- [options]

Runs the library's own limiter, controllers and attempt loop against a model API with a hidden
quota, on a virtual clock, and prints the comparison table. Rates are units/min; durations take
500, "500ms", "10s" or "2m" (a plain number is ms).

Scenarios and modes
  --scenario NAME        a scenario, all, or a comma list (default steady):
                         ${SCENARIOS.map((s) => s.name).join(', ')}
  --modes LIST           none, fixed, aimd, cubic, custom (default: the scenario's)
  --controller PATH      a module exporting a RateController as default or \`controller\`;
                         adds the custom mode
  --shared               also runs each limited mode with ONE budget shared by the instances,
                         as adaptive-rate-limit/redis shares it ("AIMD (shared)"), next to the
                         static shares (uneven-demand does by default; --no-shared: not)
  --list                 lists the scenarios and exits

Model
  --instances N          processes sharing the quota, each with its own limiter
  --quota N              the API's hidden quota for all instances, units/min
  --demand N[,N...]      demand of each instance, units/min (a list is used in turn)
  --minutes N            virtual minutes to run
  --seed N               the seed of every random draw
  --units MIN-MAX        units of one request, a uniform whole number (default 1-3)
  --latency DURATION     median latency of an answer (log-normal; default 100ms)
  --latency-sigma N      spread of the latency (sigma of its log; default 0.5)
  --api-burst-seconds N  the API's bucket holds N seconds of the quota (default 2)
  --max-attempts N       attempts per request, the first included (default 4)
  --drop-at DURATION     another client takes part of the quota from then (quota-drop: 5m)
  --drop-for DURATION    ... for this long (60s)
  --drop-to FRACTION     ... leaving this fraction of it (0.5)
  --burst-at DURATION    the demand jumps from then (burst: 5m)
  --burst-for DURATION   ... for this long (30s)
  --burst-factor N       ... to N times (5)

Limiter (rates for the whole budget; each instance gets 1/instances of them)
  --initial-units-per-minute N   (default 1500)
  --min-units-per-minute N       (default 1)
  --max-units-per-minute N       (default 5625)
  --fixed-units-per-minute N     the rate of the fixed mode (default 1500)
  --max-wait DURATION            (default 60s)
  --queue-limit N                (default 10000)
  --decrease-cooldown DURATION   (default 1s)
  --max-pause DURATION           (default 10m)
  --increase-step N              AIMD (default 120)
  --increase-interval DURATION   AIMD (default 10s)
  --decrease-factor N            AIMD (default 0.7)
  --beta N                       CUBIC (default 0.7)
  --scale-constant N             CUBIC (default 0.4)

Shared budget (the "(shared)" modes)
  --heartbeat-interval DURATION  each instance's heartbeat (default 250ms)
  --floor-fraction N             part of the rate kept as a floor for the instances (default 0.05)

Output
  --json                 one JSON object per mode (columns, counts, parameters, wallMs)
  --series               with --json: add the time series (one sample per virtual second)
  --html FILE            writes a self-contained page with charts over time
  --help                 this text
`;

const OPTIONS = {
  scenario: { type: 'string' },
  modes: { type: 'string' },
  controller: { type: 'string' },
  shared: { type: 'boolean' },
  list: { type: 'boolean' },
  instances: { type: 'string' },
  quota: { type: 'string' },
  demand: { type: 'string' },
  minutes: { type: 'string' },
  seed: { type: 'string' },
  units: { type: 'string' },
  latency: { type: 'string' },
  'latency-sigma': { type: 'string' },
  'api-burst-seconds': { type: 'string' },
  'max-attempts': { type: 'string' },
  'drop-at': { type: 'string' },
  'drop-for': { type: 'string' },
  'drop-to': { type: 'string' },
  'burst-at': { type: 'string' },
  'burst-for': { type: 'string' },
  'burst-factor': { type: 'string' },
  'initial-units-per-minute': { type: 'string' },
  'min-units-per-minute': { type: 'string' },
  'max-units-per-minute': { type: 'string' },
  'fixed-units-per-minute': { type: 'string' },
  'max-wait': { type: 'string' },
  'queue-limit': { type: 'string' },
  'decrease-cooldown': { type: 'string' },
  'max-pause': { type: 'string' },
  'increase-step': { type: 'string' },
  'increase-interval': { type: 'string' },
  'decrease-factor': { type: 'string' },
  beta: { type: 'string' },
  'scale-constant': { type: 'string' },
  'heartbeat-interval': { type: 'string' },
  'floor-fraction': { type: 'string' },
  json: { type: 'boolean' },
  series: { type: 'boolean' },
  html: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Values = ReturnType<
  typeof parseArgs<{ options: typeof OPTIONS; strict: true; allowNegative: true }>
>['values'];

/** A bad flag: the message names it and the value received. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** Where the CLI writes; the terminal by default. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown; isTTY?: boolean; columns?: number };
  cwd: string;
}

const defaultIo = (): CliIo => ({ stdout: process.stdout, stderr: process.stderr, cwd: process.cwd() });

/** Runs the CLI with `args` (without node and the script); resolves to the exit code. */
export async function main(args: readonly string[], io: CliIo = defaultIo()): Promise<number> {
  try {
    return await run(args, io);
  } catch (error) {
    if (error instanceof UsageError || error instanceof ConfigError) {
      io.stderr.write(`simulate: ${error.message}\nRun with --help for the options.\n`);
      return 2;
    }
    throw error;
  }
}

async function run(args: readonly string[], io: CliIo): Promise<number> {
  let values: Values;
  try {
    ({ values } = parseArgs({
      args: [...args],
      options: OPTIONS,
      strict: true,
      allowPositionals: false,
      allowNegative: true,
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) {
    io.stdout.write(HELP);
    return 0;
  }
  if (values.list) {
    for (const s of SCENARIOS) io.stdout.write(`${s.name.padEnd(20)} ${s.description}\n`);
    return 0;
  }

  const scenarios = pickScenarios(values.scenario ?? 'steady');
  const custom = values.controller ? await loadControllerModule(values.controller, io.cwd) : undefined;
  const requested = values.modes === undefined ? undefined : parseModes(values.modes);
  const plan = scenarios.map((scenario) => ({
    scenario,
    params: applyOverrides(cloneParams(scenario.params), values),
    modes: modesFor(
      requested ?? scenario.modes,
      custom,
      requested === undefined,
      values.shared ?? scenario.shared === true,
    ),
  }));

  // Check every mode's limiter options before the first run: a bad one fails at once.
  for (const { params, modes } of plan) {
    for (const mode of modes) {
      const options = limiterOptionsFor(mode, params);
      if (options !== undefined) new AdaptiveRateLimiter({ ...options, clock: new VirtualClock() });
    }
  }

  const wantSeries = values.html !== undefined || values.series === true;
  const totalMs = plan.reduce((sum, p) => sum + p.modes.length * p.params.minutes * 60_000, 0);
  const progress = new ProgressBar(io.stderr, totalMs);
  const started = performance.now();
  const groups: ReportGroup[] = [];
  let doneMs = 0;
  for (const { scenario, params, modes } of plan) {
    const results: ModeResult[] = [];
    for (const mode of modes) {
      progress.label = `${scenario.name} / ${mode.label}`;
      const base = doneMs;
      results.push(
        await runMode(scenario.name, params, mode, {
          series: wantSeries,
          onProgress: (virtualMs) => progress.update(base + virtualMs),
        }),
      );
      doneMs += params.minutes * 60_000;
    }
    groups.push({ scenario: scenario.name, description: scenario.description, results });
  }
  progress.clear();
  const tookMs = performance.now() - started;
  const runs = plan.reduce((n, p) => n + p.modes.length, 0);
  const took = `took ${(tookMs / 1000).toFixed(1)} s (${runs} ${runs === 1 ? 'run' : 'runs'})`;

  if (values.html !== undefined) {
    const file = resolve(io.cwd, values.html);
    const command = ['npm run simulate --', ...args].join(' ');
    writeFileSync(file, renderHtml(groups, { command, tookMs }));
  }
  if (values.json) {
    const all = groups.flatMap((g) => g.results);
    const out = values.series ? all : all.map(({ series: _series, ...rest }) => rest);
    io.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
    io.stderr.write(`${took}\n`);
  } else {
    for (const g of groups) {
      const first = g.results[0];
      io.stdout.write(`${g.scenario}: ${g.description}\n`);
      if (first) io.stdout.write(`${describeParams(first)}. Model numbers, units/min.\n\n`);
      io.stdout.write(`${formatTable(g.results)}\n\n`);
    }
    if (values.html !== undefined) io.stdout.write(`wrote ${values.html}\n`);
    io.stdout.write(`${took}\n`);
  }
  return 0;
}

function pickScenarios(names: string): Scenario[] {
  if (names === 'all') return [...SCENARIOS];
  return names.split(',').map((name) => {
    const found = SCENARIOS.find((s) => s.name === name.trim());
    if (!found) {
      throw new UsageError(
        `--scenario: unknown scenario "${name}"; one of ${SCENARIOS.map((s) => s.name).join(', ')}, all`,
      );
    }
    return found;
  });
}

function parseModes(text: string): ModeName[] {
  const known: readonly string[] = [...BUILT_IN_MODES, 'custom'];
  return text.split(',').map((m) => {
    const name = m.trim();
    if (!known.includes(name))
      throw new UsageError(`--modes: unknown mode "${name}"; one of ${known.join(', ')}`);
    return name as ModeName;
  });
}

function modesFor(
  names: readonly ModeName[],
  custom: ModeSpec | undefined,
  addCustom: boolean,
  shared: boolean,
): ModeSpec[] {
  const specs: ModeSpec[] = [];
  for (const name of names) {
    if (name !== 'custom') specs.push(builtInMode(name));
    else if (custom) specs.push(custom);
    else throw new UsageError('--modes custom needs --controller PATH');
  }
  if (custom && addCustom && !names.includes('custom')) specs.push(custom);
  if (!shared) return specs;
  // Each limited mode, then the same mode with one shared budget.
  return specs.flatMap((spec) => {
    const variant = sharedMode(spec);
    return variant === undefined ? [spec] : [spec, variant];
  });
}

/** Applies the flags to a copy of a scenario's parameters. */
export function applyOverrides(params: SimParams, v: Partial<Values>): SimParams {
  const p = params;
  const l = p.limiter;
  const num = (flag: keyof Values, ok: (x: number) => boolean, what: string): number | undefined => {
    const text = v[flag];
    if (typeof text !== 'string') return undefined;
    const x = Number(text);
    if (text.trim() === '' || !Number.isFinite(x) || !ok(x)) {
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
  const set = <T>(value: T | undefined, apply: (x: T) => void) => {
    if (value !== undefined) apply(value);
  };

  set(whole('instances', 1), (x) => {
    p.instances = x;
  });
  set(positive('quota'), (x) => {
    p.quota = x;
  });
  if (typeof v.demand === 'string') {
    const list = v.demand.split(',').map((d) => Number(d));
    if (list.some((d) => !Number.isFinite(d) || d < 0)) {
      throw new UsageError(`--demand: expected numbers >= 0 separated by commas, received "${v.demand}"`);
    }
    p.demand = list;
  }
  set(positive('minutes'), (x) => {
    p.minutes = x;
  });
  set(whole('seed', 0), (x) => {
    p.seed = x;
  });
  if (typeof v.units === 'string') {
    const m = /^(\d+)(?:-(\d+))?$/.exec(v.units.trim());
    const min = m ? Number(m[1]) : Number.NaN;
    const max = m?.[2] !== undefined ? Number(m[2]) : min;
    if (!(min >= 1 && max >= min))
      throw new UsageError(`--units: expected N or MIN-MAX (whole, >= 1), received "${v.units}"`);
    p.unitsPerRequest = { min, max };
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
  set(whole('max-attempts', 1), (x) => {
    p.maxAttempts = x;
  });

  const dropAt = duration('drop-at');
  const dropFor = duration('drop-for');
  const dropTo = num('drop-to', (x) => x >= 0, 'a fraction >= 0');
  if (dropAt !== undefined || dropFor !== undefined || dropTo !== undefined) {
    p.quotaEvents = [
      event(p.quotaEvents[0], dropAt, dropFor, dropTo, { atMs: 300_000, durationMs: 60_000, factor: 0.5 }),
    ];
  }
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

/** A one-line progress bar on a terminal (stderr); silent when it is not a TTY. */
class ProgressBar {
  label = '';
  readonly #out: CliIo['stderr'];
  readonly #total: number;
  readonly #enabled: boolean;
  #drawnAt = 0;
  #drawn = false;

  constructor(out: CliIo['stderr'], total: number) {
    this.#out = out;
    this.#total = total;
    this.#enabled = out.isTTY === true && total > 0;
  }

  /** Characters of the line: the terminal's width (a narrow or unknown one counts as 80), at most 80. */
  get #width(): number {
    const columns = this.#out.columns;
    return columns !== undefined && columns > 20 ? Math.min(columns - 1, 80) : 79;
  }

  update(done: number): void {
    if (!this.#enabled) return;
    const now = performance.now();
    if (now - this.#drawnAt < 100) return;
    this.#drawnAt = now;
    const fraction = Math.min(1, done / this.#total);
    const width = 30;
    const filled = Math.round(fraction * width);
    const bar = `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${String(Math.round(fraction * 100)).padStart(3)}% ${this.label}`;
    this.#out.write(`\r${bar.slice(0, this.#width).padEnd(this.#width)}`);
    this.#drawn = true;
  }

  clear(): void {
    if (this.#drawn) this.#out.write(`\r${' '.repeat(this.#width)}\r`);
    this.#drawn = false;
  }
}

const invokedAs = process.argv[1] === undefined ? undefined : resolve(process.argv[1]);
if (invokedAs === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
