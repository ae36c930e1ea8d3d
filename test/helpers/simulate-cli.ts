import { main } from '../../src/simulate/cli.js';

/** Runs the simulator's CLI (`npm run simulate -- <args>`) and captures what it writes. */
export async function cli(args: string[], command?: string) {
  let stdout = '';
  let stderr = '';
  const code = await main(args, {
    stdout: { write: (t: string) => (stdout += t) },
    stderr: { write: (t: string) => (stderr += t), isTTY: false },
    cwd: process.cwd(),
    ...(command === undefined ? {} : { command }),
  });
  return { code, stdout, stderr };
}
