#!/usr/bin/env node
// The package's command: `npx adaptive-rate-limit simulate [flags]` runs the simulator
// (src/simulate/cli.ts) from an installed package.
import { endQuietlyOnClosedPipe, main } from './simulate/cli.js';

const USAGE = `Usage: adaptive-rate-limit <command> [flags]

Commands
  simulate [flags]   compare no limiter, a fixed rate, AIMD, CUBIC and probe (the default)
                     against a model API (adaptive-rate-limit simulate --help for the flags)
  help [simulate]    this text, or the simulator's flags
`;

const COMMAND = 'adaptive-rate-limit simulate';

/** Runs the simulator with `args`; its exit code becomes the process's. */
function simulate(args: readonly string[]): void {
  const io = { stdout: process.stdout, stderr: process.stderr, cwd: process.cwd() };
  main(args, { ...io, command: COMMAND }).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}

/** A bad command line: one line naming what was received and what it must be, then the usage. */
function refuse(message: string): void {
  process.stderr.write(`adaptive-rate-limit: ${message}\n\n${USAGE}`);
  process.exitCode = 2;
}

/** Whether a word asks for this usage: `help`, `--help` or `-h`. */
function isHelp(word: string | undefined): boolean {
  return word === 'help' || word === '--help' || word === '-h';
}

endQuietlyOnClosedPipe(process.stdout, process.stderr);
const [command, ...rest] = process.argv.slice(2);
if (command === 'simulate') simulate(rest);
else if (isHelp(command)) {
  // `help simulate` printed this usage, nothing of the simulator's flags; a word after `help`
  // was ignored in silence.
  // `help help` is this usage; two words are one too many (not "must be simulate" of "simulate now").
  const [topic, ...more] = rest;
  const received = rest.map((word) => `"${word}"`).join(' ');
  if (topic === undefined || (isHelp(topic) && more.length === 0)) process.stdout.write(USAGE);
  else if (more.length > 0)
    refuse(`help: must be given one command (simulate or help), received ${received}`);
  else if (topic === 'simulate') simulate(['--help']);
  else refuse(`help: the command must be simulate, received ${received}`);
} else if (command === undefined) refuse('a command is missing: it must be simulate or help');
else refuse(`the command must be simulate or help, received "${command}"`);
