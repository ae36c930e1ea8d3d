/**
 * Suite `control`: how well each way of limiting finds a real server's quota, in real time, with
 * real processes on 127.0.0.1, side by side from one start (issue 10 item 7, issue 13 item 4).
 *
 * Rows: the library with no options, `controller: 'aimd'`, `'cubic'` and `'probe'` (printed as
 * "not in this build" where the build does not know it), one budget shared through Redis
 * (`createSharedBudget({ redis, name })` behind the interceptor's origin), the AWS SDK's adaptive
 * retry strategy (`@smithy/util-retry`, its `DefaultRateLimiter`), and no limiter (plain retries).
 * Each row has its own server (a process, or an nginx zone on a port of its own).
 *
 * 1. quota server: a token bucket of 3,000 units/min (2 s of burst), 429 + Retry-After; two
 *    client processes of 2,000/min each; another client takes half the quota from 60 to 90 s; 150 s.
 * 2. nginx `limit_req` 3,000 r/m, `burst=10 nodelay`, 429 + `Retry-After: 1`; two client
 *    processes of 2,000/min each for 60 s (the shared budget: three of 1,500/min); each row on a
 *    port (and zone) of its own. After 1, not beside it: on a 2-core machine some 40 processes at
 *    once starve each other, and the figures would measure the CPU, not the limiters.
 * 3. cold burst: 200 `fetch` calls at once (Node's fetch through the global dispatcher) against
 *    600/min, burst 10, `Retry-After: 1` (nginx; the quota server when nginx cannot be had).
 * 4. cold start on a server that never throttles: requests/s of the default config against a
 *    pass-through interceptor, over the first 5 s and after (bench/control-cold.ts).
 *
 *   npm run bench -- control                      the issue's settings (about 5 minutes)
 *   npm run bench -- control --quick              every duration scaled to a 30 s quota run
 *   npm run bench -- control --duration=90        the quota run 90 s, the others in proportion
 *   npm run bench -- control --serial             one row at a time (each row alone on the CPU)
 *   npm run bench -- control --parallel=2         two rows at a time (defaults beside AWS, ...)
 *   npm run bench -- control --only=quota,nginx   some of: quota, nginx, burst, cold
 *   npm run bench -- control --rows=shared,AWS    only the rows whose label has one of these words
 *
 * At N times today's quota (N a number; these run only when named in --only, one row at a time
 * unless --parallel is given). Rows: the library with no options, the AWS SDK's adaptive mode,
 * and an oracle that paces each process evenly at its known share (quota / processes). Callers
 * come from a schedule a timer of 4 ms walks (one timer per caller cannot make thousands a
 * second); each row also gives its client's CPU per request (`process.cpuUsage` / attempts).
 *
 * 5. `nginx<N>x`: nginx `limit_req` at N × 3,000 r/m, `burst=10 nodelay`, 429 + `Retry-After: 1`,
 *    two processes of N × 2,000/min each for 30 s (`--only=nginx10x,nginx100x`: 30,000 and
 *    300,000 a minute).
 * 6. `capacity<N>x`: what this machine can generate and serve: two processes of N × 2,000/min each
 *    for 30 s against nginx with no limit, plain requests (no limiter) and the library's defaults.
 * 7. `latency`, `latency<N>x`: the quota server at N × 3,000 units/min (burst 2 s), two processes
 *    of N × 2,000/min each for 60 s, once on the loopback and once answering every request after
 *    a lognormal delay (median 50 ms, sigma 1.5, clamped to 5 ms .. 2 s; p99 about 1.6 s).
 *
 *   npm run bench -- control --only=capacity100x                 first: can this machine make 100x?
 *   npm run bench -- control --only=nginx10x,nginx100x           the scale rows, one at a time
 *   npm run bench -- control --only=latency --rows=defaults,AWS  heavy-tailed latency beside the loopback
 *
 * Named in --only only (a plain `control` run does not include it: it would add some 70 s):
 *
 * 8. `nginx-noburst`: nginx `limit_req` 3,000 r/m with no `burst` (nginx's default), 429 +
 *    `Retry-After: 1`, two processes of 2,000/min each for 60 s (as 2); the library with no
 *    options, the AWS SDK's adaptive mode and the oracle (each process evenly at 1,500/min), side
 *    by side. With no burst nginx refuses any request less than 20 ms after the one before it,
 *    so two even pacers whose sum is the rate collide too: the oracle's row measures that.
 *
 *   npm run bench -- control --only=nginx-noburst                nginx with no burst
 */
