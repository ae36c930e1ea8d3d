/**
 * Suite `engine`: the limiter's own cost, side by side with p-throttle, limiter, p-queue and
 * bottleneck in the same run.
 *
 * - memory: heap per idle limiter over 10k limiters (measured first, on a clean heap);
 * - uncontended sync: `tryAcquire()` + `success()` with a limit that never binds;
 * - uncontended async: `await acquire()` + `success()`, same; a bare `await` gives the floor;
 * - drain: 10k and 100k waiters queued behind a rate that binds (100 units/s in every library),
 *   drained on fake time: ours on a ManualClock, the peers under node:test's mocked timers, Date
 *   and performance.now(), all driven by the same loop. No real waiting anywhere.
 *
 * Targets (issue text, 2-core machine): >= 3M sync and >= 1M async cycles/s, >= 5x p-throttle's
 * async rate, draining linear in the number of waiters, <= 1 KiB per idle limiter. Uncontended
 * rates are interleaved sample by sample (see `opsPerSecondSideBySide`), so a burst of load on a
 * shared machine hits every library of a round alike.
 */
import { mock } from 'node:test';
import { setImmediate as nextMacrotask } from 'node:timers/promises';
import Bottleneck from 'bottleneck';
import { RateLimiter, TokenBucket } from 'limiter';
import PQueue from 'p-queue';
import pThrottle from 'p-throttle';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import {
  type Batch,
  formatBytes,
  formatMicros,
  formatRate,
  hasGc,
  heapBytesPerObject,
  nowMs,
  opsPerSecondSideBySide,
  printTable,
  printTarget,
  type Row,
  stopGcTime,
  type Timing,
  timeWithGc,
  versus,
} from './harness.js';

/** A rate no benchmark loop can reach: 1e15 units/min. */
const NEVER_BINDS_PER_MIN = 1e15;
/** The binding rate of the drain and memory cases: 100 units/s in every library. */
const PER_SECOND = 100;
const noop = (): undefined => undefined;
const noopAsync = async (): Promise<undefined> => undefined;

const TARGET_SYNC = 3e6;
const TARGET_ASYNC = 1e6;
const TARGET_VS_P_THROTTLE = 5;
const TARGET_BYTES = 1024;
/** Per-waiter drain cost at 100k may exceed 10k's by this factor and still count as linear. */
const LINEAR_SLACK = 1.5;

interface Case {
  library: string;
  /** `undefined`: the library has no such path; `note` says why. */
  batch: Batch | undefined;
  note?: string;
}

export async function run(): Promise<void> {
  // Memory first, while no library has run yet: the heap and the object shapes are at their cleanest.
  const sections: [string, () => unknown][] = [
    ['memory', memory],
    ['sync', uncontendedSync],
    ['async', uncontendedAsync],
    ['drain', drain],
  ];
  const took: string[] = [];
  for (const [name, section] of sections) {
    const start = nowMs();
    await section();
    took.push(`${name} ${((nowMs() - start) / 1000).toFixed(1)} s`);
  }
  stopGcTime();
  console.log(`\nsections: ${took.join(', ')}`);
}

// ---- uncontended -------------------------------------------------------------------------------

function oursSync(options: ConstructorParameters<typeof AdaptiveRateLimiter>[0]): Batch {
  const limiter = new AdaptiveRateLimiter(options);
  return (n) => {
    for (let i = 0; i < n; i++) {
      const permit = limiter.tryAcquire();
      if (permit === undefined) throw new Error('tryAcquire refused: the limit bound');
      permit.success();
    }
  };
}

function oursAsync(options: ConstructorParameters<typeof AdaptiveRateLimiter>[0]): Batch {
  const limiter = new AdaptiveRateLimiter(options);
  return async (n) => {
    for (let i = 0; i < n; i++) {
      const permit = await limiter.acquire();
      permit.success();
    }
  };
}

/** Rates of the cases that have a batch, measured side by side; `undefined` for the others. */
async function measureCases(cases: readonly Case[]): Promise<(number | undefined)[]> {
  const measured = cases.filter((c): c is Case & { batch: Batch } => c.batch !== undefined);
  const rates = await opsPerSecondSideBySide(measured.map((c) => c.batch));
  return cases.map((c) => {
    const i = measured.indexOf(c as Case & { batch: Batch });
    return i === -1 ? undefined : rates[i];
  });
}

function rateRows(cases: readonly Case[], rates: readonly (number | undefined)[], reference: number): Row[] {
  return cases.map((c, i) => {
    const rate = rates[i];
    return {
      library: c.library,
      figure: rate === undefined ? 'n/a' : formatRate(rate),
      vsOurs: rate === undefined || i === 0 ? (i === 0 ? 'reference' : 'n/a') : versus(reference, rate, true),
      note: c.note ?? '',
    };
  });
}

