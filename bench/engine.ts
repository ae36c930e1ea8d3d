/**
 * Suite `engine`: the limiter's own cost, side by side with p-throttle, limiter, p-queue and
 * bottleneck in the same run.
 *
 * - memory: heap per idle limiter over 10k limiters (measured first, on a clean heap);
 * - uncontended sync: `tryAcquire()` + `success()` with a limit that never binds;
 * - uncontended async: `await acquire()` + `success()`, same; a bare `await` gives the floor;
 * - drain: 10k, 100k and 1M waiters queued behind a rate that binds, drained on fake time: time,
 *   GC share and heap per queued waiter (engine-drain.ts).
 *
 * Targets (issue text, 2-core machine): >= 3M sync and >= 1M async cycles/s, >= 5x p-throttle's
 * async rate, <= 1 KiB per idle limiter; the drain's targets are in engine-drain.ts. Uncontended
 * rates are interleaved sample by sample (see `opsPerSecondSideBySide`), so a burst of load on a
 * shared machine hits every library of a round alike.
 */
import Bottleneck from 'bottleneck';
import { RateLimiter, TokenBucket } from 'limiter';
import PQueue from 'p-queue';
import pThrottle from 'p-throttle';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { drain } from './engine-drain.js';
import {
  type Batch,
  formatBytes,
  formatRate,
  hasGc,
  heapBytesPerObject,
  nowMs,
  opsPerSecondSideBySide,
  printTable,
  printTarget,
  type Row,
  stopGcTime,
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
