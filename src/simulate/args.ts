import { parseArgs } from 'node:util';
import { UsageError } from './modes.js';
import { BUILT_IN_MODES, type ModeName, SCENARIOS, type Scenario } from './scenarios.js';

// Browser-safe (the playground uses them too): modes.ts.
export { modesFor, UsageError } from './modes.js';

/** The text of `--help`; `command` is how the user runs the simulator (`npm run simulate --`). */
export const helpText = (command: string): string => `Usage: ${command} [options]

Runs the library's own limiter, controllers and attempt loop against a model API with a hidden
quota, on a virtual clock, and prints the comparison table. Rates are units/min; durations take
500, "500ms", "10s" or "2m" (a plain number is ms).

A command that would take more than 200 million steps (requests times attempts, heartbeats,
samples) is refused before it runs.

Scenarios and modes
  --scenario NAME        a scenario, all, or a comma list (default steady):
                         ${SCENARIOS.map((s) => s.name).join(', ')}
  --modes LIST           none, fixed, aimd, cubic, probe, defaults, custom, api (llm only)
                         (default: the scenario's)
  --controller PATH      a module exporting a RateController as default or \`controller\`;
                         adds the custom mode
  --shared               also runs each limited mode with ONE budget shared by the instances,
                         as adaptive-rate-limit/redis shares it ("AIMD (shared)"), next to the
                         static shares (uneven-demand does by default; --no-shared: not;
                         not in llm: a shared budget leases one budget of units)
  --headers              also runs each limited mode against the API announcing its quota in
                         the IETF RateLimit fields ("AIMD (headers)"; the headers scenario does
                         by default; --no-headers: not)
  --list                 lists the scenarios and exits

Model
  --instances N          processes sharing the quota, each with its own limiter (at most 1000)
  --quota N              the API's hidden quota for all instances, units/min (1 to 1e9)
  --demand N[,N...]      demand of each instance, units/min (a list is used in turn)
  --minutes N            virtual minutes to run (0.0167, a second, to 1440)
  --seed N               seeds every random draw (same number, same run), 0 to 4294967295
  --units MIN-MAX        units of one request, a uniform whole number (default 1-3)
  --latency DURATION     median latency of an answer (log-normal; default 100ms)
  --latency-sigma N      spread of the latency (sigma of its log, 0 to 5; default 0.5)
  --api-burst-seconds N  the API's bucket holds N seconds of the quota (up to 3600; default 2)
  --leaky-burst N        the API is a strict leaky bucket (nginx's limit_req) letting N requests
                         go early (leaky-bucket: 5), 429 with Retry-After: 1
  --arrivals MODEL       poisson (default): each instance's requests arrive at random gaps;
                         interval: one every mean gap, from a random phase per instance, as
                         the control bench sends
  --max-attempts N       attempts per request, the first included (default 4)
  --drop-at DURATION     another client takes part of the quota from then (quota-drop: 5m)
  --drop-for DURATION    ... for this long (60s)
  --drop-to FRACTION     ... leaving this fraction of it, 0 to 1 (0.5)
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
  --heartbeat-interval DURATION  each instance's heartbeat (default 250ms, at least 10ms)
  --floor-fraction N             part of the rate kept as a floor for the instances (default 0.05)

Output
  --json                 one JSON object per mode (columns, counts, parameters, wallMs)
  --series               with --json (only): add the time series (one sample per virtual second)
  --html FILE            writes a self-contained page with charts over time
  --help                 this text
`;