async function uncontendedSync(): Promise<void> {
  const bucket = new TokenBucket({
    bucketSize: NEVER_BINDS_PER_MIN,
    tokensPerInterval: NEVER_BINDS_PER_MIN,
    interval: 'minute',
  });
  bucket.content = NEVER_BINDS_PER_MIN;
  const rateLimiter = new RateLimiter({ tokensPerInterval: NEVER_BINDS_PER_MIN, interval: 'minute' });
  const cases: Case[] = [
    { library: 'ours (finite rate)', batch: oursSync({ initialUnitsPerMinute: NEVER_BINDS_PER_MIN }) },
    { library: 'ours (unlimited)', batch: oursSync({}) },
    {
      library: 'limiter TokenBucket',
      note: 'tryRemoveTokens(1); no permit, no feedback',
      batch: (n) => {
        for (let i = 0; i < n; i++) if (!bucket.tryRemoveTokens(1)) throw new Error('limiter refused');
      },
    },
    {
      library: 'limiter RateLimiter',
      note: 'tryRemoveTokens(1); no permit, no feedback',
      batch: (n) => {
        for (let i = 0; i < n; i++) if (!rateLimiter.tryRemoveTokens(1)) throw new Error('limiter refused');
      },
    },
    { library: 'p-throttle', batch: undefined, note: 'no synchronous path' },
    { library: 'p-queue', batch: undefined, note: 'no synchronous path' },
    { library: 'bottleneck', batch: undefined, note: 'no synchronous path' },
  ];
  const rates = await measureCases(cases);
  const ours = rates[0] ?? Number.NaN;
  printTable(
    'Uncontended sync: tryAcquire() + success() per second (limit never binds)',
    rateRows(cases, rates, ours),
  );
  for (const i of [0, 1]) {
    const rate = rates[i] ?? Number.NaN;
    printTarget(
      `sync >= ${formatRate(TARGET_SYNC)}`,
      rate >= TARGET_SYNC,
      `${cases[i]?.library} ${formatRate(rate)}`,
    );
  }
}

async function uncontendedAsync(): Promise<void> {
  const throttled = pThrottle({ limit: 1e9, interval: 1000 })(noop);
  const rateLimiter = new RateLimiter({ tokensPerInterval: NEVER_BINDS_PER_MIN, interval: 'minute' });
  const queue = new PQueue({ intervalCap: 1e9, interval: 1000 });
  const bottleneck = new Bottleneck();
  const cases: Case[] = [
    { library: 'ours (finite rate)', batch: oursAsync({ initialUnitsPerMinute: NEVER_BINDS_PER_MIN }) },
    { library: 'ours (unlimited)', batch: oursAsync({}) },
    {
      library: '(floor) await Promise.resolve()',
      note: 'no limiter: the cost of one await, for scale',
      batch: async (n) => {
        for (let i = 0; i < n; i++) await Promise.resolve(noop);
      },
    },
    {
      library: 'p-throttle',
      note: 'await throttled(); limit 1e9 per s',
      batch: async (n) => {
        for (let i = 0; i < n; i++) await throttled();
      },
    },
    {
      library: 'limiter RateLimiter',
      note: 'await removeTokens(1)',
      batch: async (n) => {
        for (let i = 0; i < n; i++) await rateLimiter.removeTokens(1);
      },
    },
    {
      library: 'p-queue',
      note: 'await add(noop); intervalCap 1e9 per s',
      batch: async (n) => {
        for (let i = 0; i < n; i++) await queue.add(noop);
      },
    },
    {
      library: 'bottleneck',
      note: 'await schedule(noop); defaults, yields to setTimeout(0) per step',
      batch: async (n) => {
        for (let i = 0; i < n; i++) await bottleneck.schedule(noopAsync);
      },
    },
  ];
  const rates = await measureCases(cases);
  await bottleneck.stop();
  const ours = rates[0] ?? Number.NaN;
  printTable(
    'Uncontended async: await acquire() + success() per second (limit never binds)',
    rateRows(cases, rates, ours),
  );
  const pThrottleRate = rates[cases.findIndex((c) => c.library === 'p-throttle')] ?? Number.NaN;
  for (const i of [0, 1]) {
    const rate = rates[i] ?? Number.NaN;
    const name = cases[i]?.library;
    printTarget(`async >= ${formatRate(TARGET_ASYNC)}`, rate >= TARGET_ASYNC, `${name} ${formatRate(rate)}`);
    const ratio = rate / pThrottleRate;
    printTarget(
      `async >= ${TARGET_VS_P_THROTTLE}× p-throttle`,
      ratio >= TARGET_VS_P_THROTTLE,
      `${name} ${ratio.toFixed(1)}× (${formatRate(rate)} vs ${formatRate(pThrottleRate)})`,
    );
  }
}

// ---- drain -----------------------------------------------------------------------------------

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

