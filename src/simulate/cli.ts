import { statSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '../errors.js';
import { AdaptiveRateLimiter } from '../limiter/adaptive.js';
import {
  helpText,
  modesFor,
  parseFlags,
  parseModes,
  pickScenarios,
  UsageError,
  type Values,
} from './args.js';
import { loadControllerModule } from './controller-module.js';
import { applyOverrides, LIMITER_FLAGS } from './overrides.js';
import { ProgressBar } from './progress.js';
import { type ReportGroup, renderHtml } from './report-html.js';
import { limiterOptionsFor, type ModeResult, type ModeSpec, runMode } from './run.js';
import { cloneParams, SCENARIOS, type SimParams } from './scenarios.js';
import { describeParams, formatTable, tableLegend } from './table.js';
import { VirtualClock } from './virtual-clock.js';
import { checkWorkload } from './workload.js';

// The flags (args.ts) and their effect on a scenario's parameters (overrides.ts), as before.
export { UsageError } from './args.js';
export { applyOverrides } from './overrides.js';

/** Where the CLI writes; the terminal by default. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown; isTTY?: boolean; columns?: number };
  cwd: string;
  /** How the user runs the simulator, for the help and the HTML report. @default 'npm run simulate --' */
  command?: string;
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
  const values = parseFlags(args);
  if (values.help) {
    io.stdout.write(helpText(io.command ?? 'npm run simulate --'));
    return 0;
  }
  if (values.list) {
    for (const s of SCENARIOS) io.stdout.write(`${s.name.padEnd(20)} ${s.description}\n`);
    return 0;
  }

  // Flags that would do nothing, in silence.
  if (values.series === true && values.json !== true)
    throw new UsageError(
      '--series: only with --json (the time series goes in its JSON; --html draws its own)',
    );
  if (values.controller === '')
    throw new UsageError('--controller: must be the path of a module, received ""');

  if (values.html !== undefined) checkHtmlFile(values.html, io.cwd);

  const scenarios = pickScenarios(values.scenario ?? 'steady');
  const custom =
    values.controller !== undefined ? await loadControllerModule(values.controller, io.cwd) : undefined;
  const requested = values.modes === undefined ? undefined : parseModes(values.modes);
  if (custom !== undefined && requested !== undefined && !requested.includes('custom'))
    throw new UsageError(
      `--controller: --modes "${values.modes}" runs no custom mode; add custom to --modes to run ${values.controller}`,
    );
  // The api mode is an LLM API's preset: in the llm scenario only (left out of the others).
  if (requested?.includes('api') && scenarios.every((s) => s.params.llm === undefined))
    throw new UsageError(
      `--modes: the api mode needs an LLM API: only with --scenario llm, received --scenario "${values.scenario ?? 'steady'}"`,
    );
  const plan = scenarios.map((scenario) => ({
    scenario,
    params: applyOverrides(cloneParams(scenario.params), values, `scenario ${scenario.name}`),
    modes: modesFor(
      (requested ?? scenario.modes).filter((m) => m !== 'api' || scenario.params.llm !== undefined),
      custom,
      requested === undefined,
      // A shared budget leases one budget of units: not an LLM API's pair of budgets.
      (values.shared ?? scenario.shared === true) && scenario.params.llm === undefined,
      values.headers ?? scenario.headers === true,
    ),
  }));

  refuseUnread(plan, values);

  // A command that would run for hours or run out of memory fails at once, naming its flags.
  const wantSeries = values.html !== undefined || values.series === true;
  checkWorkload(plan, values, wantSeries);

  // Check every mode's limiter options before the first run: a bad one fails at once.
  for (const { scenario, params, modes } of plan) {
    for (const mode of modes) {
      const options = limiterOptionsFor(mode, params);
      try {
        if (options !== undefined) new AdaptiveRateLimiter({ ...options, clock: new VirtualClock() });
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        throw new ConfigError(
          error.issues.map((issue) => ({
            ...issue,
            path: flagPath(issue.path, mode.name, values),
            message: issue.message + flagsNamed(issue.path, issue.message, mode.name, values),
          })),
          `limiter options of ${scenario.name} / ${mode.label}`,
        );
      }
    }
  }

  const totalMs = plan.reduce((sum, p) => sum + p.modes.length * p.params.minutes * 60_000, 0);
  const progress = new ProgressBar(io.stderr, totalMs);
  const started = performance.now();
  const groups: (ReportGroup & { unchanged: boolean })[] = [];
  let doneMs = 0;
  for (const { scenario, params, modes } of plan) {
    const results: ModeResult[] = [];
    for (const mode of modes) {
      progress.label = `${scenario.name} / ${mode.label}`;
      const base = doneMs;
      try {
        results.push(
          await runMode(scenario.name, params, mode, {
            series: wantSeries,
            onProgress: (virtualMs) => progress.update(base + virtualMs),
          }),
        );
      } catch (error) {
        // A custom controller that throws mid-run: one line naming the flag, its file and the run.
        if (mode !== custom) throw error;
        progress.clear();
        const reason = error instanceof Error ? error.message : String(error);
        throw new UsageError(
          `--controller ${values.controller}: the controller threw during ${scenario.name} / ${mode.label}: ${reason}`,
        );
      }
      doneMs += params.minutes * 60_000;
    }
    groups.push({
      scenario: scenario.name,
      description: scenario.description,
      unchanged: JSON.stringify(params) === JSON.stringify(scenario.params),
      results,
    });
  }
  progress.clear();
  const tookMs = performance.now() - started;
  const runs = plan.reduce((n, p) => n + p.modes.length, 0);
  const took = `took ${(tookMs / 1000).toFixed(1)} s (${runs} ${runs === 1 ? 'run' : 'runs'})`;

  if (values.html !== undefined) {
    const file = resolve(io.cwd, values.html);
    const command = [io.command ?? 'npm run simulate --', ...args.map(shellWord)].join(' ');
    try {
      writeFileSync(file, renderHtml(groups, { command, tookMs }));
    } catch (error) {
      // A folder that does not exist, no right to write: one line, not a stack trace.
      const reason = error instanceof Error ? error.message : String(error);
      throw new UsageError(`--html: cannot write ${file} (${reason})`);
    }
  }
  if (values.json) {
    const all = groups.flatMap((g) => g.results);
    const out = values.series ? all : all.map(({ series: _series, ...rest }) => rest);
    io.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
    io.stderr.write(`${took}\n`);
  } else {
    for (const g of groups) {
      const first = g.results[0];
      // The title says what ran; the scenario's words only while no flag changed its parameters.
      io.stdout.write(`${g.scenario}: ${first ? describeParams(first) : ''}. Model numbers, units/min.\n`);
      if (g.unchanged) io.stdout.write(`${g.description}\n`);
      io.stdout.write(`\n${formatTable(g.results)}\n${tableLegend(g.results)}\n\n`);
    }
    if (values.html !== undefined) io.stdout.write(`wrote ${values.html}\n`);
    io.stdout.write(`${took}\n`);
  }
  return 0;
}

