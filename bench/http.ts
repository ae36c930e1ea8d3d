/**
 * Suite `http`: what the undici interceptor costs a request, against a bare undici `Agent`, with
 * limits that never bind, on the same loopback server in the same run.
 *
 * - `request()`, 50 in flight (an Agent of 50 connections, pipelining 1): the bare Agent, the
 *   Agent composed with a pass-through interceptor, the default config (a limiter per origin,
 *   unlimited until the first throttle), a named limiter for the origin at a finite rate that
 *   never binds, and the same with `maxConcurrent` set high (p-queue in the path, never full);
 * - `request()`, 1 in flight: the added latency of one request with nothing queued anywhere;
 * - Node's global `fetch` through `setGlobalDispatcher` (the previous global dispatcher is put
 *   back afterwards), 50 in flight: a bare Agent, then the composed one;
 * - 100k `request()` calls at once behind a rate that binds: heap per queued request and the time
 *   to drain them (http-queue.ts).
 *
 * Each figure is measured in rounds: every variant is warmed up, then each round runs one timed
 * sample of every variant in turn (A/B/C/D, A/B/C/D, ...; the first variant of a round rotates, so
 * that none always pays the garbage the one before it left). Rates are the median over rounds,
 * and the ratio is the median of each round's own ratio to the bare Agent, so a burst of load
 * from elsewhere hits both sides of a ratio alike. Latency is timed per request with
 * `process.hrtime.bigint()`, from the call to the end of the body, and p50/p99 are taken over
 * every request of the timed samples. Client CPU per request (`process.cpuUsage()`, this process
 * only) shows the interceptor's cost even when the server, not the client, is the bottleneck.
 *
 * The harness's `opsPerSecondSideBySide` is not used for the rates: its batches are closed (each
 * ends with nothing in flight), which for 50 requests in flight of ~1 ms each drains the pipe
 * every ~5 ms, and its warm-up requests could not be told apart from the timed ones for the
 * latency percentiles. The samples here keep 50 requests in flight until the sample's end.
 *
 * The pass-through interceptor, `(dispatch) => (opts, handler) => dispatch(opts, handler)`, is the
 * floor any interceptor pays on undici 7: `compose` wraps a legacy handler (`request()`'s, Node
 * fetch's) in a `WrapHandler`, and the Agent wraps the new-API handler it is given back in an
 * `UnwrapHandler`, so every response's headers go from raw buffers to an object and back.
 *
 * Target (issue 3): requests/s through the interceptor >= 0.97× the bare Agent's.
 *
 * The fetch wrapper (`rateLimitedFetch` around Node's global fetch on a bare Agent), 50 in flight:
 * the global fetch alone, the wrapper with its own registry, and the wrapper given a registry of
 * yours (`registry`: its close leaves that registry open, so it refuses its own waits itself),
 * and the same with `maxConcurrent` set high (the gate in the path, never full).
 * `npm run bench -- http --only=fetch-wrapper` runs this case alone.
 *
 * Then OpenTelemetry metrics (`adaptive-rate-limit/otel`) on and off, the same interceptor (the
 * default config) in the same rounds: "on" is `enableMetrics` with an SDK MeterProvider whose
 * reader exports every second (to memory), turned on before each of its samples and off before
 * each "off" sample. Target: requests/s with metrics on >= 0.97× with metrics off.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { Agent, type Dispatcher, getGlobalDispatcher, request, setGlobalDispatcher } from 'undici';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { type AdaptiveRateLimitInterceptor, adaptiveRateLimit } from '../src/http/interceptor.js';
import { enableMetrics, type MetricsHandle } from '../src/otel/index.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { formatMicros, formatRate, median, nowMs, printTarget } from './harness.js';
import { queuedDrain } from './http-queue.js';

/** Requests in flight in the throughput cases, and the connections of every Agent. */
const IN_FLIGHT = 50;
/** A rate no loop here can reach (units/min): finite, so the limiter's token bucket is in the path. */
const NEVER_BINDS_PER_MIN = 1e12;
/** Far above {@link IN_FLIGHT}: the p-queue is in the path but never holds a request back. */
const MAX_CONCURRENT = 10_000;
const TARGET_RATIO = 0.97;

const WARMUP_MS = 500;
const SAMPLE_MS = 250;
const ROUNDS = 9;

// ---- the server ------------------------------------------------------------------------------

/**
 * The loopback server, run in a child process rather than in this one. In-process, the server's
 * parsing and writing would share the client's event loop and core: each request would cost
 * client + server CPU on one thread, so the interceptor's added cost would be divided by a larger
 * total and the throughput it loses would look smaller than it is, and the server's callbacks
 * would interleave with the client's and blur the latencies. In a child process the server has
 * its own event loop (and core, on a machine with two or more), so the client's own cost decides
 * the figures; "client CPU/req" counts this process only. The child exits when its stdin closes,
 * so it cannot outlive the bench.
 */
