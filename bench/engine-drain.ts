/**
 * The `engine` suite's drain: 10k, 100k and 1M waiters queued behind a rate that binds (100
 * units/s in every library), drained on fake time: ours on a ManualClock, the peers under
 * node:test's mocked timers, Date and performance.now(), all driven by the same loop. No real
 * waiting anywhere. Each caller holds the library's promise and one `then`, nothing else.
 *
 * Per library and size: wall and CPU time per waiter (enqueue, drain, resolve), the share of the
 * wall time spent in GC pauses, and the heap per queued waiter (V8 heap + array buffers after a
 * full GC with every waiter queued, over the heap before, in a run of its own). A floor row, bare
 * promises resolved in order by the same loop, shows what a promise per waiter costs with no
 * limiter at all: the GC time of a long queue is mostly the caller's promises.
 *
 * Targets (issue text): per-waiter wall time 100k / 10k <= 1.3x and 1M / 10k <= 1.5x, GC <= 40 %
 * of the 100k drain's wall time, <= 500 B of heap per queued waiter at 100k.
 */
import { mock } from 'node:test';
import { setImmediate as nextMacrotask } from 'node:timers/promises';
import Bottleneck from 'bottleneck';
import { RateLimiter } from 'limiter';
import PQueue from 'p-queue';
import pThrottle from 'p-throttle';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import {
  formatBytes,
  formatMicros,
  heldBytes,
  nowMs,
  printTable,
  printTarget,
  type Row,
  type Timing,
  timeWithGc,
  versus,
} from './harness.js';

/** The binding rate: 100 units/s in every library. */
const PER_SECOND = 100;
const noop = (): undefined => undefined;
const noopAsync = async (): Promise<undefined> => undefined;

const SIZES = [10_000, 100_000, 1_000_000] as const;
const TARGET_100K = 1.3;
const TARGET_1M = 1.5;
const TARGET_GC_SHARE = 0.4;
const TARGET_HEAP_BYTES = 500;

/**
 * Moves fake time in steps of one second (100 grants at 100 units/s) and lets the promise
 * callbacks of each step run (one macrotask hop), until `done()`. Every library is driven the
 * same way, ours included, so the hops cost all of them alike.
 */
async function drive(advance: (ms: number) => void, done: () => boolean, waiters: number): Promise<void> {
  // A guard only: bottleneck needs two steps per job (it yields to setTimeout(0) between jobs).
  const maxSteps = waiters * 4 + 100;
  for (let step = 0; !done(); step++) {
    if (step > maxSteps) throw new Error(`drain did not finish in ${maxSteps} steps of fake time`);
    advance(1000);
    await nextMacrotask();
  }
}

/**
 * Runs `body` with `setTimeout`, `setInterval`, `Date` and `performance.now()` faked, so the
 * peers, which read the global clocks, drain without real waiting. `setImmediate` stays real:
 * {@link drive} uses it to let promise callbacks run. The harness times with hrtime, never faked.
 */
async function withFakeTime(body: (advance: (ms: number) => void) => Promise<void>): Promise<void> {
  mock.timers.enable({ apis: ['setTimeout', 'setInterval', 'Date'], now: 0 });
  const perfNow = mock.method(performance, 'now', () => Date.now());
  try {
    await body((ms) => mock.timers.tick(ms));
  } finally {
    perfNow.mock.restore();
    mock.timers.reset();
  }
}

/** Called once every waiter is queued (the heap run measures there); nothing in a timed run. */
type Probe = (() => void) | undefined;

/** Enqueues `n` calls, drives fake time until all resolved; throws if any rejected. */
async function drainAll(
  n: number,
  enqueue: () => Promise<unknown>,
  advance: (ms: number) => void,
  probe: Probe,
): Promise<void> {
  let settled = 0;
  let failure: unknown;
  const onResolve = (): void => {
    settled++;
  };
  const onReject = (error: unknown): void => {
    settled++;
    failure ??= error;
  };
  for (let i = 0; i < n; i++) enqueue().then(onResolve, onReject);
  probe?.();
  await drive(advance, () => settled === n, n);
  if (failure !== undefined) throw failure;
}

type Drain = (n: number, probe: Probe) => Promise<void>;

const FLOOR = '(floor) bare promises';