/** Flags that only some modes read, by the mode names that read them. */
const MODE_FLAGS: readonly (readonly [keyof Values, readonly string[]])[] = [
  ['increase-step', ['aimd']],
  ['increase-interval', ['aimd']],
  ['decrease-factor', ['aimd']],
  ['beta', ['cubic']],
  ['scale-constant', ['cubic']],
  ['fixed-units-per-minute', ['fixed']],
];

/** The flags a crowd's instances do not read: each sends its few requests one at a time. */
const CROWD_UNREAD: readonly (keyof Values)[] = [
  'demand',
  'arrivals',
  'burst-at',
  'burst-for',
  'burst-factor',
];

/**
 * Refuses a flag that nothing in the run reads (it would change nothing, in silence): a mode's
 * option with no such mode, a shared budget's with no shared mode, a crowd scenario's demand, a
 * token bucket's size against a leaky bucket.
 */
function refuseUnread(
  plan: readonly { scenario: { name: string }; params: SimParams; modes: readonly ModeSpec[] }[],
  values: Values,
): void {
  const modes = plan.flatMap((p) => p.modes);
  for (const [flag, readers] of MODE_FLAGS) {
    if (values[flag] !== undefined && !modes.some((m) => readers.includes(m.name)))
      throw new UsageError(`--${flag}: no mode that runs reads it (only ${readers.join(', ')})`);
  }
  for (const flag of ['heartbeat-interval', 'floor-fraction'] as const) {
    if (values[flag] !== undefined && !modes.some((m) => m.shared === true))
      throw new UsageError(`--${flag}: no shared mode runs (add --shared)`);
  }
  // With several scenarios (`all`), a flag one of them reads is taken.
  const names = plan.map((p) => p.scenario.name).join(', ');
  const crowd = CROWD_UNREAD.find((f) => values[f] !== undefined);
  if (crowd !== undefined && plan.every((p) => p.params.crowd !== undefined))
    throw new UsageError(
      `--${crowd}: ${names} does not read it (each instance sends its requests one at a time)`,
    );
  if (values['api-burst-seconds'] !== undefined && plan.every((p) => p.params.leakyBucket !== undefined))
    throw new UsageError(`--api-burst-seconds: ${names}'s API is a leaky bucket (its size is --leaky-burst)`);
}

