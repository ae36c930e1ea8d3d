import uPlot from 'uplot';
import type { Series } from '../../src/simulate/run.js';

/** Colours of the instances' rates, in turn. */
const PALETTE = ['#7aa5d8', '#e0a46b', '#7cc39a', '#d48bbb', '#a593d9', '#e08a8a', '#6fc1c1', '#c9a86b'];
const COLORS = {
  quota: '#1d2433',
  sum: '#1f5fa8',
  used: '#2f855a',
  throttled: '#c53030',
  queued: '#6b46c1',
};

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

function isDecade(v: number): boolean {
  return Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9;
}

/** `m:ss` of a time in seconds. */
export function clockTime(s: number): string {
  const whole = Math.round(s);
  return `${Math.floor(whole / 60)}:${String(whole % 60).padStart(2, '0')}`;
}

const value = (_u: uPlot, v: number | null) => (v === null || v === undefined ? '' : integer.format(v));

function line(label: string, stroke: string, extra: Partial<uPlot.Series> = {}): uPlot.Series {
  return { label, stroke, width: 1.5, points: { show: false }, value, ...extra };
}

const timeAxis: uPlot.Axis = {
  values: (_u, splits) => splits.map(clockTime),
  // Ticks on whole seconds, then minutes.
  incrs: [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600],
  size: 36,
};

/**
 * Keeps the legend on the newest values when the cursor is not over the chart, so that it
 * reads numbers rather than blanks.
 */
function legendOnLast(u: uPlot): void {
  const last = (u.data[0]?.length ?? 0) - 1;
  if (last >= 0 && (u.cursor.left ?? -1) < 0) u.setLegend({ idx: last }, false);
}

/**
 * Writes each y-scale of the chart, with the range of the values its series draw, to the chart's
 * root as `data-scales` (JSON): `{ [scale]: { min, max, log, dataMin, dataMax, nonFinite } }`. The
 * browser test reads it: an empty chart (a scale that does not span its data) fails.
 */
function reportScales(u: uPlot): void {
  const scales: Record<
    string,
    {
      min: number | null;
      max: number | null;
      log: boolean;
      dataMin: number | null;
      dataMax: number | null;
      nonFinite: number;
    }
  > = {};
  u.series.forEach((series, i) => {
    if (i === 0) return;
    const key = series.scale ?? 'y';
    const scale = u.scales[key];
    const entry = scales[key] ?? {
      min: finiteOrNull(scale?.min),
      max: finiteOrNull(scale?.max),
      log: scale?.distr === 3,
      dataMin: null,
      dataMax: null,
      nonFinite: 0,
    };
    scales[key] = entry;
    for (const v of u.data[i] ?? []) {
      if (v === null || v === undefined) continue;
      if (!Number.isFinite(v)) entry.nonFinite++;
      else {
        entry.dataMin = entry.dataMin === null ? v : Math.min(entry.dataMin, v);
        entry.dataMax = entry.dataMax === null ? v : Math.max(entry.dataMax, v);
      }
    }
  });
  u.root.dataset.scales = JSON.stringify(scales);
}

function finiteOrNull(v: number | null | undefined): number | null {
  return v !== null && v !== undefined && Number.isFinite(v) ? v : null;
}

/**
 * A column as a chart draws it: an unlimited rate (`Infinity`, a limiter before its first cut)
 * is a gap, not a point at the top of an infinite scale (which left every line of the row flat
 * at the bottom, with no y-scale).
 */
function drawable(data: readonly (number | null)[]): (number | null)[] {
  return data.map((v) => (v !== null && Number.isFinite(v) ? v : null));
}

function chart(options: uPlot.Options, data: uPlot.AlignedData, parent: HTMLElement): uPlot {
  const plot = new uPlot(
    { ...options, hooks: { ...options.hooks, draw: [legendOnLast, reportScales] } },
    data,
    parent,
  );
  // uPlot clears the legend after its first draw and when the cursor leaves: set it back then.
  requestAnimationFrame(() => legendOnLast(plot));
  plot.over.addEventListener('mouseleave', () => requestAnimationFrame(() => legendOnLast(plot)));
  return plot;
}

/**
 * The controller view's chart: the hidden quota, the sum of the rates, each instance's rate
 * and the units used in the last 60 s (units/min, left), and the 429s of each second (right).
 */
export function liveChart(parent: HTMLElement, instances: number, width: number): uPlot {
  const series: uPlot.Series[] = [
    { label: 'time', value: (_u, v) => (v === null ? '' : clockTime(v)) },
    line('hidden quota', COLORS.quota, { dash: [6, 4] }),
    line('sum of rates', COLORS.sum, { width: 2.5 }),
    line('used, last 60 s', COLORS.used),
    line('429s/s', COLORS.throttled, { scale: '429', fill: 'rgba(197,48,48,0.10)', width: 1 }),
    ...Array.from({ length: instances }, (_, i) =>
      line(`instance ${i + 1}`, PALETTE[i % PALETTE.length]!, { width: 1 }),
    ),
  ];
  return chart(
    {
      width,
      height: 320,
      scales: { x: { time: false }, '429': { range: (_u, _min, max) => [0, Math.max(10, max * 1.1)] } },
      axes: [
        timeAxis,
        { label: 'units/min', size: 64, values: (_u, splits) => splits.map((v) => integer.format(v)) },
        { scale: '429', side: 1, label: '429s per second', size: 50, grid: { show: false } },
      ],
      series,
    },
    liveData(undefined, instances),
    parent,
  );
}