/** Enqueues `n` calls, drives fake time until all resolved; throws if any rejected. */
async function drainAll(
  n: number,
  enqueue: () => Promise<unknown>,
  advance: (ms: number) => void,
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
  await drive(advance, () => settled === n, n);
  if (failure !== undefined) throw failure;
}

type Drain = (n: number) => Promise<void>;

const drains: { library: string; drain: Drain; note: string }[] = [
  {
    library: 'ours',
    note: 'ManualClock; one timer per waiter',
    drain: async (n) => {
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
      );
      limiter.close();
    },
  },
  {
    library: 'p-throttle',
    note: 'mocked timers; one timer per waiter',
    drain: (n) =>
      withFakeTime(async (advance) => {
        const throttled = pThrottle({ limit: PER_SECOND, interval: 1000 })(noop);
        // p-throttle's types say a throttled function returns what the function does; it returns a promise.
        await drainAll(n, () => throttled() as unknown as Promise<undefined>, advance);
      }),
  },
  {
    library: 'limiter RateLimiter',
    note: 'mocked timers and performance.now(); removeTokens(1)',
    drain: (n) =>
      withFakeTime(async (advance) => {
        const limiter = new RateLimiter({ tokensPerInterval: PER_SECOND, interval: 'second' });
        await drainAll(n, () => limiter.removeTokens(1), advance);
      }),
  },
  {
    library: 'p-queue',
    note: 'mocked timers; intervalCap 100 per 1 s',
    drain: (n) =>
      withFakeTime(async (advance) => {
        const queue = new PQueue({ intervalCap: PER_SECOND, interval: 1000 });
        await drainAll(n, () => queue.add(noop), advance);
      }),
  },
  {
    library: 'bottleneck',
    note: 'mocked timers; minTime 10 ms; 2 macrotask hops per job (setTimeout(0) yields)',
    drain: (n) =>
      withFakeTime(async (advance) => {
        const bottleneck = new Bottleneck({ minTime: 1000 / PER_SECOND });
        await drainAll(n, () => bottleneck.schedule(noopAsync), advance);
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
/** A library whose 100k drain, projected from its 10k drain, would take longer than this (ms) is skipped. */
const DRAIN_100K_CUTOFF_MS = 5_000;

interface DrainFigure {
  /** Wall time per waiter (µs); `NaN` when skipped. */
  us: number;
  /** CPU time per waiter (µs), of the same run. */
  cpuUs: number;
  /** Wall time per waiter outside main-thread GC pauses (µs): the limiter's own work. */
  exGcUs: number;
  /** Share of the wall time spent in GC (0..1). */
  gcShare: number;
  skipped?: string;
}

async function warmUpDrain(drain: Drain, n: number): Promise<Timing> {
  const until = nowMs() + DRAIN_WARMUP_MS;
  let last: Timing;
  let waiters = 0;
  do {
    last = await timeWithGc(() => drain(n));
    waiters += n;
  } while (waiters < DRAIN_WARMUP_WAITERS && nowMs() < until);
  return last;
}

/**
 * Median of up to 5 runs within {@link DRAIN_BUDGET_MS}, each after a full GC. `warm` is the last
 * warm-up run; when it took the whole budget it is the one run.
 */
async function timeDrain(drain: Drain, n: number, warm: Timing | undefined): Promise<DrainFigure> {
  const estimate = warm ?? (await timeWithGc(() => drain(n)));
  const runs = Math.max(1, Math.min(9, Math.floor(DRAIN_BUDGET_MS / Math.max(estimate.ms, 1))));
  const timings: Timing[] = warm !== undefined && estimate.ms >= DRAIN_BUDGET_MS ? [warm] : [];
  while (timings.length < runs) timings.push(await timeWithGc(() => drain(n)));
  timings.sort((a, b) => a.ms - b.ms);
  const mid = timings[timings.length >> 1] ?? estimate;
  return {
    us: (mid.ms * 1000) / n,
    cpuUs: (mid.cpuMs * 1000) / n,
    exGcUs: ((mid.ms - mid.gcMs) * 1000) / n,
    gcShare: mid.gcMs / mid.ms,
  };
}

async function drain(): Promise<void> {
  const sizes = [10_000, 100_000] as const;
  const figures = new Map<string, DrainFigure[]>();
  for (const { library, drain } of drains) {
    const small = await timeDrain(drain, sizes[0], await warmUpDrain(drain, sizes[0]));
    const projectedMs = (small.us * sizes[1]) / 1000;
    const large: DrainFigure =
      projectedMs > DRAIN_100K_CUTOFF_MS
        ? {
            us: Number.NaN,
            cpuUs: Number.NaN,
            exGcUs: Number.NaN,
            gcShare: Number.NaN,
            skipped: `skipped: would take ~${(projectedMs / 1000).toFixed(0)} s a run`,
          }
        : await timeDrain(drain, sizes[1], undefined);
    figures.set(library, [small, large]);
  }
  const oursFigures = figures.get('ours') ?? [];
  sizes.forEach((n, s) => {
    const ours = oursFigures[s]?.us ?? Number.NaN;
    const rows = drains.map(({ library, note }, i): Row => {
      const f = figures.get(library)?.[s];
      const us = f?.us ?? Number.NaN;
      const gc =
        f !== undefined && Number.isFinite(f.gcShare)
          ? `CPU ${formatMicros(f.cpuUs)}, GC ${(f.gcShare * 100).toFixed(0)}% of wall; `
          : '';
      return {
        library,
        figure: formatMicros(us),
        vsOurs: i === 0 ? 'reference' : versus(ours, us, false),
        note: f?.skipped ?? `${gc}${note}`,
      };
    });
    printTable(
      `Drain ${n / 1000}k waiters at ${PER_SECOND} units/s: wall time per waiter to enqueue, drain, resolve`,
      rows,
    );
  });
  const ratioOf = (f: readonly DrainFigure[] | undefined, key: 'us' | 'cpuUs' | 'exGcUs'): number =>
    (f?.[1]?.[key] ?? Number.NaN) / (f?.[0]?.[key] ?? Number.NaN);
  const times = (ratio: number): string => (Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : 'n/a');
  const oursRatio = ratioOf(oursFigures, 'us');
  printTable(
    'Drain linearity: wall time per waiter at 100k ÷ at 10k (1.00× = linear)',
    drains.map(({ library }, i): Row => {
      const f = figures.get(library);
      const ratio = ratioOf(f, 'us');
      return {
        library,
        figure: times(ratio),
        vsOurs: i === 0 ? 'reference' : versus(oursRatio, ratio, false),
        note: `CPU time ${times(ratioOf(f, 'cpuUs'))}, wall outside GC pauses ${times(ratioOf(f, 'exGcUs'))}`,
      };
    }),
  );
  printTarget(
    'drain linear in waiters',
    oursRatio <= LINEAR_SLACK,
    `${formatMicros(oursFigures[0]?.us ?? Number.NaN)} per waiter at 10k, ${formatMicros(oursFigures[1]?.us ?? Number.NaN)} at 100k: ${times(oursRatio)} wall, ${times(ratioOf(oursFigures, 'cpuUs'))} CPU, ${times(ratioOf(oursFigures, 'exGcUs'))} outside GC (limit ${LINEAR_SLACK}× on wall)`,
  );
}

// ---- memory ----------------------------------------------------------------------------------

function memory(): void {
  const count = 10_000;
  if (!hasGc)
    console.log('\nwarning: global.gc is missing (run node with --expose-gc); heap figures are noise');
  const cases: { library: string; make: () => unknown; note: string }[] = [
    {
      library: 'ours (finite rate)',
      make: () => new AdaptiveRateLimiter({ initialUnitsPerMinute: PER_SECOND * 60 }),
      note: 'new AdaptiveRateLimiter({ initialUnitsPerMinute: 6000 })',
    },
    { library: 'ours (unlimited)', make: () => new AdaptiveRateLimiter(), note: 'new AdaptiveRateLimiter()' },
    {
      library: 'p-throttle',
      make: () => pThrottle({ limit: PER_SECOND, interval: 1000 })(noop),
      note: 'a throttled function and its state',
    },
    {
      library: 'limiter RateLimiter',
      make: () => new RateLimiter({ tokensPerInterval: PER_SECOND, interval: 'second' }),
      note: 'new RateLimiter(...)',
    },
    {
      library: 'p-queue',
      make: () => new PQueue({ intervalCap: PER_SECOND, interval: 1000 }),
      note: 'new PQueue({ intervalCap, interval })',
    },
    {
      library: 'bottleneck',
      make: () => new Bottleneck({ minTime: 1000 / PER_SECOND }),
      note: 'new Bottleneck({ minTime })',
    },
  ];
  const bytes = cases.map((c) => heapBytesPerObject(c.make, count));
  const ours = bytes[0] ?? Number.NaN;
  printTable(
    `Memory: heap per idle limiter, over ${count / 1000}k limiters`,
    cases.map((c, i) => ({
      library: c.library,
      figure: formatBytes(bytes[i] ?? Number.NaN),
      vsOurs: i === 0 ? 'reference' : versus(ours, bytes[i] ?? Number.NaN, false),
      note: c.note,
    })),
  );
  for (const i of [0, 1]) {
    const b = bytes[i] ?? Number.NaN;
    printTarget(
      `<= ${formatBytes(TARGET_BYTES)} per idle limiter`,
      b <= TARGET_BYTES,
      `${cases[i]?.library} ${formatBytes(b)}`,
    );
  }
}