import { loadavg } from 'node:os';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { coldStart } from './control-cold.js';
import { type StartedRedis, startRedisServer } from './control-net.js';
import type { NginxZone } from './control-nginx.js';
import { ensureNginx } from './control-nginx.js';
import type { ClientReport, Load, RowSpec } from './control-protocol.js';
import { refilledBy } from './control-quota-server.js';
import {
  figures,
  pct,
  printRows,
  printScaleRows,
  printTarget,
  type RowResult,
  targetShareAtLeast,
  targetThrottledAtMost,
} from './control-report.js';
import { type RowRun, runSideBySide, type ServerPlan } from './control-runner.js';

const MINUTE = 60_000;
const MAX_ATTEMPTS = 4;

/** The issue's settings (at scale 1). */
export const SETTINGS = {
  quota: { perMinute: 3_000, burstSeconds: 2, clients: 2, demandPerMinute: 2_000, durationMs: 150_000 },
  quotaDrop: { fromMs: 60_000, toMs: 90_000, takenFraction: 0.5 },
  nginx: {
    perMinute: 3_000,
    burst: 10,
    retryAfterSeconds: 1,
    clients: 2,
    demandPerMinute: 2_000,
    durationMs: 60_000,
  },
  nginxShared: { clients: 3, demandPerMinute: 1_500 },
  /** `nginx-noburst`: the nginx settings with `burst` 0 (nginx's default: no `burst`). */
  nginxNoBurst: { burst: 0 },
  burst: { perMinute: 600, burst: 10, callers: 200, capMs: 180_000 },
  /** `nginx<N>x` and `capacity<N>x`: today's nginx settings at N times the rate. */
  scale: {
    durationMs: 30_000,
    tickMs: 4,
    /** Connections per origin of each client's Agent. */
    connections: 32,
    unlimitedPerMinute: 60_000_000,
    unlimitedBurst: 1_000_000,
  },
  /** `latency<N>x`: the quota server without the drop, at N times the rate. */
  latency: {
    perMinute: 3_000,
    burstSeconds: 2,
    clients: 2,
    demandPerMinute: 2_000,
    durationMs: 60_000,
    lognormal: { medianMs: 50, sigma: 1.5, minMs: 5, maxMs: 2_000 },
    /**
     * Connections per origin of each client's Agent: at a mean latency of 150 ms, 32 would cap
     * a process at about 200 requests/s (Little's law), below its share at 10x.
     */
    connections: 1_024,
  },
} as const;

export interface ControlArgs {
  /** Multiplies every duration of the quota and nginx runs (1: the issue's settings). */
  scale: number;
  /** Rows run at once; Infinity: every row of a server side by side. */
  parallel: number;
  only: ReadonlySet<string>;
  /** Words of the row labels to run (`undefined`: every row). */
  rows: readonly string[] | undefined;
  /** `--parallel` or `--serial` was given (the scaled scenarios run one row at a time otherwise). */
  parallelGiven: boolean;
  /** The scaled scenarios asked for, in order: `nginx10x` is `{ kind: 'nginx', times: 10 }`. */
  scaled: readonly Scaled[];
}

const SCENARIOS = ['quota', 'nginx', 'burst', 'cold'] as const;
/** Scenarios run only when named in `--only` (not part of a plain `control` run). */
const OPT_IN = ['nginx-noburst'] as const;
/** Every row name `--only=` takes (besides the scaled ones). */
const KNOWN_ROWS: readonly string[] = [...SCENARIOS, ...OPT_IN];

export interface Scaled {
  kind: 'nginx' | 'capacity' | 'latency';
  /** Times today's quota (and demand). */
  times: number;
}

