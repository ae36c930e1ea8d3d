#!/usr/bin/env node
// The package's command: `npx adaptive-rate-limit simulate [flags]` runs the simulator
// (src/simulate/cli.ts) from an installed package.
import { endQuietlyOnClosedPipe, main } from './simulate/cli.js';

const USAGE = `Usage: adaptive-rate-limit <command> [flags]

Commands
  simulate [flags]   compare no limiter, a fixed rate, AIMD, CUBIC and probe (the default)
                     against a model API (adaptive-rate-limit simulate --help for the flags)
`;

endQuietlyOnClosedPipe(process.stdout, process.stderr);
const [command, ...rest] = process.argv.slice(2);
if (command === 'simulate') {
  const io = { stdout: process.stdout, stderr: process.stderr, cwd: process.cwd() };
  main(rest, { ...io, command: 'adaptive-rate-limit simulate' }).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
} else if (command === '--help' || command === '-h' || command === 'help') {
  process.stdout.write(USAGE);
} else {
  process.stderr.write(
    `${command === undefined ? 'adaptive-rate-limit: a command is missing' : `adaptive-rate-limit: unknown command "${command}"`}\n\n${USAGE}`,
  );
  process.exitCode = 2;
}
