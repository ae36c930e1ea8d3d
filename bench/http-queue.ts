/**
 * The `http` suite's long queue: 100k `request()` calls made at once on one origin, behind a rate
 * that binds (a named limiter whose rate cannot move: initial = min = max), through the undici
 * interceptor, until every response body is read. Beside it, the same 100k calls on a bare Agent
 * (no limiter: undici queues them in its pool and sends as fast as the server answers), for what a
 * queued request costs without us.
 *
 * Per case: heap per queued request (V8 heap + array buffers after a full GC, once every call is
 * made, over the heap before), time to drain and its ideal (calls / rate), sent rate, client CPU
 * per request and the GC share of the wall time. Real time: the rate is chosen so that the drain
 * takes about 20 s and the client can keep up with it on two shared cores.
 *
 * The interceptor is the build's (`tsc -p tsconfig.build.json` into node_modules/.cache, as
 * published), not the source through tsx: tsx keeps function names by giving every named closure
 * a `name` property of its own, about 1 KiB more per queued request here, which users never pay.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Agent, type Dispatcher, request } from 'undici';
import {
  formatBytes,
  formatMicros,
  formatRate,
  gcTimeMs,
  heldBytes,
  nowMs,
  printTable,
  type Row,
  settle,
  versus,
} from './harness.js';

const CALLS = 100_000;
/** The binding rate (requests/s): 100k calls take 20 s at it. */
const PER_SECOND = 5_000;
/** Connections of each Agent. */
const CONNECTIONS = 50;
const WARMUP_CALLS = 5_000;

interface QueueFigure {
  heapBytes: number;
  drainMs: number;
  cpuUs: number;
  gcShare: number;
  /** Calls whose promise rejected (a limiter refusal, a network error). */
  failed: number;
}

/** Makes `n` calls at once, measures the heap once they are all made, then waits for every body. */
async function drainQueued(dispatcher: Dispatcher, url: string, n: number): Promise<QueueFigure> {
  await settle();
  const before = heldBytes();
  const gc0 = gcTimeMs();
  const cpu0 = process.cpuUsage();
  const t0 = nowMs();
  let failed = 0;
  const calls: Promise<unknown>[] = new Array(n);
  for (let i = 0; i < n; i++) {
    calls[i] = request(url, { dispatcher }).then(
      ({ body }) => body.dump(),
      () => {
        failed++;
      },
    );
  }
  // The full GC pauses the drain for its length; it is left out of the time below.
  const gcStart = nowMs();
  const heapBytes = (heldBytes() - before) / n;
  const probeMs = nowMs() - gcStart;
  await Promise.all(calls);
  const drainMs = nowMs() - t0 - probeMs;
  const cpu = process.cpuUsage(cpu0);
  await settle();
  return {
    heapBytes,
    drainMs,
    cpuUs: (cpu.user + cpu.system) / n,
    gcShare: Math.max(0, gcTimeMs() - gc0 - probeMs) / drainMs,
    failed,
  };
}

/** Builds the package into node_modules/.cache and imports its interceptor from there. */
async function builtInterceptor(): Promise<typeof import('../src/http/interceptor.js')> {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const outDir = fileURLToPath(new URL('../node_modules/.cache/arl-bench-dist/', import.meta.url));
  const tsc = fileURLToPath(new URL('../node_modules/typescript/bin/tsc', import.meta.url));
  execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', outDir], {
    cwd: root,
    stdio: 'inherit',
  });
  // Under node_modules no package.json of ours is in scope: say the build is ESM.
  writeFileSync(`${outDir}package.json`, '{ "type": "module" }\n');
  return import(pathToFileURL(`${outDir}http/interceptor.js`).href);
}

export async function queuedDrain(origin: string): Promise<void> {
  const url = `${origin}/`;
  const { adaptiveRateLimit } = await builtInterceptor();
  const limited = (): { dispatcher: Dispatcher; close: () => Promise<void> } => {
    const agent = new Agent({ connections: CONNECTIONS, pipelining: 1 });
    const rate = PER_SECOND * 60;
    const interceptor = adaptiveRateLimit({
      limiters: {
        api: {
          origins: [origin],
          initialUnitsPerMinute: rate,
          minUnitsPerMinute: rate,
          maxUnitsPerMinute: rate,
          queueLimit: CALLS,
          maxWait: 3_600_000,
        },
      },
    });
    return {
      dispatcher: agent.compose(interceptor),
      close: async () => {
        interceptor.close();
        await agent.close();
      },
    };
  };
  const bare = (): { dispatcher: Dispatcher; close: () => Promise<void> } => {
    const agent = new Agent({ connections: CONNECTIONS, pipelining: 1 });
    return { dispatcher: agent, close: () => agent.close() };
  };

  const cases = [
    { label: `interceptor, named limiter at ${formatRate(PER_SECOND)} (binds)`, make: limited },
    { label: 'bare Agent (no limiter: undici queues them)', make: bare },
  ];
  const figures: QueueFigure[] = [];
  for (const { make } of cases) {
    const warm = make();
    await drainQueued(warm.dispatcher, url, WARMUP_CALLS);
    await warm.close();
    const run = make();
    try {
      figures.push(await drainQueued(run.dispatcher, url, CALLS));
    } finally {
      await run.close();
    }
  }
  const ideal = (CALLS / PER_SECOND) * 1000;
  printTable(
    `${CALLS / 1000}k request() calls at once on one origin: heap per queued request, then the drain (ideal at ${formatRate(PER_SECOND)}: ${(ideal / 1000).toFixed(1)} s)`,
    cases.map(({ label }, i): Row => {
      const f = figures[i]!;
      return {
        library: label,
        figure: formatBytes(f.heapBytes),
        vsOurs: i === 0 ? 'reference' : versus(figures[0]!.heapBytes, f.heapBytes, false),
        note:
          `drained in ${(f.drainMs / 1000).toFixed(1)} s (${formatRate((CALLS * 1000) / f.drainMs)}` +
          `${i === 0 ? `, ${(f.drainMs / ideal).toFixed(3)}× the ideal` : ''}), ` +
          `client CPU ${formatMicros(f.cpuUs)} per request, GC ${(f.gcShare * 100).toFixed(0)} % of wall` +
          (f.failed > 0 ? `, ${f.failed} failed` : ''),
      };
    }),
  );
}