const drains: { library: string; drain: Drain; note: string }[] = [
  {
    library: 'ours',
    note: 'ManualClock; one timer per waiter',
    drain: async (n, probe) => {
      const clock = new ManualClock();
      const limiter = new AdaptiveRateLimiter({
        clock,
        initialUnitsPerMinute: PER_SECOND * 60,
        queueLimit: n,
        maxWait: 1e12,
      });
      // Like the peers: the waiter's promise and one callback, no feedback, nothing kept.
      await drainAll(
        n,
        () => limiter.acquire(),
        (ms) => clock.advance(ms),
        probe,
      );
      limiter.close();
    },
  },
  {
    library: FLOOR,
    note: 'no limiter: new Promise, its resolve kept in an array, 100 resolved per step',
    drain: async (n, probe) => {
      const resolvers: (((value: unknown) => void) | undefined)[] = [];
      const keep = (resolve: (value: unknown) => void): void => {
        resolvers.push(resolve);
      };
      let next = 0;
      // A fresh object for each, as a limiter's permit.
      const advance = (ms: number): void => {
        for (const end = Math.min(n, next + (ms * PER_SECOND) / 1000); next < end; next++) {
          const resolve = resolvers[next];
          resolvers[next] = undefined;
          resolve?.({ units: 1 });
        }
      };
      await drainAll(n, () => new Promise(keep), advance, probe);
    },
  },
  {
    library: 'p-throttle',
    note: 'mocked timers; one timer per waiter',
    drain: (n, probe) =>
      withFakeTime(async (advance) => {
        const throttled = pThrottle({ limit: PER_SECOND, interval: 1000 })(noop);
        // p-throttle's types say a throttled function returns what the function does; it returns a promise.
        await drainAll(n, () => throttled() as unknown as Promise<undefined>, advance, probe);
      }),
  },
  {
    library: 'limiter RateLimiter',
    note: 'mocked timers and performance.now(); removeTokens(1)',
    drain: (n, probe) =>
      withFakeTime(async (advance) => {
        const limiter = new RateLimiter({ tokensPerInterval: PER_SECOND, interval: 'second' });
        await drainAll(n, () => limiter.removeTokens(1), advance, probe);
      }),
  },
  {
    library: 'p-queue',
    note: 'mocked timers; intervalCap 100 per 1 s',
    drain: (n, probe) =>
      withFakeTime(async (advance) => {
        const queue = new PQueue({ intervalCap: PER_SECOND, interval: 1000 });
        await drainAll(n, () => queue.add(noop), advance, probe);
      }),
  },
  {
    library: 'bottleneck',
    note: 'mocked timers; minTime 10 ms; 2 macrotask hops per job (setTimeout(0) yields)',
    drain: (n, probe) =>
      withFakeTime(async (advance) => {
        const bottleneck = new Bottleneck({ minTime: 1000 / PER_SECOND });
        await drainAll(n, () => bottleneck.schedule(noopAsync), advance, probe);
      }),
  },
];

/** Wall-clock budget for timing one library at one size (ms); a slow library is timed fewer times. */
const DRAIN_BUDGET_MS = 2_000;
/**
 * Warm-up before a library's first drain: this many waiters, or {@link DRAIN_WARMUP_MS}, whichever
 * comes first. A single 10k drain leaves the code half-optimised (the next runs are up to 10× faster).
 */
const DRAIN_WARMUP_WAITERS = 100_000;
const DRAIN_WARMUP_MS = 1_000;
/**
 * A library whose run at a size, projected from its run at the size below (per-waiter time times
 * the waiters), would take longer than this (ms) is skipped at that size and above.
 */
const CUTOFF_MS = [Number.POSITIVE_INFINITY, 5_000, 20_000] as const;

interface DrainFigure {
  /** Wall time per waiter (µs); `NaN` when skipped. */
  us: number;
  /** CPU time per waiter (µs), of the same run. */
  cpuUs: number;
  /** Wall time per waiter outside main-thread GC pauses (µs): the library's own work. */
  exGcUs: number;
  /** Share of the wall time spent in GC (0..1). */
  gcShare: number;
  /** Heap per queued waiter (bytes), from a run of its own. */
  heapBytes: number;
  /** Timed runs (the median is reported). */
  runs: number;
  skipped?: string;
}

const skippedFigure = (why: string): DrainFigure => ({
  us: Number.NaN,
  cpuUs: Number.NaN,
  exGcUs: Number.NaN,
  gcShare: Number.NaN,
  heapBytes: Number.NaN,
  runs: 0,
  skipped: why,
});

