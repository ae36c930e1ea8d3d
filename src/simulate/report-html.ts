import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { ModeResult } from './run.js';
import { describeParams, tableCells, tableLegend } from './table.js';

/** One scenario's results, in the order they ran. */
export interface ReportGroup {
  scenario: string;
  description: string;
  /** Whether no flag changed the scenario's parameters: its description is shown only then. */
  unchanged?: boolean;
  results: ModeResult[];
}

export interface ReportMeta {
  /** The command line that made the report. */
  command: string;
  /** Real time the whole run took, ms. */
  tookMs: number;
}

/**
 * Reads uPlot (a dependency) to inline it: the page must open offline, from a file.
 * Throws with a hint when it is not installed.
 */
function chartLibrary(): { js: string; css: string } {
  const require = createRequire(import.meta.url);
  try {
    return {
      js: readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'),
      css: readFileSync(require.resolve('uplot/dist/uPlot.min.css'), 'utf8'),
    };
  } catch (error) {
    throw new Error(
      '--html needs the uplot package (a dependency of adaptive-rate-limit): reinstall the package',
      {
        cause: error,
      },
    );
  }
}

/**
 * A self-contained HTML page: a summary table of every scenario and mode at the top; then for
 * each scenario its parameters, its table and a grid of charts drawn by uPlot (inlined): one row
 * per quantity (sum of rates against the quota and the units used in the last 60 s, each
 * instance's rate, the queue, 429s per second on a log scale) and one column per mode, each row
 * on one y-scale across the modes so that the modes compare at a glance. Legends show the values
 * at the end of the run, or under the cursor.
 */