const SERVER_SOURCE = `
const http = require('node:http');
const body = Buffer.from('ok');
const server = http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' });
  res.end(body);
});
server.keepAliveTimeout = 60000;
server.headersTimeout = 61000;
server.listen(0, '127.0.0.1', () => process.stdout.write(server.address().port + '\\n'));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
`;

interface Server {
  readonly origin: string;
  stop(): Promise<void>;
}

export async function startServer(): Promise<Server> {
  const child: ChildProcess = spawn(process.execPath, ['-e', SERVER_SOURCE], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await Promise.race([
    once(lines, 'line'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`the bench server exited with code ${String(code)} before listening`);
    }),
  ])) as [string];
  lines.close();
  const port = Number(line);
  if (!Number.isInteger(port) || port <= 0) throw new Error(`the bench server printed ${line}, not a port`);
  return {
    origin: `http://127.0.0.1:${port}`,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.stdin?.end();
      await exited;
    },
  };
}

// ---- measuring -------------------------------------------------------------------------------

interface Variant {
  readonly label: string;
  /** One request, its body read to the end. */
  readonly send: () => Promise<unknown>;
  /** Runs before each of the variant's samples (the fetch case installs its global dispatcher). */
  readonly before?: () => void;
}

interface Measured {
  readonly label: string;
  /** Requests per second, one per round. */
  readonly rates: number[];
  /** Client CPU µs per request, one per round. */
  readonly cpuPerRequest: number[];
  /** Microseconds of every timed request. */
  latencies: number[];
}

/**
 * Keeps `inFlight` requests of `variant` going for `ms`, then waits for the last to end. Returns
 * the requests done, the elapsed ms and the client CPU µs; pushes each request's latency (µs).
 */
async function runFor(
  variant: Variant,
  inFlight: number,
  ms: number,
  latencies: number[],
): Promise<{ requests: number; elapsedMs: number; cpuUs: number }> {
  variant.before?.();
  let requests = 0;
  const cpu0 = process.cpuUsage();
  const t0 = nowMs();
  const end = t0 + ms;
  const worker = async (): Promise<void> => {
    while (nowMs() < end) {
      const start = process.hrtime.bigint();
      await variant.send();
      latencies.push(Number(process.hrtime.bigint() - start) / 1e3);
      requests++;
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  const elapsedMs = nowMs() - t0;
  const cpu = process.cpuUsage(cpu0);
  return { requests, elapsedMs, cpuUs: cpu.user + cpu.system };
}

/** Warms every variant up, then {@link ROUNDS} interleaved rounds of one sample each. */
async function measure(variants: readonly Variant[], inFlight: number): Promise<Measured[]> {
  const results: Measured[] = variants.map((v) => ({
    label: v.label,
    rates: [],
    cpuPerRequest: [],
    latencies: [],
  }));
  for (const variant of variants) await runFor(variant, inFlight, WARMUP_MS, []);
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < variants.length; k++) {
      const i = (round + k) % variants.length;
      const result = results[i]!;
      const { requests, elapsedMs, cpuUs } = await runFor(
        variants[i]!,
        inFlight,
        SAMPLE_MS,
        result.latencies,
      );
      result.rates.push((requests * 1000) / elapsedMs);
      result.cpuPerRequest.push(cpuUs / requests);
    }
  }
  return results;
}

/** The `p` quantile (0..1) of sorted values: the smallest value with at least `p` of them at or below it. */
function quantile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

interface Summary {
  label: string;
  rate: number;
  /** Median of the rounds' ratios to the reference (the first variant); 1 for the reference itself. */
  ratio: number;
  minRatio: number;
  maxRatio: number;
  /** Median of the rounds' ratios to the pass-through interceptor, when the case has one. */
  ratioToFloor: number | undefined;
  p50: number;
  p99: number;
  cpuPerRequest: number;
}

/** Per-variant figures; ratios are paired by round, to the first variant and to `results[floor]`. */
function summarize(results: readonly Measured[], floor?: number): Summary[] {
  const reference = results[0]!;
  const floorRates = floor === undefined ? undefined : results[floor]!.rates;
  return results.map((r) => {
    const ratios = r.rates.map((rate, i) => rate / reference.rates[i]!);
    const sorted = Float64Array.from(r.latencies).sort();
    return {
      label: r.label,
      rate: median(r.rates),
      ratio: median(ratios),
      minRatio: Math.min(...ratios),
      maxRatio: Math.max(...ratios),
      ratioToFloor: floorRates && median(r.rates.map((rate, i) => rate / floorRates[i]!)),
      p50: quantile(sorted, 0.5),
      p99: quantile(sorted, 0.99),
      cpuPerRequest: median(r.cpuPerRequest),
    };
  });
}