/** `nginx<N>x`, `capacity<N>x`, `latency<N>x` (and `latency`, 1x); `undefined` for another word. */
export function parseScaled(word: string): Scaled | undefined {
  if (word === 'latency') return { kind: 'latency', times: 1 };
  const m = /^(nginx|capacity|latency)(\d+(?:\.\d+)?)x$/.exec(word);
  if (m === null) return undefined;
  const times = Number(m[2]);
  if (!(times > 0)) return undefined;
  return { kind: m[1] as Scaled['kind'], times };
}

export function parseControlArgs(argv: readonly string[]): ControlArgs {
  let scale = 1;
  let parallel = Number.POSITIVE_INFINITY;
  let only: Set<string> = new Set(SCENARIOS);
  let rows: string[] | undefined;
  let parallelGiven = false;
  let scaled: Scaled[] = [];
  for (const arg of argv) {
    if (arg === '--serial' || arg.startsWith('--parallel=')) parallelGiven = true;
    if (arg === '--serial') parallel = 1;
    else if (arg.startsWith('--parallel=')) {
      parallel = Number(arg.slice('--parallel='.length));
      if (!Number.isInteger(parallel) || parallel < 1)
        throw new Error(`--parallel: expected an integer >= 1, got ${arg}`);
    } else if (arg === '--quick') scale = 30_000 / SETTINGS.quota.durationMs;
    else if (arg.startsWith('--duration=')) {
      const seconds = Number(arg.slice('--duration='.length));
      if (!Number.isFinite(seconds) || seconds < 10)
        throw new Error(`--duration: expected seconds >= 10, got ${arg}`);
      scale = (seconds * 1000) / SETTINGS.quota.durationMs;
    } else if (arg.startsWith('--only=')) {
      const words = arg.slice('--only='.length).split(',');
      scaled = words.map(parseScaled).filter((x): x is Scaled => x !== undefined);
      only = new Set(words.filter((w) => parseScaled(w) === undefined));
      const known = KNOWN_ROWS;
      const unknown = [...only].filter((s) => !known.includes(s));
      if (unknown.length > 0)
        throw new Error(
          `--only: unknown ${unknown.join(', ')}; expected some of ${KNOWN_ROWS.join(', ')}, nginx<N>x, capacity<N>x, latency, latency<N>x`,
        );
    } else if (arg.startsWith('--rows=')) {
      rows = arg
        .slice('--rows='.length)
        .split(',')
        .filter((w) => w !== '');
    } else if (arg.startsWith('-') && arg !== '--expose-gc') {
      throw new Error(
        `control: unknown option ${arg} (--serial, --parallel=N, --quick, --duration=S, --only=a,b, --rows=a,b)`,
      );
    }
  }
  return { scale, parallel, only, rows, parallelGiven, scaled };
}

interface Row {
  label: string;
  spec?: RowSpec;
  skipped?: string;
}

/** True when this build's limiter accepts `controller: name`. */
function knowsController(name: string): boolean {
  try {
    new AdaptiveRateLimiter({ controller: name as 'aimd' }).close();
    return true;
  } catch {
    return false;
  }
}

function limiterRows(): Row[] {
  const ours = (controller: string): Row =>
    knowsController(controller)
      ? { label: `controller: '${controller}'`, spec: { kind: 'ours', controller } }
      : { label: `controller: '${controller}'`, skipped: 'not in this build' };
  return [
    { label: 'defaults (no options)', spec: { kind: 'ours' } },
    ours('aimd'),
    ours('cubic'),
    ours('probe'),
    { label: 'AWS SDK adaptive', spec: { kind: 'aws' } },
    { label: 'no limiter', spec: { kind: 'none' } },
  ];
}

interface Planned {
  row: Row;
  run?: RowRun;
  available: (reports: ClientReport[]) => number;
}

function plan(
  row: Row,
  server: ServerPlan,
  clients: number,
  load: Load,
  transport: 'request' | 'fetch',
  connections?: number,
): RowRun | undefined {
  if (row.spec === undefined) return undefined;
  const job = {
    row: row.spec,
    transport,
    load,
    maxAttempts: MAX_ATTEMPTS,
    ...(connections === undefined ? {} : { connections }),
  };
  return { label: row.label, server, jobs: Array.from({ length: clients }, () => job) };
}

