/**
 * The crowd bench (`npm run bench -- crowd`): short-lived processes against one token bucket of
 * 40 requests a minute holding 50 that answers 429 with no `Retry-After` and no rate-limit headers
 * (as Envoy's `local_ratelimit` does). Per row: a server process of its own (bench/control-server-main.ts),
 * N fresh client processes (bench/crowd-client-main.ts) that warm up, say ready, and are released
 * at one start time; each sends its requests one at a time until served. Rows run one after
 * another (50 processes per row are already more than 2 cores start quickly).
 *
 *   npm run bench -- crowd                                  both shapes, every row
 *   npm run bench -- crowd --shapes=50x2 --rows=ours,atb    some of them
 */
import { fileURLToPath } from 'node:url';
import { forkBench, stop } from './control-procs.js';
import { nextMessage, startQuotaProcess } from './control-runner.js';
import type { CrowdReport, CrowdRow, FromCrowdClient, ToCrowdClient } from './crowd-client-main.js';

const CLIENT_MAIN = fileURLToPath(new URL('./crowd-client-main.ts', import.meta.url));

/** The server: 40 a minute, a bucket of 50 (75 s of the quota), a bare 429. */
const PER_MINUTE = 40;
const BURST_SECONDS = 75;
/** No attempt starts after this (ms from the start): 3 minutes, twice the ideal's 75 s and more. */
const CAP_MS = 180_000;
/** Time every process of a row gets to warm up and say ready (ms). */
const READY_MS = 180_000;
/** The common start is this long after the last process is ready (ms). */
const START_LEAD_MS = 1_500;

const ROWS: readonly { row: CrowdRow; label: string }[] = [
  { row: 'ours', label: 'adaptive-rate-limit, no options (fetch)' },
  { row: 'backoff', label: 'exponential backoff (paper)' },
  { row: 'atb', label: 'adaptive token bucket, ATB (paper)' },
  { row: 'aws', label: 'AWS SDK adaptive retry (@smithy/util-retry)' },
];

const SHAPES = [
  { name: '50x2', processes: 50, requests: 2 },
  { name: '10x10', processes: 10, requests: 10 },
] as const;

export interface CrowdFigures {
  label: string;
  throttled: number;
  lastSuccessS: number;
  /** Requests never served (the cap came first). */
  unserved: number;
  /** Calls that ended in a 429 or a refusal, after which the script called again. */
  gaveUp: number;
  sent: number;
  served: number;
  errors: string[];
}

function option(name: string): string[] | undefined {
  const arg = process.argv.find((a) => a.startsWith(`--${name}=`));
  return arg?.slice(name.length + 3).split(',');
}

async function runRow(row: CrowdRow, processes: number, requests: number): Promise<CrowdReport[]> {
  const server = await startQuotaProcess({
    perMinute: PER_MINUTE,
    burstSeconds: BURST_SECONDS,
    retryAfter: false,
  });
  const children = Array.from({ length: processes }, () => forkBench(CLIENT_MAIN));
  try {
    const ready = children.map((child, i) =>
      nextMessage(child, `crowd client ${i}`, READY_MS, (m: FromCrowdClient) =>
        m.type === 'ready' ? true : undefined,
      ),
    );
    for (const child of children) {
      child.send({
        type: 'job',
        job: { row, url: server.url, requests, capMs: CAP_MS },
      } satisfies ToCrowdClient);
    }
    await Promise.all(ready);
    const reports = children.map((child, i) =>
      nextMessage(child, `crowd client ${i}`, CAP_MS + 60_000, (m: FromCrowdClient) =>
        m.type === 'report' ? m.report : undefined,
      ),
    );
    const startAt = Date.now() + START_LEAD_MS;
    for (const child of children) child.send({ type: 'start', startAt } satisfies ToCrowdClient);
    return await Promise.all(reports);
  } finally {
    await Promise.all(children.map((child) => stop(child)));
    await server.stop();
  }
}

function sum(reports: readonly CrowdReport[], label: string, requests: number): CrowdFigures {
  let lastMs = 0;
  const f: CrowdFigures = {
    label,
    throttled: 0,
    lastSuccessS: 0,
    unserved: 0,
    gaveUp: 0,
    sent: 0,
    served: 0,
    errors: [],
  };
  for (const r of reports) {
    f.throttled += r.throttled;
    f.sent += r.ok + r.throttled + r.other;
    f.served += r.served;
    f.unserved += requests - r.served;
    f.gaveUp += r.gaveUp + r.rejected;
    lastMs = Math.max(lastMs, r.lastSuccessMs);
    f.errors.push(...r.errors);
  }
  f.lastSuccessS = lastMs / 1000;
  return f;
}

function table(rows: readonly CrowdFigures[]): string {
  const header = ['row', '429s', 'last success', 'gave up (called again)', 'unserved', 'requests sent'];
  const lines = rows.map((r) => [
    r.label,
    String(r.throttled),
    `${r.lastSuccessS.toFixed(1)} s`,
    String(r.gaveUp),
    String(r.unserved),
    String(r.sent),
  ]);
  const out = [
    `| ${header.join(' | ')} |`,
    `| --- | ${header
      .slice(1)
      .map(() => '--:')
      .join(' | ')} |`,
  ];
  for (const l of lines) out.push(`| ${l.join(' | ')} |`);
  return out.join('\n');
}

export async function crowdSuite(): Promise<void> {
  const rowNames = option('rows');
  const shapeNames = option('shapes');
  const rows = ROWS.filter((r) => rowNames === undefined || rowNames.includes(r.row));
  const shapes = SHAPES.filter((s) => shapeNames === undefined || shapeNames.includes(s.name));
  console.log(
    `server: a token bucket of ${PER_MINUTE}/min holding ${(PER_MINUTE * BURST_SECONDS) / 60}, a bare 429 (no Retry-After, no rate-limit headers); ` +
      `each process sends its requests one at a time, each until served; rows one after another; a cap of ${CAP_MS / 1000} s per row`,
  );
  console.log(
    'a call that ends with a 429 (the library or the SDK gave up on its attempts) or a refusal counts as "gave up": ' +
      'the script then calls again, as a job that must finish its work would (a refusal: after 1 s)',
  );
  for (const shape of shapes) {
    const ideal = ((shape.processes * shape.requests - (PER_MINUTE * BURST_SECONDS) / 60) * 60) / PER_MINUTE;
    console.log(
      `\n${shape.processes} processes x ${shape.requests} requests (ideal: the last success at ${ideal} s, no 429)`,
    );
    const figures: CrowdFigures[] = [];
    for (const r of rows) {
      const reports = await runRow(r.row, shape.processes, shape.requests);
      const f = sum(reports, r.label, shape.requests);
      figures.push(f);
      console.log(
        `  ${r.label}: ${f.throttled} 429s, last success ${f.lastSuccessS.toFixed(1)} s, ${f.gaveUp} gave up, ${f.unserved} unserved, ${f.sent} sent`,
      );
      for (const e of f.errors.slice(0, 2)) console.log(`    error: ${e.split('\n')[0]}`);
    }
    console.log(`\n${table(figures)}`);
  }
}