// ---- printing --------------------------------------------------------------------------------

function signedMicros(us: number): string {
  if (!Number.isFinite(us)) return 'n/a';
  return `${us < 0 ? '-' : '+'}${formatMicros(Math.abs(us))}`;
}

/**
 * Prints a table in the harness's style (`printTable`), with this suite's columns: the first
 * column left-aligned, the figures right-aligned.
 */
function printGrid(title: string, header: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const fmt = (line: readonly string[]): string =>
    `| ${line.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  console.log(`\n${title}\n`);
  console.log(fmt(header));
  console.log(`|${widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`);
  for (const row of rows) console.log(fmt(row));
}

/** Prints the table of one case; with `target`, a target line per row of the interceptor. */
function report(title: string, summaries: readonly Summary[], target: boolean): void {
  const reference = summaries[0]!;
  printGrid(
    title,
    ['dispatcher', 'req/s', '× bare', 'p50', 'p99', 'added p50', 'added p99', 'client CPU/req'],
    summaries.map((s, i) => [
      s.label,
      formatRate(s.rate),
      i === 0 ? 'reference' : s.ratio.toFixed(3),
      formatMicros(s.p50),
      formatMicros(s.p99),
      i === 0 ? '' : signedMicros(s.p50 - reference.p50),
      i === 0 ? '' : signedMicros(s.p99 - reference.p99),
      `${formatMicros(s.cpuPerRequest)}${i === 0 ? '' : ` (${signedMicros(s.cpuPerRequest - reference.cpuPerRequest)})`}`,
    ]),
  );
  if (!target) return;
  console.log('');
  for (const s of summaries.slice(1)) {
    if (s.label === PASS_THROUGH) continue;
    const floor = s.ratioToFloor === undefined ? '' : `; ${s.ratioToFloor.toFixed(3)}× ${PASS_THROUGH}`;
    printTarget(
      `${s.label}: req/s >= ${TARGET_RATIO}× bare`,
      s.ratio >= TARGET_RATIO,
      `${s.ratio.toFixed(3)} (median of ${ROUNDS} paired rounds, ${s.minRatio.toFixed(3)}..${s.maxRatio.toFixed(3)}${floor})`,
    );
  }
}

// ---- the cases -------------------------------------------------------------------------------

const PASS_THROUGH = 'pass-through interceptor';

/** An interceptor that does nothing: what `compose` itself costs on undici 7. */
const passThrough: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) =>
  dispatch(opts, handler);

function agent(): Agent {
  return new Agent({ connections: IN_FLIGHT, pipelining: 1 });
}

function viaRequest(label: string, dispatcher: Dispatcher, url: string): Variant {
  return {
    label,
    send: async () => {
      const { body } = await request(url, { dispatcher });
      await body.dump();
    },
  };
}

export async function httpSuite(): Promise<void> {
  const server = await startServer();
  const url = `${server.origin}/`;
  const agents: Agent[] = [];
  const interceptors: AdaptiveRateLimitInterceptor[] = [];
  const composed = (options: Parameters<typeof adaptiveRateLimit>[0]): Dispatcher => {
    const base = agent();
    const interceptor = adaptiveRateLimit(options);
    agents.push(base);
    interceptors.push(interceptor);
    return base.compose(interceptor);
  };
  const bare = (): Agent => {
    const a = agent();
    agents.push(a);
    return a;
  };
  const named = {
    limiters: { api: { origins: [server.origin], initialUnitsPerMinute: NEVER_BINDS_PER_MIN } },
  };
  const withQueue = {
    limiters: { api: { ...named.limiters.api, maxConcurrent: MAX_CONCURRENT } },
  };
  console.log(
    `server: node:http in a child process on ${server.origin}, 200 "ok", keep-alive; ` +
      `${ROUNDS} rounds of ${SAMPLE_MS} ms per variant after ${WARMUP_MS} ms of warm-up`,
  );
  const only = process.argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length);
  if (only !== undefined && only !== 'fetch-wrapper')
    throw new Error(`http --only takes fetch-wrapper, not ${only}`);
  try {
    if (only === 'fetch-wrapper') {
      await fetchWrapperCase(server.origin, bare());
      return;
    }
    const concurrent = summarize(
      await measure(
        [
          viaRequest('bare Agent', bare(), url),
          viaRequest(PASS_THROUGH, bare().compose(passThrough), url),
          viaRequest('default config (limiter per origin, unlimited)', composed({}), url),
          viaRequest('named limiter, finite rate (1e12/min)', composed(named), url),
          viaRequest(`same + maxConcurrent ${MAX_CONCURRENT} (p-queue)`, composed(withQueue), url),
        ],
        IN_FLIGHT,
      ),
      1,
    );
    report(
      `request(), ${IN_FLIGHT} in flight (${IN_FLIGHT} connections, pipelining 1), limits never bind`,
      concurrent,
      true,
    );

    const sequential = summarize(
      await measure(
        [
          viaRequest('bare Agent', bare(), url),
          viaRequest(PASS_THROUGH, bare().compose(passThrough), url),
          viaRequest('default config (limiter per origin, unlimited)', composed({}), url),
        ],
        1,
      ),
      1,
    );
    report('request(), 1 in flight: the added latency with nothing queued', sequential, false);

    const previous = getGlobalDispatcher();
    try {
      const bareGlobal = bare();
      const composedGlobal = composed({});
      const viaFetch = (label: string, dispatcher: Dispatcher): Variant => ({
        label,
        before: () => setGlobalDispatcher(dispatcher),
        send: async () => (await fetch(url)).arrayBuffer(),
      });
      const fetched = summarize(
        await measure(
          [
            viaFetch('global fetch, bare Agent', bareGlobal),
            viaFetch('global fetch, default config', composedGlobal),
          ],
          IN_FLIGHT,
        ),
      );
      report(`Node's global fetch via setGlobalDispatcher, ${IN_FLIGHT} in flight`, fetched, true);
    } finally {
      setGlobalDispatcher(previous);
    }

    await fetchWrapperCase(server.origin, bare());

    await queuedDrain(server.origin);

    await metricsCase(url, composed({}));
  } finally {
    for (const interceptor of interceptors) interceptor.close();
    await Promise.all(agents.map((a) => a.close()));
    await server.stop();
  }
}

