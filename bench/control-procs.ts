/**
 * Every process the control bench starts, so that each one is ended at the end: on success, on
 * an error, on Ctrl-C (SIGINT) and on SIGTERM. Node children are forked with an IPC channel and
 * exit by themselves when it closes (see `exitWithParent`), so they cannot outlive a bench that
 * is killed outright; nginx and redis-server are told to stop and, after a grace period, killed.
 */
import { type ChildProcess, fork, type SpawnOptions, spawn } from 'node:child_process';
import { once } from 'node:events';

const children = new Set<ChildProcess>();
let hooked = false;

/** How long a child gets to exit after SIGTERM before SIGKILL (ms). */
const GRACE_MS = 3_000;

function hook(): void {
  if (hooked) return;
  hooked = true;
  const onSignal = (signal: NodeJS.Signals): void => {
    console.error(`\n${signal}: stopping ${children.size} bench processes`);
    for (const child of children) child.kill('SIGKILL');
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // Last resort (an uncaught error): synchronous kills only.
  process.once('exit', () => {
    for (const child of children) child.kill('SIGKILL');
  });
}

function track(child: ChildProcess): ChildProcess {
  hook();
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** Forks a TypeScript module of this folder with the bench's own loader flags (tsx) and an IPC channel. */
export function forkBench(modulePath: string): ChildProcess {
  const execArgv = process.execArgv.filter((a) => a !== '--expose-gc');
  return track(
    fork(modulePath, [], {
      execArgv,
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
}

/** Spawns a program (nginx, redis-server) and tracks it. */
export function spawnTracked(
  command: string,
  args: readonly string[],
  options: SpawnOptions = {},
): ChildProcess {
  return track(spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], ...options }));
}

/** True while the child has neither exited nor been killed by a signal. */
export function alive(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/** Stops one child: `signal` first, SIGKILL after {@link GRACE_MS}; resolves once it has exited. */
export async function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (!alive(child)) return;
  const exited = once(child, 'exit');
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), GRACE_MS);
  await exited;
  clearTimeout(timer);
}

/** In a forked child: sends a message to the parent; resolves once it is handed to the channel. */
export function sendToParent(message: unknown): Promise<void> {
  return new Promise((resolve, reject) => {
    if (process.send === undefined) {
      reject(new Error('not a forked process'));
      return;
    }
    process.send(message, undefined, {}, (error) => (error ? reject(error) : resolve()));
  });
}

/** In a forked child: exits when the parent's IPC channel closes (the parent ended, however). */
export function exitWithParent(): void {
  process.on('disconnect', () => process.exit(0));
}