/** The order rows run in when not all at once: the rows a target compares run together. */
const BATCH_ORDER = ['defaults', 'AWS', 'oracle', 'aimd', 'cubic', 'probe', 'no limiter', 'shared'];

function batchRank(label: string): number {
  const i = BATCH_ORDER.findIndex((word) => label.includes(word));
  return i < 0 ? BATCH_ORDER.length : i;
}

/** Runs the planned rows, `parallel` at a time (all at once by default), and pairs each with its reports. */
async function execute(planned: readonly Planned[], parallel: number): Promise<RowResult[]> {
  const runs = planned
    .filter((p) => p.run !== undefined)
    .sort((a, b) => batchRank(a.row.label) - batchRank(b.row.label));
  const reports = new Map<Planned, ClientReport[]>();
  for (let i = 0; i < runs.length; i += parallel) {
    const batch = runs.slice(i, i + parallel);
    if (batch.length < runs.length)
      console.log(`  running ${batch.map((p) => `"${p.row.label}"`).join(', ')} ...`);
    const all = await runSideBySide(batch.map((p) => p.run!));
    for (const [k, p] of batch.entries()) reports.set(p, all[k]!);
  }
  return planned.map((p) => {
    const r = reports.get(p) ?? [];
    return {
      label: p.row.label,
      ...(p.row.skipped === undefined ? {} : { skipped: p.row.skipped }),
      reports: r,
      available: p.available(r),
    };
  });
}

const sharedRow = (redis: StartedRedis | string, name: string): Row =>
  typeof redis === 'string'
    ? { label: 'shared budget (redis, name)', skipped: `skipped: ${redis}` }
    : {
        label: 'shared budget (redis, name)',
        spec: { kind: 'shared', redisUrl: redis.url, name: `bench-control-${process.pid}-${name}` },
      };

