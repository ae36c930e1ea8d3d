/**
 * The bench harness: a monotonic timer, rates measured side by side in timed samples after a
 * warm-up (median of the samples), one-shot timings with their CPU and GC time, heap per object,
 * and table printing.
 * Timing reads `process.hrtime.bigint()` only, because some suites fake `Date` and
 * `performance.now()` for the libraries they measure.
 */
import { PerformanceObserver } from 'node:perf_hooks';

/** Milliseconds on the process's monotonic clock; never faked by a suite. */
export function nowMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export interface RateOptions {
  /** Time spent warming up (ms) before the first sample; the batch size is found meanwhile. @default 200 */
  warmupMs?: number;
  /** Length of one sample (ms). @default 200 */
  sampleMs?: number;
  /** Samples taken; the median is reported. @default 5 */
  samples?: number;
}

/** A batch runs `n` operations, synchronously or not. */
export type Batch = (n: number) => unknown;

/** A batch should take about this long (ms), so the harness's own cost is noise. */
const TARGET_BATCH_MS = 5;

/** Warms `batch` up for `warmupMs` while doubling its size until one batch takes {@link TARGET_BATCH_MS}. */
async function warmUp(batch: Batch, warmupMs: number): Promise<number> {
  let n = 1;
  const warmupEnd = nowMs() + warmupMs;
  while (nowMs() < warmupEnd) {
    const t0 = nowMs();
    await batch(n);
    if (nowMs() - t0 < TARGET_BATCH_MS && n < 1 << 24) n *= 2;
  }
  return n;
}

/** One timed sample: batches of `n` for at least `sampleMs`; returns operations per second. */
async function sample(batch: Batch, n: number, sampleMs: number): Promise<number> {
  let ops = 0;
  const t0 = nowMs();
  let elapsed = 0;
  while (elapsed < sampleMs) {
    await batch(n);
    ops += n;
    elapsed = nowMs() - t0;
  }
  return (ops * 1000) / elapsed;
}

/** Operations per second of one batch: warm-up, then the median of `samples` timed samples. */
export async function opsPerSecond(batch: Batch, options: RateOptions = {}): Promise<number> {
  const [rate = Number.NaN] = await opsPerSecondSideBySide([batch], options);
  return rate;
}

/**
 * Operations per second of each batch, side by side: every batch is warmed up (and its size
 * found), then `samples` rounds take one timed sample of each batch in turn; each figure is the
 * median of its samples. Interleaving puts a burst of load from other processes on every library
 * of a round alike, rather than on whichever ran during the burst.
 */
export async function opsPerSecondSideBySide(
  batches: readonly Batch[],
  options: RateOptions = {},
): Promise<number[]> {
  const { warmupMs = 200, sampleMs = 200, samples = 5 } = options;
  const sizes: number[] = [];
  for (const batch of batches) sizes.push(await warmUp(batch, warmupMs));
  const rates: number[][] = batches.map(() => []);
  for (let s = 0; s < samples; s++) {
    for (const [i, batch] of batches.entries()) rates[i]?.push(await sample(batch, sizes[i] ?? 1, sampleMs));
  }
  return rates.map(median);
}

type Gc = () => void;

function gcFunction(): Gc | undefined {
  const gc = (globalThis as { gc?: unknown }).gc;
  return typeof gc === 'function' ? (gc as Gc) : undefined;
}

export const hasGc = gcFunction() !== undefined;

/** Runs a full GC when `--expose-gc` is on; a no-op otherwise. */
function collect(): void {
  const gc = gcFunction();
  if (gc === undefined) return;
  gc();
  gc();
}

/**
 * Bytes the process holds after a full GC: the V8 heap plus the backing stores of array buffers
 * (typed arrays live outside the heap). Without `--expose-gc` the figure includes garbage.
 */
export function heldBytes(): number {
  collect();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

/**
 * Heap bytes per object: `count` objects from `make` held in an array, `heapUsed` after a full
 * GC minus before it. Median of `runs` runs. Without `--expose-gc` the figure is noise.
 */
export function heapBytesPerObject(make: (i: number) => unknown, count: number, runs = 3): number {
  const perObject: number[] = [];
  for (let r = 0; r < runs; r++) {
    const held: unknown[] = new Array(count);
    collect();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < count; i++) held[i] = make(i);
    collect();
    const after = process.memoryUsage().heapUsed;
    perObject.push((after - before) / count);
    // Keep `held` alive until `after` is read.
    if (held.length !== count) throw new Error('unreachable');
  }
  collect();
  return median(perObject);
}

let gcTotalMs = 0;
let gcObserver: PerformanceObserver | undefined;