/** The live chart's columns from a run's series (empty before the first second). */
export function liveData(s: Series | undefined, instances: number): uPlot.AlignedData {
  if (s === undefined) return [[], [], [], [], [], ...Array.from({ length: instances }, () => [])];
  return [s.t, drawable(s.quota), drawable(s.sumRate), s.used60, s.throttled, ...s.rates.map(drawable)];
}

/** A row of the comparison's charts: what it draws from a mode's series. */
export interface CompareRow {
  title: string;
  unit: string;
  /** 429s: a log scale, so that 1 a second and 100 a second both show. */
  log?: boolean;
  /** Only modes with a limiter have it (not `none`): their cell says so instead of an empty chart. */
  limiterOnly?: boolean;
  series(s: Series): { label: string; stroke: string; data: (number | null)[]; dash?: number[] }[];
}

export const COMPARE_ROWS: CompareRow[] = [
  {
    title: 'Sum of rates, hidden quota, units used in the last 60 s',
    unit: 'units/min',
    series: (s) => [
      { label: 'quota', stroke: COLORS.quota, data: drawable(s.quota), dash: [6, 4] },
      { label: 'used, 60 s', stroke: COLORS.used, data: s.used60 },
      { label: 'sum of rates', stroke: COLORS.sum, data: drawable(s.sumRate) },
    ],
  },
  {
    title: "Each instance's rate",
    unit: 'units/min',
    limiterOnly: true,
    series: (s) =>
      s.rates.map((r, i) => ({
        label: `instance ${i + 1}`,
        stroke: PALETTE[i % PALETTE.length]!,
        data: drawable(r),
      })),
  },
  {
    title: 'Requests waiting in the queues',
    unit: 'requests',
    series: (s) => [{ label: 'waiting', stroke: COLORS.queued, data: s.queued }],
  },
  {
    title: '429s per second (log scale)',
    unit: 'per second',
    log: true,
    series: (s) => [
      { label: '429s', stroke: COLORS.throttled, data: s.throttled.map((v) => (v > 0 ? v : null)) },
    ],
  },
];

/** The largest value a row shows across modes (finite: see {@link drawable}): the row's one y-scale. */
export function rowMax(row: CompareRow, all: readonly Series[]): number {
  let max = 0;
  for (const s of all) {
    for (const line of row.series(s))
      for (const v of line.data) if (v !== null && v > max && Number.isFinite(v)) max = v;
  }
  return max;
}

/** The top of a row's y-scale for its largest value (a power of ten on the log scale). */
export function rowTop(row: CompareRow, max: number): number {
  return row.log ? Math.max(10, 10 ** Math.ceil(Math.log10(Math.max(max, 1)))) : Math.max(1, max * 1.05);
}

/** A compare chart's columns from a mode's series. */
export function compareData(row: CompareRow, s: Series): uPlot.AlignedData {
  return [s.t, ...row.series(s).map((l) => l.data)] as uPlot.AlignedData;
}

/**
 * One chart of the comparison: the row's quantity for one mode, over the whole run (`seconds`),
 * on the row's y-scale (`top()`, read at each redraw).
 */
export function compareChart(
  parent: HTMLElement,
  row: CompareRow,
  s: Series,
  top: () => number,
  seconds: number,
  width: number,
): uPlot {
  const lines = row.series(s);
  const decades = (_u: uPlot, splits: number[]) => splits.map((v) => (!row.log || isDecade(v) ? v : null));
  // On the log scale a single 429 sits a decade above the bottom, not on the axis.
  const bottom = row.log ? 0.1 : 0;
  return chart(
    {
      width,
      height: 170,
      legend: { show: true, live: true },
      scales: {
        x: { time: false, range: [0, seconds] },
        y: row.log ? { distr: 3, range: () => [bottom, top()] } : { range: () => [bottom, top()] },
      },
      axes: [
        timeAxis,
        {
          size: 56,
          // On the log scale only the powers of ten get a tick, a grid line and a label.
          filter: decades,
          grid: { filter: decades },
          ticks: { filter: decades },
          values: (_u, splits) =>
            splits.map((v) => (v === null || v === undefined ? '' : v < 1 ? String(v) : integer.format(v))),
        },
      ],
      series: [
        { label: 'time', value: (_u, v) => (v === null ? '' : clockTime(v)) },
        ...lines.map((l) =>
          line(l.label, l.stroke, {
            ...(l.dash ? { dash: l.dash } : {}),
            // Sparse 429s (one now and then) show as dots.
            ...(row.log
              ? {
                  points: { show: true, size: 3 },
                  value: (_u: uPlot, v: number | null) => integer.format(v ?? 0),
                }
              : {}),
          }),
        ),
      ],
    },
    compareData(row, s),
    parent,
  );
}