export async function controlSuite(argv: readonly string[] = process.argv.slice(2)): Promise<void> {
  const args = parseControlArgs(argv);
  const s = SETTINGS;
  const quotaMs = Math.round(s.quota.durationMs * args.scale);
  const nginxMs = Math.round(s.nginx.durationMs * args.scale);
  const drop = {
    fromMs: s.quotaDrop.fromMs * args.scale,
    toMs: s.quotaDrop.toMs * args.scale,
    takenFraction: s.quotaDrop.takenFraction,
  };
  const needsNginx = args.scaled.some((x) => x.kind !== 'latency') || args.only.has('nginx-noburst');
  const nginxOk =
    args.only.has('nginx') || args.only.has('burst') || needsNginx ? ensureNginx() : 'not asked for';
  if (nginxOk !== true && args.only.has('nginx')) console.log(`nginx rows skipped: ${nginxOk}`);
  const redis = args.only.has('quota') || args.only.has('nginx') ? await startRedisServer() : 'not asked for';
  if (typeof redis === 'string') console.log(`shared-budget rows skipped: ${redis}`);
  const wanted = (label: string) => args.rows === undefined || args.rows.some((w) => label.includes(w));
  const rows = limiterRows().filter((row) => wanted(row.label));
  try {
    // 1 and 2, side by side.
    const quota: Planned[] = [];
    const nginx: Planned[] = [];
    if (args.only.has('quota')) {
      const server: ServerPlan = {
        kind: 'quota',
        options: { perMinute: s.quota.perMinute, burstSeconds: s.quota.burstSeconds, drop },
      };
      const load: Load = { kind: 'open', perMinute: s.quota.demandPerMinute, durationMs: quotaMs };
      const available = () => refilledBy(quotaMs, s.quota.perMinute, drop);
      for (const row of [...rows, sharedRow(redis, 'quota')].filter((r) => wanted(r.label))) {
        const run = plan(row, server, s.quota.clients, load, 'request');
        quota.push({ row, ...(run === undefined ? {} : { run }), available });
      }
    }
    if (args.only.has('nginx') && nginxOk === true) {
      const zone: NginxZone = { perMinute: s.nginx.perMinute, burst: s.nginx.burst };
      const server: ServerPlan = { kind: 'nginx', zone, retryAfterSeconds: s.nginx.retryAfterSeconds };
      const available = () => (s.nginx.perMinute * nginxMs) / MINUTE;
      for (const row of rows) {
        const load: Load = { kind: 'open', perMinute: s.nginx.demandPerMinute, durationMs: nginxMs };
        const run = plan(row, server, s.nginx.clients, load, 'request');
        nginx.push({ row, ...(run === undefined ? {} : { run }), available });
      }
      const row = sharedRow(redis, 'nginx');
      row.label = `shared budget (redis, name), ${s.nginxShared.clients} × ${s.nginxShared.demandPerMinute.toLocaleString('en-US')}/min`;
      if (wanted(row.label)) {
        const load: Load = { kind: 'open', perMinute: s.nginxShared.demandPerMinute, durationMs: nginxMs };
        const run = plan(row, server, s.nginxShared.clients, load, 'request');
        nginx.push({ row, ...(run === undefined ? {} : { run }), available });
      }
    }
    if (quota.length > 0) {
      console.log(`\nquota server, ${quotaMs / 1000} s, ${how(args.parallel)} ...`);
      reportQuota(await execute(quota, args.parallel), quotaMs);
    }
    if (nginx.length > 0) {
      console.log(`\nnginx, ${nginxMs / 1000} s, ${how(args.parallel)} ...`);
      reportNginx(await execute(nginx, args.parallel), nginxMs);
    }
    if (args.only.has('nginx-noburst')) {
      if (nginxOk === true) await nginxNoBurst(nginxMs, args.parallel, wanted);
      else console.log(`\nnginx-noburst skipped: ${nginxOk}`);
    }
    if (args.only.has('burst')) await burst(rows, nginxOk === true, args.parallel);
    if (args.only.has('cold')) await coldStart(args.scale);
    const scaledParallel = args.parallelGiven ? args.parallel : 1;
    for (const x of args.scaled) {
      if (x.kind !== 'latency' && nginxOk !== true) {
        console.log(`\n${x.kind}${x.times}x skipped: ${nginxOk}`);
        continue;
      }
      const scaledArgs = { scale: args.scale, parallel: scaledParallel, wanted };
      if (x.kind === 'nginx') await nginxScaled(x.times, scaledArgs);
      else if (x.kind === 'capacity') await capacity(x.times, scaledArgs);
      else await latency(x.times, scaledArgs);
    }
  } finally {
    if (typeof redis !== 'string') await redis.stop();
  }
}

const how = (parallel: number): string =>
  Number.isFinite(parallel)
    ? `${parallel} row${parallel > 1 ? 's' : ''} at a time`
    : 'every row side by side from one start';

const find = (results: readonly RowResult[], label: string) => results.find((r) => r.label === label);

function reportQuota(results: RowResult[], ms: number): void {
  const s = SETTINGS.quota;
  printRows(
    `Quota server: ${s.perMinute.toLocaleString('en-US')} units/min (burst ${s.burstSeconds} s), ${s.clients} processes of ` +
      `${s.demandPerMinute.toLocaleString('en-US')}/min each, half the quota taken from ` +
      `${(SETTINGS.quotaDrop.fromMs * (ms / s.durationMs)) / 1000} to ${(SETTINGS.quotaDrop.toMs * (ms / s.durationMs)) / 1000} s, ` +
      `${ms / 1000} s; share = units accepted / units the quota left us`,
    results,
  );
  const ours = find(results, 'defaults (no options)');
  const aws = find(results, 'AWS SDK adaptive');
  console.log('');
  if (ours !== undefined && aws !== undefined && aws.skipped === undefined) {
    const o = figures(ours);
    const a = figures(aws);
    printTarget(
      "issue 10: no options, share >= the AWS limiter's",
      o.share >= a.share,
      `${pct(o.share)} vs ${pct(a.share)}`,
      `${((a.share - o.share) * 100).toFixed(1)} points`,
    );
    printTarget(
      "issue 10: no options, at most half the AWS limiter's 429s",
      o.throttled <= a.throttled / 2,
      `${o.throttled} vs ${a.throttled} (half: ${Math.floor(a.throttled / 2)})`,
      `${o.throttled - Math.floor(a.throttled / 2)} 429s`,
    );
  }
  const shared = results.find((r) => r.label.startsWith('shared budget') && r.skipped === undefined);
  if (shared !== undefined)
    targetShareAtLeast('issue 13: shared budget, no options but redis and name,', figures(shared), 0.97);
}

