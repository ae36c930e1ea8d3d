import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { helpText } from '../src/simulate/args.js';
import { cli } from './helpers/simulate-cli.js';

// Attacks on the simulator's CLI (`npm run simulate -- ...`, `adaptive-rate-limit simulate ...`):
// each test is a command a user can type whose result is wrong, silent or a crash. Runs are one
// virtual minute (or less) and one or two modes.

/** The table rows of a text run (the lines between the dashes and the legend). */
function rows(stdout: string): string[] {
  const lines = stdout.split('\n');
  const start = lines.findIndex((l) => /^-+ {2}-+/.test(l));
  const end = lines.findIndex((l, i) => i > start && l.startsWith('Throughput in units/min;'));
  return lines.slice(start + 1, end);
}

describe('simulate CLI attack', () => {
  const dir = mkdtempSync(join(tmpdir(), 'attack-simulate-cli-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('refuses --modes api outside the llm scenario with a usage error (exit 2), not a TypeError stack', async () => {
    // Before: main() rejected with "TypeError: the api mode needs an LLM API (the llm scenario)"
    // thrown at run.ts modeOptions; the bin printed its stack and exited 1.
    const result = await cli(['--modes', 'api', '--minutes', '1']).catch((error: unknown) => ({
      code: 'threw',
      stdout: '',
      stderr: String(error),
    }));
    expect(result.code).toBe(2);
    expect(result.stderr.split('\n')[0]).toMatch(/^simulate: --modes.*api/);
    expect(result.stderr).not.toContain('    at ');
  });

  it('lists the api mode in --help, as --modes accepts it and docs/simulator.md documents it', () => {
    const line = helpText('npm run simulate --')
      .split('\n')
      .find((l) => l.trimStart().startsWith('--modes LIST'));
    expect(line).toMatch(/\bapi\b/);
  });

  it('does not drop a --controller module in silence when --modes names other modes', async () => {
    // --help: "--controller PATH ... adds the custom mode". With --modes aimd the module is loaded
    // (its code runs) and then no Custom row is run or printed, exit 0.
    const file = join(dir, 'step.mjs');
    writeFileSync(
      file,
      'export default { onThrottled: (s) => Math.max(s.rate / 2, s.minRate), onSuccess: () => undefined };\n',
    );
    const { code, stdout, stderr } = await cli(['--controller', file, '--modes', 'aimd', '--minutes', '1']);
    const ranCustom = code === 0 && stdout.includes('Custom (step.mjs)');
    const refused = code === 2 && /--controller/.test(stderr);
    expect({ ranCustom, refused }).not.toEqual({ ranCustom: false, refused: false });
  });

  it('refuses a flag given twice with different values instead of keeping the last in silence', async () => {
    // `--quota 100 --quota 200` ran with 200; --modes "aimd,aimd" and --scenario "steady,steady" are refused.
    const { code, stderr } = await cli([
      '--quota',
      '100',
      '--quota',
      '200',
      '--minutes',
      '1',
      '--modes',
      'none',
    ]);
    expect(code).toBe(2);
    expect(stderr.split('\n')[0]).toContain('--quota');
  });

  it('does not print a negative recovery when a quota drop ends after the run', async () => {
    // --drop-at 30s with the default --drop-for 60s in a 1-minute run: "Recovery  > -30 s".
    const { code, stdout } = await cli([
      '--scenario',
      'quota-drop',
      '--drop-at',
      '30s',
      '--minutes',
      '1',
      '--modes',
      'none',
    ]);
    if (code === 0) {
      expect(rows(stdout).join('\n')).not.toMatch(/> -\d/);
    } else {
      expect(code).toBe(2);
    }
  });

  it('does not take --demand, --arrivals or a burst in the crowd scenarios in silence, nor print them in the title', async () => {
    // A crowd's processes send a fixed number of requests: the demand flags change nothing, yet the
    // title reads "50 instances of 1,000 units/min" / "arrivals at a fixed interval" / "the demand at 900%".
    const base = await cli(['--scenario', 'crowd', '--modes', 'none', '--minutes', '1']);
    expect(base.code).toBe(0);
    for (const flags of [
      ['--demand', '1000'],
      ['--arrivals', 'interval'],
      ['--burst-at', '10s', '--burst-factor', '9'],
    ]) {
      const run = await cli(['--scenario', 'crowd', '--modes', 'none', '--minutes', '1', ...flags]);
      const refused = run.code === 2 && run.stderr.startsWith(`simulate: ${flags[0]}`);
      const changed = run.code === 0 && rows(run.stdout).join() !== rows(base.stdout).join();
      expect({ flags, refusedOrChanged: refused || changed }).toEqual({ flags, refusedOrChanged: true });
    }
  });

  it('does not take --api-burst-seconds in silence where the API is a leaky bucket', async () => {
    // leaky-bucket (or any --leaky-burst): the model has no token bucket, the flag changes nothing.
    const args = ['--scenario', 'leaky-bucket', '--no-shared', '--modes', 'none,aimd', '--minutes', '1'];
    const base = await cli(args);
    const run = await cli([...args, '--api-burst-seconds', '100']);
    const refused = run.code === 2 && run.stderr.startsWith('simulate: --api-burst-seconds');
    const changed = run.code === 0 && rows(run.stdout).join() !== rows(base.stdout).join();
    expect(refused || changed).toBe(true);
  });

  it('does not take a limiter flag in silence when no mode that runs reads it', async () => {
    // --increase-step is AIMD's; with --modes cubic it changes nothing, exit 0 (the CLI refuses
    // --series without --json for the same reason: "Flags that would do nothing, in silence").
    const base = await cli(['--modes', 'cubic', '--minutes', '1', '--quota', '600']);
    const run = await cli(['--modes', 'cubic', '--minutes', '1', '--quota', '600', '--increase-step', '600']);
    const refused = run.code === 2 && run.stderr.startsWith('simulate: --increase-step');
    const changed = run.code === 0 && rows(run.stdout).join() !== rows(base.stdout).join();
    expect(refused || changed).toBe(true);
  });

  it('names --controller and its file when the custom controller throws during the run', async () => {
    // Before: main() rejected; the bin printed "[Error: boom in controller]" and exited 1, with no
    // word of the flag, the module or the mode.
    const file = join(dir, 'throws.mjs');
    writeFileSync(
      file,
      "export default { onThrottled() { throw new Error('boom in controller'); }, onSuccess: () => undefined };\n",
    );
    const result = await cli([
      '--controller',
      file,
      '--modes',
      'custom',
      '--minutes',
      '1',
      '--quota',
      '600',
    ]).catch((error: unknown) => ({ code: 'threw', stdout: '', stderr: String(error) }));
    expect(result.code).toBe(2);
    expect(result.stderr.split('\n')[0]).toMatch(/^simulate: --controller .*throws\.mjs.*boom in controller/);
  });

  it("HTML report: leaves out the scenario's description once flags changed what it describes, as the text output does", async () => {
    // The text output prints the description only while no flag changed the parameters; the page
    // printed "after 5 min another client takes half of the quota for 60 s" for a drop to 90 % at 0:30.
    const file = join(dir, 'drop.html');
    const args = ['--scenario', 'quota-drop', '--drop-to', '0.9', '--drop-at', '30s', '--minutes', '1'];
    const { code, stdout } = await cli([...args, '--modes', 'none', '--html', file]);
    expect(code).toBe(0);
    expect(stdout).not.toContain('takes half of the quota');
    expect(readFileSync(file, 'utf8')).not.toContain('takes half of the quota for 60 s');
  });

  it('HTML report: quotes the arguments of the command it prints, so that it can be run again', async () => {
    // "Made by npm run simulate -- --demand 100, 50 ... --html /tmp/x/a b.html": not the command that ran.
    const file = join(dir, 'a b.html');
    const { code } = await cli(['--demand', '100, 50', '--minutes', '1', '--modes', 'none', '--html', file]);
    expect(code).toBe(0);
    const made = /Made by <code>([^<]*)<\/code>/.exec(readFileSync(file, 'utf8'))?.[1] ?? '';
    expect(made).toContain('--demand');
    expect(made).not.toContain('--demand 100, 50 ');
    expect(made).not.toContain(`--html ${file}`);
  });
});
