/**
 * The control bench's figures: one row's reports summed over its client processes, a markdown
 * table per server, and each target printed next to the measured value (met, or missed by how much).
 */
import type { ClientReport } from './control-protocol.js';

export interface RowResult {
  label: string;
  /** Why the row did not run ("not in this build"), when it did not. */
  skipped?: string;
  reports: ClientReport[];
  /** Units the server could accept over the run (the share's denominator). */
  available: number;
}

export interface RowFigures {
  accepted: number;
  sent: number;
  throttled: number;
  share: number;
  throttledShare: number;
  callersWith429: number;
  callers: number;
  rejected: number;
  unfinished: number;
  failed: number;
  p95WaitMs: number;
  lastAnswerMs: number;
  /** Callers the open loop's schedule had due by the end (0 for another load). */
  scheduled: number;
  /** The client processes' CPU (user + system) over the run / attempts answered (µs). */
  cpuPerRequestMicros: number;
  /**
   * The smallest and the largest part of the accepted requests one client process had (0..1; NaN
   * with none accepted): the share counts only the total, so one process starving beside another
   * that takes the quota scores high.
   */
  processPartMin: number;
  processPartMax: number;
}

/** The q-quantile (0..1) of `values`, nearest rank; NaN when empty. */
function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

export function figures(row: RowResult): RowFigures {
  let accepted = 0;
  let throttled = 0;
  let other = 0;
  let callersWith429 = 0;
  let callers = 0;
  let rejected = 0;
  let unfinished = 0;
  let failed = 0;
  let lastAnswerMs = 0;
  let scheduled = 0;
  let cpuMicros = 0;
  const waits: number[] = [];
  for (const r of row.reports) {
    accepted += r.attempts.ok;
    throttled += r.attempts.throttled;
    other += r.attempts.other;
    callersWith429 += r.callers.got429;
    callers += r.callers.started;
    rejected += r.callers.rejected;
    unfinished += r.callers.unfinished;
    failed += r.callers.failed;
    lastAnswerMs = Math.max(lastAnswerMs, r.lastAnswerMs);
    scheduled += r.scheduled;
    cpuMicros += r.cpuMicros;
    for (const w of r.waitsMs) waits.push(w);
  }
  const sent = accepted + throttled + other;
  const parts = row.reports.map((r) => (accepted === 0 ? Number.NaN : r.attempts.ok / accepted));
  return {
    accepted,
    sent,
    throttled,
    share: accepted / row.available,
    throttledShare: sent === 0 ? 0 : throttled / sent,
    callersWith429,
    callers,
    rejected,
    unfinished,
    failed,
    p95WaitMs: quantile(waits, 0.95),
    lastAnswerMs,
    scheduled,
    cpuPerRequestMicros: sent === 0 ? Number.NaN : cpuMicros / sent,
    processPartMin: parts.length === 0 ? Number.NaN : Math.min(...parts),
    processPartMax: parts.length === 0 ? Number.NaN : Math.max(...parts),
  };
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US');
export const pct = (x: number): string => `${(x * 100).toFixed(1)} %`;

/**
 * Each process's part of the accepted requests, the smallest and the largest ("49.1-50.9 %"), or
 * "n/a" with none accepted.
 */
export function processParts(f: RowFigures): string {
  if (Number.isNaN(f.processPartMin)) return 'n/a';
  return `${(f.processPartMin * 100).toFixed(1)}-${(f.processPartMax * 100).toFixed(1)} %`;
}
const seconds = (ms: number): string => (Number.isFinite(ms) ? `${(ms / 1000).toFixed(1)} s` : 'n/a');

/**
 * Prints a markdown table: one line per row, the same columns for every server (the share, and
 * each process's part of what was accepted beside it).
 */
export function printRows(
  title: string,
  rows: readonly RowResult[],
  extra?: (f: RowFigures) => string,
): void {
  const header = [
    'row',
    'share of quota',
    'per process (min-max of accepted)',
    'sent',
    'answered 429',
    'callers',
    'callers with a 429',
    'rejected',
    'unfinished',
    'p95 wait',
  ];
  if (extra !== undefined) header.push('until the last answer');
  const lines = rows.map((row) => {
    if (row.skipped !== undefined) return [row.label, row.skipped, ...header.slice(2).map(() => '')];
    const f = figures(row);
    const line = [
      row.label,
      pct(f.share),
      processParts(f),
      int(f.sent),
      `${int(f.throttled)} (${pct(f.throttledShare)})`,
      int(f.callers),
      int(f.callersWith429),
      int(f.rejected),
      int(f.unfinished),
      seconds(f.p95WaitMs),
    ];
    if (extra !== undefined) line.push(extra(f));
    return line;
  });
  printTable(title, header, lines);
  printErrors(rows);
}

/** Prints a markdown table of `header` and `lines`, the first column left-aligned. */
function printTable(title: string, header: readonly string[], lines: readonly (readonly string[])[]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const fmt = (line: readonly string[]): string =>
    `| ${line.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  console.log(`\n${title}\n`);
  console.log(fmt(header));
  console.log(`|${widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`);
  for (const line of lines) console.log(fmt(line));
}

/**
 * The scaled scenarios' table: the share (and each process's part of it), the 429s, the callers started of those the schedule had
 * due, and the client's CPU per request. With `durationMs`, also the attempts answered per second.
 */
export function printScaleRows(title: string, rows: readonly RowResult[], durationMs?: number): void {
  const header = [
    'row',
    'share of quota',
    'per process (min-max of accepted)',
    'sent',
    'answered 429',
    'callers started / due',
    'rejected',
    'unfinished',
    'p95 wait',
    'client CPU / request',
  ];
  if (durationMs !== undefined) header.push('answered / s');
  const lines = rows.map((row) => {
    if (row.skipped !== undefined) return [row.label, row.skipped, ...header.slice(2).map(() => '')];
    const f = figures(row);
    const line = [
      row.label,
      pct(f.share),
      processParts(f),
      int(f.sent),
      `${int(f.throttled)} (${pct(f.throttledShare)})`,
      `${int(f.callers)} / ${int(f.scheduled)}`,
      int(f.rejected),
      int(f.unfinished),
      seconds(f.p95WaitMs),
      `${Number.isFinite(f.cpuPerRequestMicros) ? f.cpuPerRequestMicros.toFixed(0) : 'n/a'} µs`,
    ];
    if (durationMs !== undefined) line.push(int((f.sent * 1000) / durationMs));
    return line;
  });
  printTable(title, header, lines);
  printErrors(rows);
}

/** Prints, per row, how many unexpected errors its clients met and the first of them. */
function printErrors(rows: readonly RowResult[]): void {
  for (const row of rows) {
    const errors = row.reports.flatMap((r) => r.errors);
    if (errors.length > 0)
      console.log(`\n${row.label}: ${errors.length} unexpected errors, the first:\n${errors[0]}`);
  }
}

/** Prints one target next to its measured value. */
export function printTarget(what: string, met: boolean, measured: string, missedBy?: string): void {
  const verdict = met ? 'met   ' : 'MISSED';
  console.log(
    `target ${verdict}  ${what}: ${measured}${met || missedBy === undefined ? '' : `; missed by ${missedBy}`}`,
  );
}

/** "at least `min` of the quota": met, or missed by how many points. */
export function targetShareAtLeast(what: string, f: RowFigures, min: number): void {
  printTarget(
    `${what} >= ${pct(min)} of the quota`,
    f.share >= min,
    pct(f.share),
    `${((min - f.share) * 100).toFixed(1)} points`,
  );
}

/** "at most `max` of the requests answered 429": met, or missed by how many points. */
export function targetThrottledAtMost(what: string, f: RowFigures, max: number): void {
  printTarget(
    `${what} <= ${pct(max)} of requests answered 429`,
    f.throttledShare <= max,
    `${pct(f.throttledShare)} (${f.throttled} of ${f.sent})`,
    `${((f.throttledShare - max) * 100).toFixed(2)} points`,
  );
}