function reportNginx(results: RowResult[], ms: number): void {
  const s = SETTINGS.nginx;
  printRows(
    `nginx limit_req: rate=${s.perMinute}r/m burst=${s.burst} nodelay, 429 + Retry-After: ${s.retryAfterSeconds}; ` +
      `${s.clients} processes of ${s.demandPerMinute.toLocaleString('en-US')}/min each, ${ms / 1000} s`,
    results,
  );
  console.log('');
  const ours = find(results, 'defaults (no options)');
  if (ours !== undefined) {
    const f = figures(ours);
    targetShareAtLeast('issue 10: no options,', f, 0.95);
    targetThrottledAtMost('issue 10: no options,', f, 0.01);
  }
  const shared = results.find((r) => r.label.startsWith('shared budget') && r.skipped === undefined);
  if (shared !== undefined) {
    const f = figures(shared);
    targetShareAtLeast('issue 13: 3 processes sharing one budget, no options but redis and name,', f, 0.95);
    targetThrottledAtMost('issue 13: 3 processes sharing one budget,', f, 0.01);
  }
}

async function burst(rows: readonly Row[], withNginx: boolean, parallel: number): Promise<void> {
  const s = SETTINGS.burst;
  const server: ServerPlan = withNginx
    ? { kind: 'nginx', zone: { perMinute: s.perMinute, burst: s.burst }, retryAfterSeconds: 1 }
    : // A token bucket of burst + 1 requests is what nginx's `burst=N nodelay` lets through at once.
      {
        kind: 'quota',
        options: { perMinute: s.perMinute, burstSeconds: ((s.burst + 1) * 60) / s.perMinute },
      };
  const load: Load = { kind: 'burst', callers: s.callers, capMs: s.capMs };
  const planned: Planned[] = rows.map((row) => {
    const run = plan(row, server, 1, load, 'fetch');
    return {
      row,
      ...(run === undefined ? {} : { run }),
      // The quota over the time the burst took: its burst plus the rate until the last answer.
      available: (reports) =>
        s.burst + (s.perMinute * Math.max(...reports.map((r) => r.lastAnswerMs), 0)) / MINUTE,
    };
  });
  console.log(`\ncold burst (${withNginx ? 'nginx' : 'quota server: nginx could not be had'}) ...`);
  const results = await execute(planned, parallel);
  printRows(
    `Cold burst: ${s.callers} fetch calls at once against ${s.perMinute}/min, burst ${s.burst}, Retry-After: 1 ` +
      `(${withNginx ? 'nginx limit_req' : 'quota server'}); share = accepted / (burst + the rate until the last answer)`,
    results,
    (f) => `${(f.lastAnswerMs / 1000).toFixed(1)} s`,
  );
  const ours = find(results, 'defaults (no options)');
  if (ours !== undefined) {
    const f = figures(ours);
    console.log('');
    printTarget(
      'issue 10: no options, no caller gets a 429',
      f.callersWith429 === 0,
      `${f.callersWith429} callers`,
      `${f.callersWith429} callers`,
    );
    printTarget(
      'issue 10: no options, at most 60 requests answered 429',
      f.throttled <= 60,
      `${f.throttled}`,
      `${f.throttled - 60} requests`,
    );
  }
}

interface ScaledArgs {
  /** Multiplies the durations (as `--duration` and `--quick` do for the others). */
  scale: number;
  parallel: number;
  wanted: (label: string) => boolean;
}

const perMin = (n: number): string => Math.round(n).toLocaleString('en-US');

/** The rows at scale: the library with no options, the AWS SDK's adaptive mode, an oracle at `share`/min per process. */
function scaleRows(share: number, suffix = ''): Row[] {
  return [
    { label: `defaults (no options)${suffix}`, spec: { kind: 'ours' } },
    { label: `AWS SDK adaptive${suffix}`, spec: { kind: 'aws' } },
    {
      label: `oracle (each process at ${perMin(share)}/min)${suffix}`,
      spec: { kind: 'oracle', perMinute: share },
    },
  ];
}