/** The flags `npm run simulate` takes (see HELP). */
const OPTIONS = {
  scenario: { type: 'string' },
  modes: { type: 'string' },
  controller: { type: 'string' },
  shared: { type: 'boolean' },
  headers: { type: 'boolean' },
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
  'leaky-burst': { type: 'string' },
  arrivals: { type: 'string' },
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

/** The flags as parsed: strings, as given (see overrides.ts), or booleans. */
export type Values = ReturnType<
  typeof parseArgs<{ options: typeof OPTIONS; strict: true; allowNegative: true }>
>['values'];

/** Parses the CLI's arguments (without node and the script); a bad flag throws {@link UsageError}. */
export function parseFlags(args: readonly string[]): Values {
  refuseMissingValues(args);
  let parsed: ReturnType<typeof parseTokens>;
  try {
    parsed = parseTokens(args);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  // A flag given twice would keep its last value in silence (`--quota 100 --quota 200`).
  const given = new Map<string, string | undefined>();
  for (const token of parsed.tokens) {
    if (token.kind !== 'option') continue;
    const before = given.get(token.name);
    if (given.has(token.name)) {
      const values = [before, token.value].filter((v) => v !== undefined).map((v) => `"${v}"`);
      throw new UsageError(
        `--${token.name}: given twice${values.length > 0 ? ` (${values.join(', ')})` : ''}`,
      );
    }
    given.set(token.name, token.value);
  }
  return parsed.values;
}

function parseTokens(args: readonly string[]) {
  return parseArgs({
    args: withNegativeValues(args),
    options: OPTIONS,
    strict: true,
    allowPositionals: false,
    allowNegative: true,
    tokens: true,
  });
}

/**
 * A flag that takes a value given without one, last (`--quota`) or before another flag
 * (`--scenario --json`): parseArgs said `Option '--quota <value>' argument missing` or called it
 * ambiguous, naming neither what the flag must be given nor what it received; so was one before
 * `--`, the end of the flags (`--quota --`), which gives none. A value that starts
 * with a dash and is no flag (`--quota -5`, `--quota -`) is the flag's value, for its own check.
 */
function refuseMissingValues(args: readonly string[]): void {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '--') return;
    const option = (OPTIONS as Record<string, { type: string }>)[arg.slice(2)];
    if (!arg.startsWith('--') || option?.type !== 'string') continue;
    // `--` ends the flags: what follows it is no value (`--quota --` was "argument is ambiguous").
    const next = args[i + 1] === '--' ? undefined : args[i + 1];
    if (next !== undefined && !/^-(?:-.|[A-Za-z])/.test(next)) {
      i++;
      continue;
    }
    throw new UsageError(
      `${arg}: must be given a value (${arg} VALUE or ${arg}=VALUE), received ${next === undefined ? 'none' : `the flag ${next}`}`,
    );
  }
}

/**
 * `--quota -5` read as `--quota=-5`: parseArgs refuses a value that starts with a dash as
 * ambiguous (its text asks for `--quota=-XYZ`), where the flag's own check tells its range.
 */
function withNegativeValues(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    const next = args[i + 1];
    const option = (OPTIONS as Record<string, { type: string }>)[arg.slice(2)];
    if (arg.startsWith('--') && option?.type === 'string' && next !== undefined && /^-[\d.]/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}

/** The scenarios `--scenario` names: one, a comma list, or all. */
export function pickScenarios(names: string): Scenario[] {
  if (names === 'all') return [...SCENARIOS];
  const seen = new Set<string>();
  return names.split(',').map((name) => {
    if (seen.has(name.trim()))
      throw new UsageError(`--scenario: "${name.trim()}" given twice, received "${names}"`);
    seen.add(name.trim());
    const found = SCENARIOS.find((s) => s.name === name.trim());
    if (!found) {
      throw new UsageError(
        `--scenario: unknown scenario "${name}"; one of ${SCENARIOS.map((s) => s.name).join(', ')}, all`,
      );
    }
    return found;
  });
}

/** The modes `--modes` lists. */
export function parseModes(text: string): ModeName[] {
  const known: readonly string[] = [...BUILT_IN_MODES, 'api', 'custom'];
  const seen = new Set<string>();
  return text.split(',').map((m) => {
    const name = m.trim();
    if (seen.has(name)) throw new UsageError(`--modes: "${name}" given twice, received "${text}"`);
    seen.add(name);
    if (!known.includes(name))
      throw new UsageError(`--modes: unknown mode "${name}"; one of ${known.join(', ')}`);
    return name as ModeName;
  });
}