/** The fetch wrapper around Node's global fetch (see the module comment), 50 in flight. */
async function fetchWrapperCase(origin: string, dispatcher: Agent): Promise<void> {
  const url = `${origin}/`;
  const previous = getGlobalDispatcher();
  const config = { limiters: { api: { origins: [origin], initialUnitsPerMinute: NEVER_BINDS_PER_MIN } } };
  const registry = new RateLimiterRegistry(config);
  const own = rateLimitedFetch(config);
  const passed = rateLimitedFetch({ registry });
  const gated = new RateLimiterRegistry({
    limiters: { api: { ...config.limiters.api, maxConcurrent: MAX_CONCURRENT } },
  });
  const passedGated = rateLimitedFetch({ registry: gated });
  const via = (label: string, f: typeof fetch): Variant => ({
    label,
    send: async () => (await f(url)).arrayBuffer(),
  });
  setGlobalDispatcher(dispatcher);
  try {
    const fetched = summarize(
      await measure(
        [
          via('global fetch, bare Agent', (input, init) => fetch(input, init)),
          via('rateLimitedFetch, its own registry', own),
          via('rateLimitedFetch, a registry passed in', passed),
          via(`same + maxConcurrent ${MAX_CONCURRENT} (p-queue)`, passedGated),
        ],
        IN_FLIGHT,
      ),
    );
    report(`rateLimitedFetch around Node's global fetch, ${IN_FLIGHT} in flight`, fetched, true);
  } finally {
    setGlobalDispatcher(previous);
    own.close();
    passed.close();
    passedGated.close();
    registry.close();
    gated.close();
  }
}

/** Metrics on vs off through one interceptor (see the module comment); prints its target line. */
async function metricsCase(url: string, dispatcher: Dispatcher): Promise<void> {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 1_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  let metrics: MetricsHandle | undefined;
  const off: Variant = {
    ...viaRequest('default config, metrics off', dispatcher, url),
    before: () => {
      metrics?.disable();
      metrics = undefined;
      exporter.reset();
    },
  };
  const on: Variant = {
    ...viaRequest('default config, metrics on (SDK, export every 1 s)', dispatcher, url),
    before: () => {
      metrics ??= enableMetrics({ meterProvider });
    },
  };
  const load = loadavg().map((l) => l.toFixed(1));
  try {
    const summaries = summarize(await measure([off, on], IN_FLIGHT));
    report(
      `OpenTelemetry metrics on vs off, request(), ${IN_FLIGHT} in flight (load average before: ${load.join(', ')})`,
      summaries,
      false,
    );
    const s = summaries[1]!;
    console.log('');
    printTarget(
      `metrics on: req/s >= ${TARGET_RATIO}× metrics off`,
      s.ratio >= TARGET_RATIO,
      `${s.ratio.toFixed(3)} (median of ${ROUNDS} paired rounds, ${s.minRatio.toFixed(3)}..${s.maxRatio.toFixed(3)})`,
    );
  } finally {
    metrics?.disable();
    await meterProvider.shutdown();
  }
}
