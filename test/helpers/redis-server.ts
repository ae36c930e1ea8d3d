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
import { RedisBudgetStore } from '../../src/redis/redis-store.js';

export { heartbeatRequest, sharedMembers } from './shared-members.js';

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

/** What {@link withRedisServer} gives a suite's tests. */
export interface RedisSuite {
  /** Keeps `made` until the suite ends: closed then, before the client and the server stop. */
  closeAfter<T extends { close(): unknown }>(made: T): T;
  /**
   * A store of budget `name` on the suite's server (keys `${keyPrefix}{name}:…`, redisTimeout 2 s),
   * closed when the suite ends.
   */
  store(name: string, keyPrefix?: string): RedisBudgetStore;
}

/**
 * Within a `describeRedis`: starts a redis-server (on `port`, or a free one) and a client of it
 * before the suite, and hands both to `use` (awaited); after the suite, closes what was given to
 * `closeAfter` or made by `store`, then ends the client and the server.
 */
export function withRedisServer(
  use: (started: { server: RedisServer; redis: Redis }) => unknown = () => {},
  port?: number,
): RedisSuite {
  let server: RedisServer | undefined;
  let redis: Redis | undefined;
  const made: { close(): unknown }[] = [];
  beforeAll(async () => {
    server = await RedisServer.start(port);
    redis = new Redis(server.url);
    await use({ server, redis });
  });
  afterAll(async () => {
    await Promise.all(made.splice(0).map((m) => m.close()));
    redis?.disconnect();
    await server?.stop();
  });
  const closeAfter = <T extends { close(): unknown }>(one: T): T => {
    made.push(one);
    return one;
  };
  return {
    closeAfter,
    store: (name, keyPrefix = 'arl:') => {
      if (server === undefined) throw new Error("no redis-server: store() is for the suite's tests");
      return closeAfter(new RedisBudgetStore({ redis: server.url, keyPrefix, name, redisTimeout: 2_000 }));
    },
  };
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