/**
 * Refuses an `--html` file that cannot be written, before the runs: the page was written after
 * every run, so `--html ""` (the working folder), a folder, or a file in a folder that does not
 * exist failed only once the runs were done (`cannot write ... (EISDIR)`). What only the write can
 * tell (no right to write, a full disk) still fails then, in one line.
 */
function checkHtmlFile(html: string, cwd: string): void {
  const file = resolve(cwd, html);
  if (html.trim() === '' || isFolder(file))
    throw new UsageError(
      `--html: must be the path of a file to write, received "${html}"${html.trim() === '' ? '' : ' (a folder)'}`,
    );
  const folder = dirname(file);
  if (!isFolder(folder))
    throw new UsageError(
      `--html: must be a file in a folder that exists, received "${html}" (no folder ${folder})`,
    );
}

/** Whether `path` is a folder; `false` when it is not there or cannot be read (a file on its path). */
function isFolder(path: string): boolean {
  try {
    return statSync(path, { throwIfNoEntry: false })?.isDirectory() === true;
  } catch {
    return false;
  }
}

/** `arg` as a POSIX shell reads it back: quoted when it holds anything but plain characters. */
function shellWord(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", "'\\''")}'`;
}

/** The flag of each limiter option the flags set (the fixed mode's three rates: its own flag). */
const FLAG_OF: Readonly<Record<string, keyof Values>> = Object.fromEntries(
  LIMITER_FLAGS.map(([flag, option]) => [option, flag]),
);

/**
 * A limiter option's issue path with the flag that sets it (`--increase-interval
 * (aimd.increaseInterval)`), so that the error names what the user typed; the path alone for an
 * option the scenario set.
 */
function flagPath(path: string, mode: string, values: Values): string {
  const rate =
    path === 'initialUnitsPerMinute' || path === 'minUnitsPerMinute' || path === 'maxUnitsPerMinute';
  const flag = mode === 'fixed' && rate ? 'fixed-units-per-minute' : FLAG_OF[path];
  if (flag === undefined) return path;
  const given = values[flag];
  return typeof given === 'string' ? `--${flag} "${given}" (${path})` : `${path} (--${flag})`;
}

/**
 * The flags given that set the options an issue's message names besides its own path (a
 * conflict between two options: `--min-units-per-minute 5000` against the scenario's initial
 * rate), as `; set by --flag "value"`; empty when there are none.
 */
function flagsNamed(path: string, message: string, mode: string, values: Values): string {
  const given = Object.keys(FLAG_OF)
    .filter((option) => option !== path && new RegExp(`\\b${option.replace('.', '\\.')}\\b`).test(message))
    .map((option) => flagPath(option, mode, values))
    .filter((text) => text.startsWith('--'));
  return given.length === 0 ? '' : `; set by ${given.join(', ')}`;
}

/**
 * A reader that went away (`| head -1`) ends the command quietly, as a shell's tools do: its
 * write's EPIPE, an unhandled `'error'` event, printed a stack and exit code 1.
 */
export function endQuietlyOnClosedPipe(...streams: NodeJS.WriteStream[]): void {
  for (const stream of streams) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') throw error;
      process.exit(process.exitCode ?? 0);
    });
  }
}

const invokedAs = process.argv[1] === undefined ? undefined : resolve(process.argv[1]);
if (invokedAs === fileURLToPath(import.meta.url)) {
  endQuietlyOnClosedPipe(process.stdout, process.stderr);
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
