/**
 * Ports and the redis-server of the control bench: free ports on 127.0.0.1, waiting until a port
 * accepts connections (bounded), and a redis-server started on a free port (no persistence), as
 * test/helpers/redis-server.ts starts one for the tests.
 */
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { alive, spawnTracked, stop } from './control-procs.js';

/** A port that was free on 127.0.0.1 a moment ago. */
export async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  await once(server, 'close');
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Resolves once `port` accepts connections; throws after `limitMs` or when `running()` turns false. */
export async function waitForPort(
  port: number,
  what: string,
  running: () => boolean,
  limitMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!(await canConnect(port))) {
    if (!running()) throw new Error(`${what} exited before listening on 127.0.0.1:${port}`);
    if (Date.now() > deadline)
      throw new Error(`${what} not listening on 127.0.0.1:${port} after ${limitMs} ms`);
    await sleep(20);
  }
}

export interface StartedRedis {
  readonly url: string;
  stop(): Promise<void>;
}

const REDIS_BINARY = process.env.REDIS_SERVER ?? 'redis-server';

/** Starts a redis-server on a free port of 127.0.0.1, or answers why it cannot. */
export async function startRedisServer(): Promise<StartedRedis | string> {
  if (spawnSync(REDIS_BINARY, ['--version'], { stdio: 'ignore' }).status !== 0) {
    return `${REDIS_BINARY} not found (Debian: apt-get install -y redis-server, or set REDIS_SERVER)`;
  }
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const child = spawnTracked(REDIS_BINARY, args);
  let log = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    log += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    log += chunk.toString();
  });
  try {
    await waitForPort(port, 'redis-server', () => alive(child));
  } catch (error) {
    await stop(child, 'SIGKILL');
    return `${(error as Error).message}\n${log}`;
  }
  return { url: `redis://127.0.0.1:${port}`, stop: () => stop(child) };
}
