import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

// The package's command (`npx adaptive-rate-limit ...`), run as a child process: a bad command
// exits 2 with a line that names it and says what it must be.
const run = promisify(execFile);

async function bin(args: string[]) {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', 'src/bin.ts', ...args], {
      timeout: 30_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe('adaptive-rate-limit <command>', () => {
  it('names an unknown command and what it must be', { timeout: 40_000 }, async () => {
    // Was `adaptive-rate-limit: unknown command "simulte"`: no word of the commands it takes.
    const result = await bin(['simulte']);
    expect(result.code).toBe(2);
    expect(result.stderr.split('\n')[0]).toBe(
      'adaptive-rate-limit: the command must be simulate or help, received "simulte"',
    );
    expect(result.stdout).toBe('');
  });

  it("prints the simulator's flags for help simulate, and refuses help with another word", {
    timeout: 40_000,
  }, async () => {
    // `help simulate` printed the general usage, with nothing of the simulator's flags, and
    // `--help anything` the same: the word after it ignored.
    const simulate = await bin(['help', 'simulate']);
    expect(simulate.code).toBe(0);
    expect(simulate.stdout).toMatch(/^Usage: adaptive-rate-limit simulate \[options\]/);
    const other = await bin(['--help', 'simulte']);
    expect(other.code).toBe(2);
    expect(other.stderr.split('\n')[0]).toBe(
      'adaptive-rate-limit: help: the command must be simulate, received "simulte"',
    );
  });

  it('takes help about help, and names a second word after help as one too many', {
    timeout: 40_000,
  }, async () => {
    // `help help` was refused as "the command must be simulate, received "help"" (help is one of
    // the two), and `help simulate now` as "must be simulate, received "simulate" "now"".
    const help = await bin(['help', 'help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: adaptive-rate-limit <command>/);
    const more = await bin(['help', 'simulate', 'now']);
    expect(more.code).toBe(2);
    expect(more.stderr.split('\n')[0]).toBe(
      'adaptive-rate-limit: help: must be given one command (simulate or help), received "simulate" "now"',
    );
  });
});
