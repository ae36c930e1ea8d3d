import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createSharedBudget, type SharedBudget } from '../src/redis/index.js';
import { until } from './helpers/redis-cluster.js';
import { describeRedis, freePort, RedisServer } from './helpers/redis-server.js';

// A replica promoted by Sentinel mid-run: a primary, its replica (REPLICAOF) and one Sentinel
// (quorum 1), real redis-server processes on 127.0.0.1; the members reach the primary through an
// ioredis client that asks the Sentinel. The primary is killed: the members serve from their
// shares, the Sentinel promotes the replica, the members share again on it; nothing lost.

const RATE = 6_000;
const MEMBERS = 3;
const BACKLOG = 200;

/**
 * The documented bound while degraded for `ms`: the budget (each member keeps its last share),
 * plus AIMD's steps the members' local controllers may take meanwhile (their parts of one
 * `increaseStep`, 120 units/min, per `increaseInterval`, 10 s, and one at once), plus 1 %.
 */
function degradedBound(ms: number): number {
  return RATE * 1.01 + 120 * (1 + Math.floor(ms / 10_000));
}

describeRedis('shared budget through Sentinel: the replica promoted mid-run', () => {
  let primary: RedisServer;
  let replica: RedisServer;
  let sentinel: ChildProcess;
  let sentinelPort: number;
  const dir = mkdtempSync(join(tmpdir(), 'arl-sentinel-'));
  const clients: Redis[] = [];
  const budgets: SharedBudget[] = [];

  const client = (port: number) => {
    const c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0 });
    c.on('error', () => {});
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    primary = await RedisServer.start();
    replica = await RedisServer.start();
    await client(replica.port).replicaof('127.0.0.1', primary.port);
    await until('the replica in sync', async () => (await client(replica.port).role())[3] === 'connected');
    sentinelPort = await freePort();
    const conf = join(dir, 'sentinel.conf');
    writeFileSync(
      conf,
      [
        `port ${sentinelPort}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor budget 127.0.0.1 ${primary.port} 1`,
        'sentinel down-after-milliseconds budget 500',
        'sentinel failover-timeout budget 5000',
        '',
      ].join('\n'),
    );
    sentinel = spawn(process.env.REDIS_SERVER ?? 'redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
    const s = client(sentinelPort);
    await until('the Sentinel sees the replica', async () => {
      const replicas = (await s.call('SENTINEL', 'REPLICAS', 'budget')) as string[][];
      return replicas.some((r) => r.includes(String(replica.port)));
    });
  }, 30_000);

  afterAll(async () => {
    await Promise.all(budgets.map((b) => b.close()));
    for (const c of clients) c.disconnect();
    if (sentinel !== undefined && sentinel.exitCode === null) {
      const exited = once(sentinel, 'exit');
      sentinel.kill('SIGKILL');
      await exited;
    }
    await primary?.stop();
    await replica?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps serving from the shares, shares again on the promoted replica, loses nothing, never above the budget', async () => {
    const all = Array.from({ length: MEMBERS }, () => {
      const redis = new Redis({
        sentinels: [{ host: '127.0.0.1', port: sentinelPort }],
        name: 'budget',
        maxRetriesPerRequest: 0,
        retryStrategy: () => 50,
      });
      redis.on('error', () => {});
      clients.push(redis);
      const b = createSharedBudget({
        redis,
        name: `sentinel-${process.pid}`,
        initialUnitsPerMinute: RATE,
        controller: 'aimd',
        heartbeatInterval: 50,
        memberTimeout: 400,
        redisTimeout: 500,
      });
      b.on('degraded', () => {});
      b.on('recovered', () => {});
      budgets.push(b);
      return b;
    });
    const sharing = () =>
      all.every((b) => !b.state.degraded && b.state.members === MEMBERS && b.state.rate === RATE) &&
      Math.abs(all.reduce((s, b) => s + b.limiter.rate, 0) - RATE) < RATE * 0.02;

    let stopped = false;
    let granted = 0;
    let lost = 0;
    const loops = all.flatMap((b) =>
      Array.from({ length: BACKLOG }, async () => {
        while (!stopped) {
          try {
            (await b.acquire(1, { signal: AbortSignal.timeout(30_000) })).success();
            granted++;
          } catch {
            lost++;
          }
        }
      }),
    );
    // The load reported by every member (three heartbeats each), then sharing.
    const trips = all.map((b) => b.state.roundTrips);
    await until('three heartbeats each', () => all.every((b, i) => b.state.roundTrips >= trips[i]! + 3));
    await until('sharing under load', sharing);

    let highest = 0;
    const sample = setInterval(() => {
      highest = Math.max(
        highest,
        all.reduce((s, b) => s + b.limiter.rate, 0),
      );
    }, 10);
    const killedAt = performance.now();
    await primary.kill();
    await until('a member degraded', () => all.some((b) => b.state.degraded));
    await until(
      'the replica promoted',
      async () => (await client(replica.port).role())[0] === 'master',
      30_000,
    );
    await until('sharing on the new primary', sharing, 30_000);
    const switchMs = performance.now() - killedAt;
    clearInterval(sample);
    stopped = true;
    await Promise.all(loops);

    expect(lost).toBe(0);
    expect(granted).toBeGreaterThan(0);
    expect(highest).toBeLessThanOrEqual(degradedBound(switchMs));
    console.log(
      `sentinel: primary killed, sharing again on the promoted replica after ${Math.round(switchMs)} ms; ` +
        `the members' rates added up to at most ${((highest / RATE) * 100).toFixed(1)} % of the budget`,
    );
  }, 60_000);
});
