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

endQuietlyOnClosedPipe(process.stdout, process.stderr);
const [command, ...rest] = process.argv.slice(2);
if (command === 'simulate') simulate(rest);
else if (command === '--help' || command === '-h' || command === 'help') {
  // `help simulate` printed this usage, nothing of the simulator's flags; a word after `help`
  // was ignored in silence.
  const [topic, ...more] = rest;
  if (topic === undefined) process.stdout.write(USAGE);
  else if (topic === 'simulate' && more.length === 0) simulate(['--help']);
  else refuse(`help: the command must be simulate, received ${rest.map((word) => `"${word}"`).join(' ')}`);
} else if (command === undefined) refuse('a command is missing: it must be simulate or help');
else refuse(`the command must be simulate or help, received "${command}"`);
