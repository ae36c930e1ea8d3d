/**
 * A real Redis Cluster for tests: redis-server processes with `--cluster-enabled yes` on free
 * ports of 127.0.0.1 (each node's bus on another free port), made a cluster by
 * `redis-cli --cluster create`, stopped and their files removed after. Needs only redis-server
 * and redis-cli (the Debian package redis-server has both).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort } from './redis-server.js';

const SERVER = process.env.REDIS_SERVER ?? 'redis-server';
const CLI = process.env.REDIS_CLI ?? 'redis-cli';

export const hasRedisCli = spawnSync(CLI, ['--version'], { stdio: 'ignore' }).status === 0;

/** Polls `condition` until it holds; fails with `what` after `limitMs`. */
export async function until(what: string, condition: () => Promise<boolean> | boolean, limitMs = 20_000) {
  const deadline = Date.now() + limitMs;
  for (;;) {
    if (
      await Promise.resolve()
        .then(condition)
        .catch(() => false)
    )
      return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

interface Node {
  port: number;
  bus: number;
  child: ChildProcess;
  log: string;
}

export class RedisCluster {
  readonly #dir = mkdtempSync(join(tmpdir(), 'arl-cluster-'));
  readonly #nodes: Node[] = [];
  readonly #clients = new Map<number, Redis>();

  private constructor() {}

  /** Starts `masters` masters with `replicas` replicas each, and waits until the cluster is ok. */
  static async start(masters = 3, replicas = 0, nodeTimeout = 1_000): Promise<RedisCluster> {
    const cluster = new RedisCluster();
    try {
      for (let i = 0; i < masters * (1 + replicas); i++) await cluster.#spawn(nodeTimeout);
      const create = spawnSync(
        CLI,
        [
          '--cluster',
          'create',
          ...cluster.#nodes.map((n) => `127.0.0.1:${n.port}`),
          '--cluster-replicas',
          String(replicas),
          '--cluster-yes',
        ],
        { encoding: 'utf8', timeout: 30_000 },
      );
      if (create.status !== 0)
        throw new Error(`redis-cli --cluster create failed:\n${create.stdout}${create.stderr}`);
      await until('the cluster ok on every node', async () => {
        for (const n of cluster.#nodes) {
          const info = (await cluster.client(n.port).cluster('INFO')) as string;
          if (!info.includes('cluster_state:ok')) return false;
        }
        // Every replica in sync with its master.
        const roles = await Promise.all(cluster.#nodes.map((n) => cluster.client(n.port).role()));
        return roles.filter((r) => r[0] === 'slave').every((r) => r[3] === 'connected');
      });
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** The cluster's URL for a budget (every node a seed). */
  get url(): string {
    return `redis+cluster://${this.#nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`;
  }

  /** The seed nodes, as ioredis's `Cluster` takes them. */
  get seeds(): { host: string; port: number }[] {
    return this.#nodes.map((n) => ({ host: '127.0.0.1', port: n.port }));
  }

  /** A plain connection to one node (closed by {@link stop}). */
  client(port: number): Redis {
    let c = this.#clients.get(port);
    if (c === undefined) {
      c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0, lazyConnect: false });
      c.on('error', () => {});
      this.#clients.set(port, c);
    }
    return c;
  }

  /** The live nodes' ports. */
  get ports(): number[] {
    return this.#nodes.filter((n) => running(n.child)).map((n) => n.port);
  }

  /** The slot of `key`. */
  async slotOf(key: string): Promise<number> {
    return (await this.client(this.ports[0]!).cluster('KEYSLOT', key)) as number;
  }

  /** The port of the live master serving `slot`, as a live node sees it. */
  async masterOf(slot: number): Promise<number> {
    for (const port of this.ports) {
      const slots = (await this.client(port)
        .cluster('SLOTS')
        .catch(() => undefined)) as [number, number, [string, number, string]][] | undefined;
      const range = slots?.find(([from, to]) => slot >= from && slot <= to);
      if (range !== undefined) return range[2][1];
    }
    throw new Error(`no node serves slot ${slot}`);
  }

  /** The node id of the node on `port`. */
  async idOf(port: number): Promise<string> {
    return (await this.client(port).cluster('MYID')) as string;
  }

  /** The ports of the live masters. */
  async masters(): Promise<number[]> {
    const roles = await Promise.all(
      this.ports.map(async (p) => [p, (await this.client(p).role())[0]] as const),
    );
    return roles.filter(([, role]) => role === 'master').map(([p]) => p);
  }

  /** A replica of the master on `port` (its port). */
  async replicaOf(port: number): Promise<number> {
    const id = await this.idOf(port);
    for (const p of this.ports) {
      const nodes = (await this.client(p).cluster('NODES')) as string;
      const line = nodes.split('\n').find((l) => l.split(' ')[3] === id && l.includes('slave'));
      if (line !== undefined) return Number(/:(\d+)@/.exec(line)?.[1]);
    }
    throw new Error(`no replica of ${port}`);
  }

  /**
   * Moves `slot` (with its keys) from its master to the master on `to`, as `redis-cli --cluster
   * reshard` does: IMPORTING/MIGRATING, the slot's keys moved by one MIGRATE, then the slot given
   * to `to`. `between` runs after each step (the slot migrating with its keys on the old master,
   * then on the new one, the old one answering ASK), so a test can let the members work meanwhile.
   */
  async migrate(slot: number, to: number, between: () => Promise<void> = async () => {}): Promise<void> {
    const from = await this.masterOf(slot);
    const [fromId, toId] = [await this.idOf(from), await this.idOf(to)];
    const src = this.client(from);
    const dst = this.client(to);
    await dst.cluster('SETSLOT', slot, 'IMPORTING', fromId);
    await src.cluster('SETSLOT', slot, 'MIGRATING', toId);
    await between();
    for (;;) {
      const keys = (await src.cluster('GETKEYSINSLOT', slot, 100)) as string[];
      if (keys.length === 0) break;
      await src.migrate('127.0.0.1', to, '', 0, 5_000, 'KEYS', ...keys);
    }
    await between();
    for (const port of [to, from, ...(await this.masters()).filter((p) => p !== to && p !== from)]) {
      await this.client(port).cluster('SETSLOT', slot, 'NODE', toId);
    }
  }

  /** Kills the node on `port` at once (SIGKILL). */
  async kill(port: number): Promise<void> {
    const node = this.#nodes.find((n) => n.port === port);
    if (node === undefined || !running(node.child)) return;
    this.#clients.get(port)?.disconnect();
    this.#clients.delete(port);
    const exited = once(node.child, 'exit');
    node.child.kill('SIGKILL');
    await exited;
  }

  /** Stops every node and removes their files. */
  async stop(): Promise<void> {
    for (const c of this.#clients.values()) c.disconnect();
    this.#clients.clear();
    await Promise.all(
      this.#nodes.map(async (n) => {
        if (!running(n.child)) return;
        const exited = once(n.child, 'exit');
        n.child.kill('SIGKILL');
        await exited;
      }),
    );
    rmSync(this.#dir, { recursive: true, force: true });
  }

  async #spawn(nodeTimeout: number): Promise<void> {
    const port = await freePort();
    let bus = await freePort();
    while (bus === port) bus = await freePort();
    const args = [
      '--port',
      String(port),
      '--cluster-port',
      String(bus),
      '--bind',
      '127.0.0.1',
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      join(this.#dir, `nodes-${port}.conf`),
      '--cluster-node-timeout',
      String(nodeTimeout),
      '--dir',
      this.#dir,
      '--save',
      '',
      '--appendonly',
      'no',
    ];
    const child = spawn(SERVER, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const node: Node = { port, bus, child, log: '' };
    const append = (chunk: Buffer) => {
      node.log += chunk.toString();
    };
    child.stdout?.on('data', append);
    child.stderr?.on('data', append);
    this.#nodes.push(node);
    await until(
      `redis-server on ${port}`,
      async () => {
        if (!running(child)) throw new Error(`redis-server exited at start:\n${node.log}`);
        return (await this.client(port).ping()) === 'PONG';
      },
      10_000,
    );
  }
}

function running(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}