function scaledLoad(perMinute: number, durationMs: number): Load {
  return { kind: 'open', perMinute, durationMs, tickMs: SETTINGS.scale.tickMs };
}

/** `uptime`'s load averages, to print beside the figures. */
function loadAverage(): string {
  return loadavg()
    .map((x) => x.toFixed(2))
    .join(', ');
}

async function nginxScaled(times: number, args: ScaledArgs): Promise<void> {
  const s = SETTINGS.nginx;
  const perMinute = Math.round(s.perMinute * times);
  const demand = Math.round(s.demandPerMinute * times);
  const ms = Math.round(SETTINGS.scale.durationMs * args.scale);
  const server: ServerPlan = {
    kind: 'nginx',
    zone: { perMinute, burst: s.burst },
    retryAfterSeconds: s.retryAfterSeconds,
  };
  const available = () => (perMinute * ms) / MINUTE;
  const planned: Planned[] = scaleRows(perMinute / s.clients)
    .filter((row) => args.wanted(row.label))
    .map((row) => {
      const run = plan(row, server, s.clients, scaledLoad(demand, ms), 'request', SETTINGS.scale.connections);
      return { row, ...(run === undefined ? {} : { run }), available };
    });
  console.log(
    `\nnginx at ${times}x (${perMin(perMinute)} r/m), ${ms / 1000} s, ${how(args.parallel)}, load ${loadAverage()} ...`,
  );
  const results = await execute(planned, args.parallel);
  printScaleRows(
    `nginx limit_req at ${times}x: rate=${perMinute}r/m burst=${s.burst} nodelay, 429 + Retry-After: ${s.retryAfterSeconds}; ` +
      `${s.clients} processes of ${perMin(demand)}/min each (a 4 ms tick), ${ms / 1000} s; load after: ${loadAverage()}`,
    results,
  );
  console.log('');
  const ours = find(results, 'defaults (no options)');
  if (ours !== undefined) {
    const f = figures(ours);
    targetShareAtLeast(`nginx at ${times}x, no options,`, f, 0.95);
    targetThrottledAtMost(`nginx at ${times}x, no options,`, f, 0.01);
  }
}

/**
 * nginx with no `burst`: the 1x nginx settings (two processes of 2,000/min, open loop, 60 s at
 * scale 1) with `burst` 0; the library with no options beside the AWS SDK's adaptive mode and the
 * oracle at its known share, every row side by side unless `--parallel`/`--serial`.
 */
async function nginxNoBurst(ms: number, parallel: number, wanted: (label: string) => boolean): Promise<void> {
  const s = SETTINGS.nginx;
  const burst = SETTINGS.nginxNoBurst.burst;
  const server: ServerPlan = {
    kind: 'nginx',
    zone: { perMinute: s.perMinute, burst },
    retryAfterSeconds: s.retryAfterSeconds,
  };
  const available = () => (s.perMinute * ms) / MINUTE;
  const load: Load = { kind: 'open', perMinute: s.demandPerMinute, durationMs: ms };
  const planned: Planned[] = scaleRows(s.perMinute / s.clients)
    .filter((row) => wanted(row.label))
    .map((row) => {
      const run = plan(row, server, s.clients, load, 'request');
      return { row, ...(run === undefined ? {} : { run }), available };
    });
  console.log(`\nnginx with no burst, ${ms / 1000} s, ${how(parallel)}, load ${loadAverage()} ...`);
  const results = await execute(planned, parallel);
  printRows(
    `nginx limit_req with no burst: rate=${s.perMinute}r/m (burst ${burst}), 429 + Retry-After: ${s.retryAfterSeconds}; ` +
      `${s.clients} processes of ${s.demandPerMinute.toLocaleString('en-US')}/min each, ${ms / 1000} s; load after: ${loadAverage()}`,
    results,
  );
  const ours = find(results, 'defaults (no options)');
  const aws = find(results, 'AWS SDK adaptive');
  if (ours !== undefined && aws !== undefined) {
    const o = figures(ours);
    const a = figures(aws);
    console.log('');
    printTarget(
      "nginx with no burst: no options, share >= the AWS limiter's",
      o.share >= a.share,
      `${pct(o.share)} vs ${pct(a.share)}`,
      `${((a.share - o.share) * 100).toFixed(1)} points`,
    );
  }
}