/** Lets pending macrotasks run, among them the delivery of GC performance entries. */
export async function settle(): Promise<void> {
  for (let i = 0; i < 2; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/**
 * Milliseconds the process has spent in GC since the first call, from `gc` performance entries.
 * Entries arrive a macrotask late: {@link settle} before reading.
 */
export function gcTimeMs(): number {
  if (gcObserver === undefined) {
    gcObserver = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) gcTotalMs += entry.duration;
    });
    gcObserver.observe({ entryTypes: ['gc'] });
  }
  return gcTotalMs;
}

/** Stops counting GC time, so the process can exit. */
export function stopGcTime(): void {
  gcObserver?.disconnect();
  gcObserver = undefined;
}

export interface Timing {
  /** Wall time (ms). */
  ms: number;
  /** CPU time of the process, every thread (ms): less disturbed than wall time by other processes. */
  cpuMs: number;
  /** Main-thread GC pauses within the wall time (ms). */
  gcMs: number;
}

/**
 * Times one run of `fn`, with the GC time spent inside it. No GC is forced before the run: a
 * forced full GC shrinks the young generation and leaves concurrent sweeping behind, which made
 * the next run up to 5× slower than in steady state.
 */
export async function timeWithGc(fn: () => unknown): Promise<Timing> {
  await settle();
  const gc0 = gcTimeMs();
  const cpu0 = process.cpuUsage();
  const t0 = nowMs();
  await fn();
  const ms = nowMs() - t0;
  const cpu = process.cpuUsage(cpu0);
  await settle();
  return { ms, cpuMs: (cpu.user + cpu.system) / 1000, gcMs: gcTimeMs() - gc0 };
}

// ---- formatting ------------------------------------------------------------------------------

export function formatRate(opsPerSec: number): string {
  if (!Number.isFinite(opsPerSec)) return 'n/a';
  if (opsPerSec >= 1e6) return `${(opsPerSec / 1e6).toFixed(2)} M/s`;
  if (opsPerSec >= 1e3) return `${(opsPerSec / 1e3).toFixed(1)} k/s`;
  return `${opsPerSec.toFixed(0)} /s`;
}

export function formatMicros(us: number): string {
  if (!Number.isFinite(us)) return 'n/a';
  if (us >= 1000) return `${(us / 1000).toFixed(2)} ms`;
  return `${us < 10 ? us.toFixed(2) : us.toFixed(1)} µs`;
}

export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) return 'n/a';
  if (bytes >= 1024) return `${(bytes / 1024).toFixed(2)} KiB`;
  return `${bytes.toFixed(0)} B`;
}

/** How ours compares with a peer: `higherIsBetter` for rates, not for costs. */
export function versus(ours: number, theirs: number, higherIsBetter: boolean): string {
  if (!Number.isFinite(ours) || !Number.isFinite(theirs) || ours <= 0 || theirs <= 0) return 'n/a';
  const ratio = higherIsBetter ? ours / theirs : theirs / ours;
  if (Math.abs(ratio - 1) < 0.05) return 'about the same';
  const words = higherIsBetter ? ['faster', 'slower'] : ['cheaper', 'costlier'];
  return ratio >= 1 ? `ours ${ratio.toFixed(1)}× ${words[0]}` : `ours ${(1 / ratio).toFixed(1)}× ${words[1]}`;
}

export interface Row {
  library: string;
  figure: string;
  vsOurs: string;
  note?: string;
}

/** Prints a titled table with columns library, figure, vs ours (and note when any row has one). */
export function printTable(title: string, rows: readonly Row[]): void {
  const header = ['library', 'figure', 'vs ours'];
  const withNote = rows.some((r) => r.note !== undefined && r.note !== '');
  if (withNote) header.push('note');
  const cells = rows.map((r) => {
    const line = [r.library, r.figure, r.vsOurs];
    if (withNote) line.push(r.note ?? '');
    return line;
  });
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? '').length)));
  const fmt = (line: readonly string[]): string =>
    `| ${line.map((c, i) => (i === 1 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join(' | ')} |`;
  console.log(`\n${title}\n`);
  console.log(fmt(header));
  console.log(`|${widths.map((w, i) => (i === 1 ? `${'-'.repeat(w + 1)}:` : '-'.repeat(w + 2))).join('|')}|`);
  for (const line of cells) console.log(fmt(line));
}

/** Prints whether a figure meets its target. */
export function printTarget(what: string, ok: boolean, detail: string): void {
  console.log(`${ok ? 'target met   ' : 'target MISSED'}  ${what}: ${detail}`);
}