async function warmUpDrain(drain: Drain, n: number): Promise<Timing> {
  const until = nowMs() + DRAIN_WARMUP_MS;
  let last: Timing;
  let waiters = 0;
  do {
    last = await timeWithGc(() => drain(n, undefined));
    waiters += n;
  } while (waiters < DRAIN_WARMUP_WAITERS && nowMs() < until);
  return last;
}

/** Heap per queued waiter: a run of its own, measured once all `n` are queued. */
async function heapPerWaiter(drain: Drain, n: number): Promise<number> {
  const before = heldBytes();
  let perWaiter = Number.NaN;
  await drain(n, () => {
    perWaiter = (heldBytes() - before) / n;
  });
  return perWaiter;
}

/**
 * Median of up to 9 runs within {@link DRAIN_BUDGET_MS} (at least one). `warm` is the last
 * warm-up run; when it took the whole budget it is the one run. Then the heap run.
 */
async function timeDrain(drain: Drain, n: number, warm: Timing | undefined): Promise<DrainFigure> {
  const estimate = warm ?? (await timeWithGc(() => drain(n, undefined)));
  const runs = Math.max(1, Math.min(9, Math.floor(DRAIN_BUDGET_MS / Math.max(estimate.ms, 1))));
  const timings: Timing[] = estimate.ms >= DRAIN_BUDGET_MS ? [estimate] : [];
  while (timings.length < runs) timings.push(await timeWithGc(() => drain(n, undefined)));
  timings.sort((a, b) => a.ms - b.ms);
  const mid = timings[timings.length >> 1] ?? estimate;
  return {
    us: (mid.ms * 1000) / n,
    cpuUs: (mid.cpuMs * 1000) / n,
    exGcUs: ((mid.ms - mid.gcMs) * 1000) / n,
    gcShare: mid.gcMs / mid.ms,
    heapBytes: await heapPerWaiter(drain, n),
    runs: timings.length,
  };
}

const label = (n: number): string => (n >= 1e6 ? `${n / 1e6}M` : `${n / 1000}k`);
const percent = (share: number): string => (Number.isFinite(share) ? `${(share * 100).toFixed(0)} %` : 'n/a');
const times = (ratio: number): string => (Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : 'n/a');

/**
 * The rows asked for with `--drain=ours,floor,p-throttle` (words of the library names: `ours`,
 * `floor`, `p-throttle`, `limiter`, `p-queue`, `bottleneck`), every row without it: on a shared
 * machine, time only the rows you need.
 */
function selectedDrains(): typeof drains {
  const arg = process.argv.find((a) => a.startsWith('--drain='));
  if (arg === undefined) return drains;
  const words = arg.slice('--drain='.length).split(',');
  return drains.filter(({ library }) => words.some((word) => library.split(/[\s()]+/).includes(word)));
}