async function capacity(times: number, args: ScaledArgs): Promise<void> {
  const s = SETTINGS.nginx;
  const demand = Math.round(s.demandPerMinute * times);
  const ms = Math.round(SETTINGS.scale.durationMs * args.scale);
  const server: ServerPlan = {
    kind: 'nginx',
    zone: { perMinute: SETTINGS.scale.unlimitedPerMinute, burst: SETTINGS.scale.unlimitedBurst },
    retryAfterSeconds: s.retryAfterSeconds,
  };
  const rows: Row[] = [
    { label: 'no limiter', spec: { kind: 'none' } },
    { label: 'defaults (no options)', spec: { kind: 'ours' } },
  ];
  const planned: Planned[] = rows
    .filter((row) => args.wanted(row.label))
    .map((row) => {
      const run = plan(row, server, s.clients, scaledLoad(demand, ms), 'request', SETTINGS.scale.connections);
      return {
        row,
        ...(run === undefined ? {} : { run }),
        available: () => (s.clients * demand * ms) / MINUTE,
      };
    });
  console.log(
    `\ncapacity at ${times}x: ${s.clients} × ${perMin(demand)}/min against nginx with no limit, ${ms / 1000} s, load ${loadAverage()} ...`,
  );
  const results = await execute(planned, args.parallel);
  printScaleRows(
    `What this machine generates and serves: ${s.clients} processes of ${perMin(demand)}/min each (${perMin((s.clients * demand) / 60)}/s in all), ` +
      `nginx with no limit, ${ms / 1000} s; share = answers / the schedule; load after: ${loadAverage()}`,
    results,
    ms,
  );
}

async function latency(times: number, args: ScaledArgs): Promise<void> {
  const s = SETTINGS.latency;
  const perMinute = Math.round(s.perMinute * times);
  const demand = Math.round(s.demandPerMinute * times);
  const ms = Math.round(s.durationMs * args.scale);
  const available = () => refilledBy(ms, perMinute, undefined);
  const planned: Planned[] = [];
  for (const [suffix, lognormal] of [
    [', loopback', undefined],
    [', lognormal', s.lognormal],
  ] as const) {
    const server: ServerPlan = {
      kind: 'quota',
      options: {
        perMinute,
        burstSeconds: s.burstSeconds,
        ...(lognormal === undefined ? {} : { latency: lognormal }),
      },
    };
    for (const row of scaleRows(perMinute / s.clients, suffix).filter((r) => args.wanted(r.label))) {
      const run = plan(row, server, s.clients, scaledLoad(demand, ms), 'request', s.connections);
      planned.push({ row, ...(run === undefined ? {} : { run }), available });
    }
  }
  const l = s.lognormal;
  console.log(
    `\nheavy-tailed latency at ${times}x (${perMin(perMinute)} units/min), ${ms / 1000} s, ${how(args.parallel)}, load ${loadAverage()} ...`,
  );
  const results = await execute(planned, args.parallel);
  printScaleRows(
    `Quota server at ${times}x: ${perMin(perMinute)} units/min (burst ${s.burstSeconds} s), 429 + Retry-After; ${s.clients} processes of ` +
      `${perMin(demand)}/min each, ${ms / 1000} s; on the loopback, and answering after a lognormal delay ` +
      `(median ${l.medianMs} ms, sigma ${l.sigma}, clamped to ${l.minMs} ms .. ${l.maxMs / 1000} s); load after: ${loadAverage()}`,
    results,
  );
  console.log('');
  for (const suffix of [', loopback', ', lognormal']) {
    const ours = find(results, `defaults (no options)${suffix}`);
    if (ours === undefined) continue;
    const f = figures(ours);
    targetShareAtLeast(`quota server at ${times}x${suffix}, no options,`, f, 0.95);
    targetThrottledAtMost(`quota server at ${times}x${suffix}, no options,`, f, 0.01);
  }
}
