/**
 * A real redis-server for tests: on a free port on 127.0.0.1, no persistence, stopped after.
 * Without redis-server on the PATH the suites fail with a clear message when `CI` is set, and
 * are skipped with a loud warning otherwise.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, it } from 'vitest';

const BINARY = process.env.REDIS_SERVER ?? 'redis-server';

const hasRedisServer = spawnSync(BINARY, ['--version'], { stdio: 'ignore' }).status === 0;

const MISSING =
  `${BINARY} not found on the PATH: the Redis tests need a real Redis server. ` +
  'Install it (Debian/Ubuntu: apt-get install -y redis-server; .ci/run does so in CI) or set REDIS_SERVER.';

let warned = false;

/**
 * `describe` for suites that need redis-server: runs them when it is installed; without it,
 * fails with a clear message under CI and skips with a loud warning elsewhere.
 */
export function describeRedis(title: string, fn: () => void): void {
  if (hasRedisServer) {
    describe(title, fn);
  } else if (process.env.CI) {
    describe(title, () => {
      it('has a redis-server to test against', () => {
        throw new Error(MISSING);
      });
    });
  } else {
    if (!warned) {
      warned = true;
      const bar = '!'.repeat(100);
      console.warn(`\n${bar}\n!! SKIPPED: ${MISSING}\n${bar}\n`);
    }
    describe.skip(title, fn);
  }
}

export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

export class RedisServer {
  #child: ChildProcess | undefined;
  #log = '';

  private constructor(readonly port: number) {}

  /** Starts a redis-server on a free port (or `port`) and waits until it accepts connections. */
  static async start(port?: number): Promise<RedisServer> {
    const server = new RedisServer(port ?? (await freePort()));
    await server.restart();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.#child !== undefined && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  /** Starts it again on the same port (after {@link kill} or {@link stop}). */
  async restart(): Promise<void> {
    if (this.running) return;
    // A replica's full sync writes an RDB file even without `save`: into the temp folder, not here.
    const args = [
      ...['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      ...['--dir', tmpdir(), '--dbfilename', `arl-test-${this.port}.rdb`],
    ];
    const child = spawn(BINARY, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#child = child;
    child.stdout?.on('data', (chunk: Buffer) => {
      this.#log += chunk.toString();
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      this.#log += chunk.toString();
    });
    const deadline = Date.now() + 10_000;
    while (!(await canConnect(this.port))) {
      if (!this.running) throw new Error(`redis-server exited at start:\n${this.#log}`);
      if (Date.now() > deadline) throw new Error(`redis-server not ready in 10 s:\n${this.#log}`);
      await sleep(20);
    }
  }

  /** Kills it at once (SIGKILL): a crash, not a shutdown. */
  async kill(): Promise<void> {
    await this.#end('SIGKILL');
  }

  /** Stops it (SIGTERM). */
  async stop(): Promise<void> {
    await this.#end('SIGTERM');
  }

  async #end(signal: NodeJS.Signals): Promise<void> {
    const child = this.#child;
    if (child === undefined || !this.running) return;
    const exited = once(child, 'exit');
    child.kill(signal);
    await exited;
    rmSync(join(tmpdir(), `arl-test-${this.port}.rdb`), { force: true });
  }
}

/** Polls `condition` (a real Redis, real time) every 20 ms; fails with `what` after `limitMs`. */
export async function waitFor(
  what: string,
  condition: () => boolean | Promise<boolean>,
  limitMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/**
 * Within a `describeRedis`: starts a redis-server and a client of it before the suite, hands both
 * to `use`, and ends both after the suite.
 */
export function withRedisServer(use: (started: { server: RedisServer; redis: Redis }) => void): void {
  let server: RedisServer | undefined;
  let redis: Redis | undefined;
  beforeAll(async () => {
    server = await RedisServer.start();
    redis = new Redis(server.url);
    use({ server, redis });
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });
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