export function renderHtml(groups: readonly ReportGroup[], meta: ReportMeta): string {
  const { js, css } = chartLibrary();
  const data = groups.map((g) => ({
    scenario: g.scenario,
    modes: g.results.map((r) => ({ label: r.label, mode: r.mode, series: r.series ?? null })),
  }));
  const sections = groups.map((g, gi) => section(g, gi)).join('\n');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>adaptive-rate-limit: simulator report</title>
<style>${css}</style>
<style>${PAGE_CSS}</style>
</head>
<body>
<header>
<h1>adaptive-rate-limit: simulator report</h1>
<p>Model numbers: the library's own limiter, controllers and attempt loop, run against a model API on a virtual clock.
Rates are in units per minute. Made by <code>${escapeHtml(meta.command)}</code> in ${(meta.tookMs / 1000).toFixed(1)} s.</p>
</header>
${summary(groups)}
${sections}
<script>${js.replaceAll('</script', '<\\/script')}</script>
<script type="application/json" id="sim-data">${jsonForHtml(data)}</script>
<script>${PAGE_JS}</script>
</body>
</html>
`;
}

/** Every scenario's table in one, with a link to each scenario's charts. */
function summary(groups: readonly ReportGroup[]): string {
  const header = tableCells([]).header;
  const rows = groups
    .map((g, gi) => {
      const { rows: cells } = tableCells(g.results);
      return cells
        .map((row, ri) => {
          const scenario =
            ri === 0
              ? `<th scope="rowgroup" rowspan="${cells.length}"><a href="#scenario-${gi}">${escapeHtml(g.scenario)}</a></th>`
              : '';
          return `<tr>${scenario}${cellsHtml(row)}</tr>`;
        })
        .join('\n');
    })
    .join('\n');
  const all = groups.flatMap((g) => g.results);
  return `<section class="summary">
<h2>Summary</h2>
<table id="summary">
<thead><tr><th scope="col">Scenario</th>${header.map((h) => `<th scope="col">${escapeHtml(h)}</th>`).join('')}</tr></thead>
<tbody>
${rows}
</tbody>
</table>
<p class="legend">${escapeHtml(tableLegend(all))}</p>
</section>`;
}

function cellsHtml(row: readonly string[]): string {
  return row
    .map((cell, i) => (i === 0 ? `<th scope="row">${escapeHtml(cell)}</th>` : `<td>${escapeHtml(cell)}</td>`))
    .join('');
}

/** The rows of charts: what each draws (PAGE_JS knows them by `kind`). */
const CHART_ROWS = [
  { kind: 'sum', title: 'Sum of rates, quota, units used in the last 60 s', unit: 'units/min' },
  { kind: 'rates', title: "Each instance's rate", unit: 'units/min' },
  { kind: 'queued', title: 'Requests waiting in the queues', unit: 'requests' },
  { kind: 'throttled', title: '429s per second', unit: 'log scale' },
];

function section(group: ReportGroup, gi: number): string {
  const first = group.results[0];
  const { header, rows } = tableCells(group.results);
  const heads = group.results.map((r) => `<h3>${escapeHtml(r.label)}</h3>`).join('');
  const grid = CHART_ROWS.map(
    (row) =>
      `<div class="row-title"><strong>${escapeHtml(row.title)}</strong><span>${escapeHtml(row.unit)}</span></div>` +
      group.results
        .map((_r, mi) => `<div class="chart" data-g="${gi}" data-m="${mi}" data-kind="${row.kind}"></div>`)
        .join(''),
  ).join('\n');
  return `<section class="scenario" id="scenario-${gi}">
<h2>${escapeHtml(group.scenario)}</h2>
<p>${first ? `${escapeHtml(describeParams(first))}. ` : ''}${group.unchanged === false ? '' : escapeHtml(group.description)}</p>
<table>
<thead><tr>${header.map((h) => `<th scope="col">${escapeHtml(h)}</th>`).join('')}</tr></thead>
<tbody>
${rows.map((row) => `<tr>${cellsHtml(row)}</tr>`).join('\n')}
</tbody>
</table>
<p class="legend">${escapeHtml(tableLegend(group.results))}</p>
<div class="grid" style="--modes: ${group.results.length}">
<div></div>${heads}
${grid}
</div>
</section>`;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** JSON that cannot close the script element it sits in. */
function jsonForHtml(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c');
}

const PAGE_CSS = `
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1500px; padding: 0 16px 48px; color: #1d2433; }
h1 { font-size: 22px; margin: 24px 0 4px; }
h2 { font-size: 19px; margin: 36px 0 4px; border-bottom: 1px solid #d5dae3; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 0; align-self: end; }
table { border-collapse: collapse; margin: 8px 0 4px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e4e7ee; }
td { text-align: right; }
thead th { text-align: right; font-weight: 600; }
thead th:first-child, tbody th { text-align: left; font-weight: 500; }
th[scope=rowgroup] { vertical-align: top; }
.legend { font-size: 12px; color: #4a5568; margin: 0 0 12px; }
.grid { display: grid; grid-template-columns: 130px repeat(var(--modes), minmax(230px, 1fr)); gap: 6px 10px; overflow-x: auto; }
.row-title { font-size: 12px; color: #4a5568; }
.row-title strong { display: block; color: #1d2433; font-weight: 600; }
.chart { min-width: 0; min-height: 200px; }
.uplot .u-legend { font-size: 11px; }
.empty { color: #718096; font-size: 12px; padding: 24px 0; }
`;

/**
 * Draws every chart from the embedded data; runs in the browser. Each row of a scenario's grid
 * has one y-scale: the largest value of that row across the modes (429s: a log scale from 0.1,
 * so one 429 a second and a hundred both show). The legend shows the last values until the
 * cursor is over the chart.
 */
const PAGE_JS = `
(function () {
  var data = JSON.parse(document.getElementById('sim-data').textContent);
  var palette = ['#7aa5d8', '#e0a46b', '#7cc39a', '#d48bbb', '#a593d9', '#e08a8a', '#6fc1c1', '#c9a86b'];
  var fmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
  function decade(v) { return Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9; }
  function clock(s) { s = Math.round(s); return Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0'); }
  function line(label, color, extra) {
    var s = { label: label, stroke: color, width: 1.5, points: { show: false },
      value: function (u, v) { return v == null ? '-' : fmt.format(v); } };
    if (extra) for (var k in extra) s[k] = extra[k];
    return s;
  }
  function columns(kind, s) {
    if (kind === 'sum') return {
      series: [line('quota', '#1d2433', { dash: [6, 4] }), line('used, 60 s', '#2f855a'), line('sum of rates', '#1f5fa8')],
      data: [s.quota, s.used60, s.sumRate] };
    if (kind === 'rates') return {
      series: s.rates.map(function (_, i) { return line('instance ' + (i + 1), palette[i % palette.length]); }),
      data: s.rates };
    if (kind === 'queued') return { series: [line('waiting', '#6b46c1')], data: [s.queued] };
    return {
      series: [line('429s', '#c53030', { points: { show: true, size: 3 },
        value: function (u, v) { return fmt.format(v == null ? 0 : v); } })],
      data: [s.throttled.map(function (v) { return v > 0 ? v : null; })] };
  }
  function maxOf(cols) {
    var m = 0;
    cols.forEach(function (c) { c.forEach(function (v) { if (v != null && v > m) m = v; }); });
    return m;
  }
  function legendOnLast(u) {
    var last = u.data[0].length - 1;
    if (last >= 0 && !(u.cursor.left >= 0)) u.setLegend({ idx: last }, false);
  }
  var charts = [];
  var tops = {};
  document.querySelectorAll('.chart').forEach(function (el) {
    var g = +el.dataset.g, kind = el.dataset.kind, key = g + '/' + kind;
    if (tops[key] === undefined) {
      var m = 0;
      data[g].modes.forEach(function (mode) { if (mode.series) m = Math.max(m, maxOf(columns(kind, mode.series).data)); });
      tops[key] = kind === 'throttled' ? Math.max(10, Math.pow(10, Math.ceil(Math.log10(Math.max(m, 1))))) : Math.max(1, m * 1.05);
    }
    var mode = data[g].modes[+el.dataset.m];
    var s = mode.series;
    if (!s) { el.innerHTML = '<p class="empty">No time series.</p>'; return; }
    var c = columns(kind, s);
    if (kind === 'rates' && !s.rates.some(function (r) { return r.some(function (v) { return v !== null; }); })) {
      el.innerHTML = '<p class="empty">No limiter: no rate.</p>';
      return;
    }
    var log = kind === 'throttled';
    var decades = function (u, splits) { return splits.map(function (v) { return !log || decade(v) ? v : null; }); };
    var top = tops[key];
    el.dataset.top = String(top);
    el.dataset.scale = log ? 'log' : 'linear';
    var opts = {
      width: Math.max(220, el.clientWidth), height: 170,
      scales: { x: { time: false, range: [0, s.t.length ? s.t[s.t.length - 1] : 1] },
        y: log ? { distr: 3, range: [0.1, top] } : { range: [0, top] } },
      axes: [
        { size: 34, values: function (u, splits) { return splits.map(clock); },
          incrs: [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600] },
        { size: 52,
          // On the log scale only the powers of ten get a tick, a grid line and a label.
          filter: decades, grid: { filter: decades }, ticks: { filter: decades },
          values: function (u, splits) { return splits.map(function (v) { return v == null ? '' : v < 1 ? String(v) : fmt.format(v); }); } },
      ],
      legend: { live: true },
      hooks: { draw: [legendOnLast] },
      series: [{ label: 'time', value: function (u, v) { return v == null ? '' : clock(v); } }].concat(c.series),
    };
    var plot = new uPlot(opts, [s.t].concat(c.data), el);
    plot.over.addEventListener('mouseleave', function () { requestAnimationFrame(function () { legendOnLast(plot); }); });
    requestAnimationFrame(function () { legendOnLast(plot); });
    charts.push({ el: el, plot: plot });
  });
  var pending;
  window.addEventListener('resize', function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      charts.forEach(function (c) { c.plot.setSize({ width: Math.max(220, c.el.clientWidth), height: 170 }); });
    }, 150);
  });
})();
`;
