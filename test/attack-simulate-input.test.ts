import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from './helpers/simulate-cli.js';

// The simulator's flags as a realistic user gives them: a bad one exits 2 with a line that names
// the flag and the value and says "must be ...", before any run starts.

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'arl-simulate-input-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('simulate: a flag without its value', () => {
  const quick = ['--minutes', '1', '--modes', 'none'];

  it('names the flag and says it must have a value, at the end of the line or before another flag', async () => {
    // Node's own texts: "Option '--quota <value>' argument missing", "Option '--scenario'
    // argument is ambiguous. Did you forget to specify the option argument ...".
    const last = await cli([...quick, '--quota']);
    expect(last.code).toBe(2);
    expect(last.stderr.split('\n')[0]).toBe(
      'simulate: --quota: must be given a value (--quota VALUE or --quota=VALUE), received none',
    );
    const before = await cli(['--scenario', '--json', ...quick]);
    expect(before.code).toBe(2);
    expect(before.stderr.split('\n')[0]).toBe(
      'simulate: --scenario: must be given a value (--scenario VALUE or --scenario=VALUE), received the flag --json',
    );
  });

  it('names the flag given before `--`, the end of the flags, as one without its value', async () => {
    // `--quota --` was Node's "Option '--quota' argument is ambiguous. Did you forget ...".
    const { code, stderr } = await cli([...quick, '--quota', '--']);
    expect(code).toBe(2);
    expect(stderr.split('\n')[0]).toBe(
      'simulate: --quota: must be given a value (--quota VALUE or --quota=VALUE), received none',
    );
  });

  it('still reads a negative number as the value (the flag then tells its range)', async () => {
    const { code, stderr } = await cli(['--quota', '-5', ...quick]);
    expect(code).toBe(2);
    expect(stderr.split('\n')[0]).toBe(
      'simulate: --quota: must be a number from 1 to 1e9 (units/min), received "-5"',
    );
  });
});

describe('simulate: --html refused before the runs', () => {
  /** The flags of a one-minute run of the custom controller `controller` with its report to `file`. */
  const htmlArgs = (file: string, controller: string) => [
    '--html',
    file,
    '--controller',
    controller,
    '--modes',
    'custom',
    '--minutes',
    '1',
  ];

  /** A custom controller that marks each run it takes part in. */
  async function marking(): Promise<{ file: string; ran: () => boolean }> {
    const file = join(dir, `marking-${Math.random().toString(36).slice(2)}.mjs`);
    const key = `__arl_ran_${Math.random().toString(36).slice(2)}`;
    await writeFile(
      file,
      `export default { name: 'marking', onThrottled: (s) => { globalThis.${key} = true; return Math.max(s.rate / 2, s.minRate); }, onSuccess: () => { globalThis.${key} = true; return undefined; } };\n`,
    );
    return { file, ran: () => (globalThis as Record<string, unknown>)[key] === true };
  }

  it('refuses an empty file name, which ran every mode and then said "cannot write <cwd> (EISDIR)"', async () => {
    const controller = await marking();
    const { code, stderr } = await cli([
      '--html=',
      '--controller',
      controller.file,
      '--modes',
      'custom',
      '--minutes',
      '1',
    ]);
    expect(code).toBe(2);
    expect(stderr.split('\n')[0]).toBe('simulate: --html: must be the path of a file to write, received ""');
    expect(controller.ran()).toBe(false);
  });

  it('refuses a folder that does not exist before the runs, not after them', async () => {
    const controller = await marking();
    const file = join(dir, 'missing', 'report.html');
    const { code, stderr } = await cli(htmlArgs(file, controller.file));
    expect(code).toBe(2);
    expect(stderr.split('\n')[0]).toBe(
      `simulate: --html: must be a file in a folder that exists, received "${file}" (no folder ${join(dir, 'missing')})`,
    );
    expect(controller.ran()).toBe(false);
  });

  it('refuses a file on the way to it (a file taken for a folder), not with a stack trace', async () => {
    const controller = await marking();
    const plain = join(dir, 'plain.txt');
    await writeFile(plain, 'x');
    const file = join(plain, 'report.html');
    const { code, stderr } = await cli(htmlArgs(file, controller.file));
    expect(code).toBe(2);
    expect(stderr.split('\n')[0]).toBe(
      `simulate: --html: must be a file in a folder that exists, received "${file}" (no folder ${plain})`,
    );
    expect(controller.ran()).toBe(false);
  });

  it('writes the page to a good file after the runs (the marking controller marks them)', async () => {
    const controller = await marking();
    const file = join(dir, 'report.html');
    const { code } = await cli(htmlArgs(file, controller.file));
    expect(code).toBe(0);
    expect(controller.ran()).toBe(true);
  });

  it('refuses a folder given as the file', async () => {
    const controller = await marking();
    const { code, stderr } = await cli(htmlArgs(dir, controller.file));
    expect(code).toBe(2);
    expect(stderr.split('\n')[0]).toBe(
      `simulate: --html: must be the path of a file to write, received "${dir}" (a folder)`,
    );
    expect(controller.ran()).toBe(false);
  });
});
