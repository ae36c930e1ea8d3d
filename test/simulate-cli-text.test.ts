import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { helpText } from '../src/simulate/args.js';
import { SCENARIOS } from '../src/simulate/scenarios.js';
import { cli } from './helpers/simulate-cli.js';

describe('npm run simulate, read by a stranger', () => {
  const dir = mkdtempSync(join(tmpdir(), 'simulate-text-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  // The page's first block is what a new user copies first: each command there runs (shortened to
  // one minute; the one of every scenario and the one naming the reader's own module excepted).
  it('runs each command of the first block of docs/simulator.md', async () => {
    const page = readFileSync(new URL('../docs/simulator.md', import.meta.url), 'utf8');
    const block = /```sh\n([\s\S]*?)```/.exec(page)?.[1] ?? '';
    const commands = block
      .split('\n')
      .map((line) => line.replace(/#.*$/, '').trim())
      .filter((line) => line.startsWith('npm run simulate'));
    expect(commands.length).toBeGreaterThanOrEqual(5);
    for (const command of commands) {
      const args = command
        .replace(/^npm run simulate( --)?/, '')
        .trim()
        .split(/\s+/)
        .filter(Boolean);
      if (args.includes('all') || args.some((a) => a.startsWith('./'))) continue;
      const { code, stderr } = await cli([...args, '--minutes', '1']);
      expect({ command, code, stderr }).toEqual({ command, code: 0, stderr: '' });
    }
  });

  it('titles each table with the parameters that ran, not the scenario’s words', async () => {
    const { code, stdout } = await cli([
      '--instances',
      '1',
      '--demand',
      '3000',
      '--minutes',
      '1',
      '--modes',
      'aimd',
    ]);
    expect(code).toBe(0);
    const [title, next] = stdout.split('\n');
    expect(title).toBe(
      'steady: quota 3,000 units/min, 1 instance of 3,000 units/min, 1 min, seed 42. Model numbers, units/min.',
    );
    // The scenario's description speaks of two instances: it is left out once a flag changed the setting.
    expect(next).toBe('');
    expect(stdout).not.toContain(SCENARIOS[0]!.description);
  });

  it('keeps the scenario’s description when no flag changed it, and names its events', async () => {
    const scenario = SCENARIOS.find((s) => s.name === 'try-aimd-step-600')!;
    const { stdout } = await cli(['--scenario', scenario.name]);
    expect(stdout.split('\n').slice(0, 2)).toEqual([
      'try-aimd-step-600: quota 3,000 units/min, 2 instances of 2,000 units/min, 15 min, seed 42. Model numbers, units/min.',
      scenario.description,
    ]);
    const drop = await cli(['--scenario', 'quota-drop', '--minutes', '6', '--modes', 'fixed']);
    expect(drop.stdout.split('\n')[0]).toContain('the quota at 50% from 5:00 for 60 s');
  });

  it('puts a one-line legend under each table that says the fixed mode’s rate', async () => {
    const { stdout } = await cli([
      '--minutes',
      '1',
      '--modes',
      'fixed,aimd',
      '--fixed-units-per-minute',
      '1200',
    ]);
    const lines = stdout.split('\n');
    const last = lines.findIndex((l) => l.startsWith('AIMD '));
    expect(lines[last + 1]).toMatch(/^Throughput in units\/min; .*; Fixed rate holds 1,200 units\/min\.$/);
  });

  it('says in one line why a --controller module cannot be used', async () => {
    const missing = await cli(['--controller', join(dir, 'missing.js')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe(
      `simulate: --controller ${join(dir, 'missing.js')}: cannot load ${join(dir, 'missing.js')}: no such file\nRun with --help for the options.\n`,
    );
    const throwing = join(dir, 'throws.js');
    writeFileSync(throwing, "throw new Error('not ready\\nsecond line');\n");
    const thrown = await cli(['--controller', throwing]);
    expect(thrown.code).toBe(2);
    expect(thrown.stderr.split('\n')[0]).toBe(
      `simulate: --controller ${throwing}: cannot load ${throwing}: not ready`,
    );
    const empty = join(dir, 'empty.js');
    writeFileSync(empty, 'export const other = 1;\n');
    const none = await cli(['--controller', empty]);
    expect(none.code).toBe(2);
    expect(none.stderr.split('\n')).toHaveLength(3);
    expect(none.stderr).toContain('the module must export a controller');
  });

  it('never calls the documents it came from "the seed"', () => {
    const texts = [helpText('npm run simulate --'), ...SCENARIOS.map((s) => s.description)];
    expect(texts.filter((t) => /the seed\b|seed's/i.test(t))).toEqual([]);
  });
});