export async function drain(): Promise<void> {
  const figures = new Map<string, DrainFigure[]>();
  const drains = selectedDrains();
  for (const { library, drain } of drains) {
    const row: DrainFigure[] = [];
    for (const [s, n] of SIZES.entries()) {
      const below = row[s - 1];
      if (below?.skipped !== undefined) {
        row.push(skippedFigure(`skipped (skipped at ${label(SIZES[s - 1]!)})`));
        continue;
      }
      const projectedMs = below === undefined ? 0 : (below.us * n) / 1000;
      if (projectedMs > CUTOFF_MS[s]!) {
        row.push(skippedFigure(`skipped: would take ~${(projectedMs / 1000).toFixed(0)} s a run`));
        continue;
      }
      const warm = s === 0 ? await warmUpDrain(drain, n) : undefined;
      row.push(await timeDrain(drain, n, warm));
    }
    figures.set(library, row);
  }

  const oursRow = figures.get('ours') ?? [];
  for (const [s, n] of SIZES.entries()) {
    const ours = oursRow[s]?.us ?? Number.NaN;
    const rows = drains.map(({ library, note }, i): Row => {
      const f = figures.get(library)?.[s];
      const detail =
        f === undefined || f.skipped !== undefined
          ? (f?.skipped ?? '')
          : `CPU ${formatMicros(f.cpuUs)}, GC ${percent(f.gcShare)} of wall, heap ${formatBytes(f.heapBytes)} per queued waiter, ${f.runs} run${f.runs === 1 ? '' : 's'}; ${note}`;
      return {
        library,
        figure: formatMicros(f?.us ?? Number.NaN),
        vsOurs: i === 0 ? 'reference' : versus(ours, f?.us ?? Number.NaN, false),
        note: detail,
      };
    });
    printTable(
      `Drain ${label(n)} waiters at ${PER_SECOND} units/s: wall time per waiter to enqueue, drain, resolve`,
      rows,
    );
  }

  const ratioOf = (
    f: readonly DrainFigure[] | undefined,
    s: number,
    key: 'us' | 'cpuUs' | 'exGcUs',
  ): number => (f?.[s]?.[key] ?? Number.NaN) / (f?.[0]?.[key] ?? Number.NaN);
  const oursRatio = ratioOf(oursRow, 1, 'us');
  printTable(
    'Drain growth: wall time per waiter at 100k ÷ at 10k (1.00× = linear), and at 1M ÷ at 10k',
    drains.map(({ library }, i): Row => {
      const f = figures.get(library);
      return {
        library,
        figure: times(ratioOf(f, 1, 'us')),
        vsOurs: i === 0 ? 'reference' : versus(oursRatio, ratioOf(f, 1, 'us'), false),
        note:
          `1M: ${times(ratioOf(f, 2, 'us'))}; CPU ${times(ratioOf(f, 1, 'cpuUs'))} / ${times(ratioOf(f, 2, 'cpuUs'))}; ` +
          `outside GC pauses ${times(ratioOf(f, 1, 'exGcUs'))} / ${times(ratioOf(f, 2, 'exGcUs'))}`,
      };
    }),
  );
  const oursHeap = oursRow[1]?.heapBytes ?? Number.NaN;
  printTable(
    'Drain: heap per queued waiter at 100k (with its promise and one then), and GC share at 10k / 100k / 1M',
    drains.map(({ library }, i): Row => {
      const f = figures.get(library) ?? [];
      return {
        library,
        figure: formatBytes(f[1]?.heapBytes ?? Number.NaN),
        vsOurs: i === 0 ? 'reference' : versus(oursHeap, f[1]?.heapBytes ?? Number.NaN, false),
        note:
          `heap ${SIZES.map((n, s) => `${label(n)} ${formatBytes(f[s]?.heapBytes ?? Number.NaN)}`).join(', ')}; ` +
          `GC ${SIZES.map((n, s) => `${label(n)} ${percent(f[s]?.gcShare ?? Number.NaN)}`).join(', ')}`,
      };
    }),
  );

  const at = (s: number): string => formatMicros(oursRow[s]?.us ?? Number.NaN);
  printTarget(
    `drain 100k / 10k <= ${TARGET_100K}×`,
    oursRatio <= TARGET_100K,
    `${at(0)} per waiter at 10k, ${at(1)} at 100k: ${times(oursRatio)} wall, ${times(ratioOf(oursRow, 1, 'cpuUs'))} CPU, ${times(ratioOf(oursRow, 1, 'exGcUs'))} outside GC`,
  );
  const ratio1M = ratioOf(oursRow, 2, 'us');
  printTarget(
    `drain 1M / 10k <= ${TARGET_1M}×`,
    ratio1M <= TARGET_1M,
    `${at(2)} per waiter at 1M: ${times(ratio1M)} wall, ${times(ratioOf(oursRow, 2, 'cpuUs'))} CPU, ${times(ratioOf(oursRow, 2, 'exGcUs'))} outside GC`,
  );
  const gc100k = oursRow[1]?.gcShare ?? Number.NaN;
  const floorGc = figures.get(FLOOR)?.[1]?.gcShare ?? Number.NaN;
  printTarget(
    `GC <= ${percent(TARGET_GC_SHARE)} of the 100k drain`,
    gc100k <= TARGET_GC_SHARE,
    `${percent(gc100k)} (bare promises, no limiter: ${percent(floorGc)})`,
  );
  printTarget(
    `<= ${TARGET_HEAP_BYTES} B per queued waiter at 100k`,
    oursHeap <= TARGET_HEAP_BYTES,
    `${formatBytes(oursHeap)} (bare promises: ${formatBytes(figures.get(FLOOR)?.[1]?.heapBytes ?? Number.NaN)})`,
  );
}
