/**
 * Suite `redis`: the cost of sharing a budget through Redis.
 *
 * - acquire+success per second, a shared budget (local limiter + heartbeat) against the plain
 *   local limiter, with a limit that never binds;
 * - Redis round trips per 1,000 requests: flat out, and paced at 3,000 requests/min (the e2e
 *   test's quota), with the default 250 ms heartbeat.
 *
 * Needs a redis-server on the PATH (or REDIS_URL): it starts one on a free port and stops it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { createSharedBudget } from '../src/redis/index.js';
import { type Batch, formatRate, nowMs, opsPerSecond, printTable, versus } from './harness.js';

const NEVER_BINDS_PER_MIN = 1e15;

export async function redisSuite(): Promise<void> {
  const redis = await startRedis();
  if (redis === undefined) {
    console.log('skipped: no redis-server on the PATH and no REDIS_URL');
    return;
  }
  try {
    await throughput(redis.url);
    await roundTrips(redis.url);
  } finally {
    redis.stop();
  }
}

async function throughput(url: string): Promise<void> {
  const local = new AdaptiveRateLimiter({ initialUnitsPerMinute: NEVER_BINDS_PER_MIN });
  const shared = createSharedBudget({
    redis: url,
    name: `bench-${process.pid}`,
    initialUnitsPerMinute: NEVER_BINDS_PER_MIN,
  });
  await shared.ready();
  const batch =
    (limiter: { acquire(): Promise<{ success(): void }> }): Batch =>
    async (n) => {
      for (let i = 0; i < n; i++) (await limiter.acquire()).success();
    };
  const ours = await opsPerSecond(batch(shared));
  const base = await opsPerSecond(batch(local));
  await shared.close();
  local.close();
  printTable('acquire() + success() per second (limit never binds)', [
    { library: 'shared budget (redis)', figure: formatRate(ours), vsOurs: '' },
    { library: 'local limiter', figure: formatRate(base), vsOurs: versus(ours, base, true) },
  ]);
}

async function roundTrips(url: string): Promise<void> {
  const rows = [];
  for (const [label, perSecond, ms] of [
    ['flat out, 1 s', Number.POSITIVE_INFINITY, 1_000],
    ['paced at 3,000/min, 5 s', 50, 5_000],
  ] as const) {
    const budget = createSharedBudget({
      redis: url,
      name: `bench-rt-${process.pid}-${perSecond}`,
      initialUnitsPerMinute: NEVER_BINDS_PER_MIN,
    });
    await budget.ready();
    const before = budget.state.roundTrips;
    let requests = 0;
    const end = nowMs() + ms;
    while (nowMs() < end) {
      if (Number.isFinite(perSecond)) {
        (await budget.acquire()).success();
        requests++;
        await sleep(1000 / perSecond);
      } else {
        for (let i = 0; i < 1_000; i++) (await budget.acquire()).success();
        requests += 1_000;
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    const trips = budget.state.roundTrips - before;
    await budget.close();
    rows.push({
      library: label,
      figure: ((trips * 1_000) / requests).toFixed(2),
      vsOurs: '',
      note: `${trips} round trips for ${requests} requests (heartbeat 250 ms)`,
    });
  }
  printTable('Redis round trips per 1,000 requests (no throttles)', rows);
}

interface Started {
  url: string;
  stop(): void;
}

async function startRedis(): Promise<Started | undefined> {
  const given = process.env.REDIS_URL;
  if (given !== undefined) return { url: given, stop: () => {} };
  const port = await freePort();
  let child: ChildProcess;
  try {
    child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      {
        stdio: 'ignore',
      },
    );
    await Promise.race([once(child, 'spawn'), once(child, 'error').then(([e]) => Promise.reject(e))]);
  } catch {
    return undefined;
  }
  for (let i = 0; i < 500 && !(await canConnect(port)); i++) await sleep(10);
  return { url: `redis://127.0.0.1:${port}`, stop: () => child.kill() };
}

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
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
