import type { ModeResult } from './run.js';

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** RateLimiting.Adaptive's comparison table (docs/simulator.md) as aligned text, one row per mode. */
export function formatTable(results: readonly ModeResult[]): string {
  const { header, rows } = tableCells(results);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** The comparison table's header and cells, as the CLI prints them (the playground's table too). */
export function tableCells(results: readonly ModeResult[]): { header: string[]; rows: string[][] } {
  const extra = new Set(results.flatMap((r) => r.parameters.columns ?? []));
  const header = [
    'Mode',
    'Throughput',
    'Share',
    '429s',
    'Rejected',
    'Gave up',
    '429 callers',
    'p95 wait',
    'Recovery',
  ];
  if (extra.has('fairness')) header.push('Fairness');
  if (extra.has('secondsTo90')) header.push('To 90 %');
  if (extra.has('lastSuccess')) header.push('Done');
  const rows = results.map((r) => {
    const row = [
      r.label,
      integer.format(r.throughput),
      `${Math.round(r.share * 100)}%`,
      integer.format(r.throttled),
      integer.format(r.rejected),
      integer.format(r.gaveUp),
      integer.format(r.callers429),
      `${r.p95WaitSeconds.toFixed(1)} s`,
      formatRecovery(r),
    ];
    if (extra.has('fairness')) row.push(r.fairness === null ? '-' : r.fairness.toFixed(3));
    if (extra.has('secondsTo90')) row.push(r.secondsTo90 === null ? 'never' : `${r.secondsTo90} s`);
    if (extra.has('lastSuccess'))
      row.push(r.lastSuccessSeconds === null ? 'never' : `${r.lastSuccessSeconds} s`);
    return row;
  });
  return { header, rows };
}

/** `12 s`; `-` without a quota drop; `> 540 s` when it did not recover before the end. */
function formatRecovery(r: ModeResult): string {
  if (r.recovered === null) return '-';
  if (r.recoverySeconds !== null) return `${r.recoverySeconds} s`;
  const drop = r.parameters.quotaEvents.find((e) => e.factor < 1);
  const left = drop ? Math.floor((r.parameters.minutes * 60_000 - drop.atMs - drop.durationMs) / 1000) : 0;
  return `> ${left} s`;
}

/** One line that says what was simulated, from the run's actual parameters. */
export function describeParams(r: ModeResult): string {
  const p = r.parameters;
  const demand = p.demand.every((d) => d === p.demand[0])
    ? `${p.instances} ${p.instances === 1 ? 'instance' : 'instances'} of ${integer.format(p.demand[0]!)} units/min`
    : `${p.instances} instances of ${p.demand.map((d) => integer.format(d)).join(', ')} units/min`;
  const parts = [`quota ${integer.format(p.quota)} units/min`, demand];
  for (const e of p.quotaEvents) {
    parts.push(`the quota at ${percent(e.factor)} from ${clock(e.atMs)} for ${seconds(e.durationMs)}`);
  }
  for (const e of p.demandEvents) {
    parts.push(`the demand at ${percent(e.factor)} from ${clock(e.atMs)} for ${seconds(e.durationMs)}`);
  }
  if (p.arrivals === 'interval') parts.push('arrivals at a fixed interval');
  parts.push(`${p.minutes} min`, `seed ${p.seed}`);
  return parts.join(', ');
}

/**
 * One line under the table that says what each column counts, and the rate the fixed mode holds
 * when the table has it.
 */
export function tableLegend(results: readonly ModeResult[]): string {
  const first = results[0];
  const attempts = first?.parameters.maxAttempts ?? 4;
  const fixed = results.find((r) => r.mode === 'fixed');
  const held = fixed
    ? `; Fixed rate holds ${integer.format(fixed.parameters.limiter.fixedUnitsPerMinute)} units/min`
    : '';
  return (
    'Throughput in units/min; Share of the mean quota; 429s with retries; ' +
    `Rejected: not sent (queue full, wait > maxWait); Gave up: 429 on all ${attempts} attempts${held}.`
  );
}

function percent(factor: number): string {
  return `${Math.round(factor * 100)}%`;
}

function clock(ms: number): string {
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

function seconds(ms: number): string {
  return `${integer.format(ms / 1000)} s`;
}
