import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { ModeResult } from './run.js';
import { describeParams, formatRecovery } from './table.js';

/** One scenario's results, in the order they ran. */
export interface ReportGroup {
  scenario: string;
  description: string;
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

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/**
 * A self-contained HTML page: for each scenario the comparison table, and for each mode charts
 * over time (sum of rates against the quota and the units used in the last 60 s, each
 * instance's rate, the queue length, 429s per second), drawn by uPlot inlined in the page.
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
${sections}
<script>${js.replaceAll('</script', '<\\/script')}</script>
<script type="application/json" id="sim-data">${jsonForHtml(data)}</script>
<script>${PAGE_JS}</script>
</body>
</html>
`;
}

function section(group: ReportGroup, gi: number): string {
  const first = group.results[0];
  const rows = group.results
    .map(
      (r) =>
        `<tr><th scope="row">${escapeHtml(r.label)}</th><td>${integer.format(r.throughput)}</td><td>${Math.round(
          r.share * 100,
        )}%</td><td>${integer.format(r.throttled)}</td><td>${integer.format(r.rejected)}</td><td>${integer.format(
          r.gaveUp,
        )}</td><td>${r.p95WaitSeconds.toFixed(1)} s</td><td>${escapeHtml(formatRecovery(r))}</td></tr>`,
    )
    .join('\n');
  const modes = group.results
    .map(
      (r, mi) => `<section class="mode">
<h3>${escapeHtml(r.label)}</h3>
<div class="charts">
<figure><figcaption>Sum of rates, quota and units used in the last 60 s (units/min)</figcaption><div class="chart" data-g="${gi}" data-m="${mi}" data-kind="sum"></div></figure>
<figure><figcaption>Each instance's rate (units/min)</figcaption><div class="chart" data-g="${gi}" data-m="${mi}" data-kind="rates"></div></figure>
<figure><figcaption>Requests waiting in the queues</figcaption><div class="chart" data-g="${gi}" data-m="${mi}" data-kind="queued"></div></figure>
<figure><figcaption>429s per second</figcaption><div class="chart" data-g="${gi}" data-m="${mi}" data-kind="throttled"></div></figure>
</div>
</section>`,
    )
    .join('\n');
  return `<section class="scenario">
<h2>${escapeHtml(group.scenario)}</h2>
<p>${escapeHtml(group.description)}${first ? ` (${escapeHtml(describeParams(first))})` : ''}</p>
<table>
<thead><tr><th>Mode</th><th>Throughput</th><th>Share</th><th>429s</th><th>Rejected</th><th>Gave up</th><th>p95 wait</th><th>Recovery</th></tr></thead>
<tbody>
${rows}
</tbody>
</table>
${modes}
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
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 0 16px 48px; color: #1d2433; }
h1 { font-size: 22px; margin: 24px 0 4px; }
h2 { font-size: 19px; margin: 36px 0 4px; border-bottom: 1px solid #d5dae3; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 20px 0 4px; }
table { border-collapse: collapse; margin: 8px 0 12px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e4e7ee; }
td { text-align: right; }
thead th { text-align: right; font-weight: 600; }
thead th:first-child, tbody th { text-align: left; font-weight: 500; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr)); gap: 8px 16px; }
figure { margin: 0; min-width: 0; }
figcaption { font-size: 12px; color: #4a5568; }
.chart { min-height: 200px; }
.empty { color: #718096; font-size: 12px; padding: 24px 0; }
`;

/** Draws every chart from the embedded data; runs in the browser. */
const PAGE_JS = `
(function () {
  var data = JSON.parse(document.getElementById('sim-data').textContent);
  var palette = ['#2b6cb0', '#c05621', '#2f855a', '#b83280', '#6b46c1', '#c53030', '#2c7a7b', '#975a16', '#4a5568', '#d69e2e'];
  function minutes(ts) { return ts.map(function (t) { return t / 60; }); }
  function options(el, series, yLabel) {
    return {
      width: Math.max(300, el.clientWidth),
      height: 200,
      scales: { x: { time: false } },
      axes: [
        { label: 'minutes', size: 36, labelSize: 16 },
        { label: yLabel, size: 56, labelSize: 16 },
      ],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      series: [{ label: 'minute', value: function (u, v) { return v == null ? '--' : v.toFixed(2); } }].concat(series),
    };
  }
  function line(label, color, extra) {
    var s = { label: label, stroke: color, width: 1.5, points: { show: false } };
    if (extra) for (var k in extra) s[k] = extra[k];
    return s;
  }
  var charts = [];
  document.querySelectorAll('.chart').forEach(function (el) {
    var mode = data[+el.dataset.g].modes[+el.dataset.m];
    var s = mode.series;
    if (!s) { el.innerHTML = '<p class="empty">No time series.</p>'; return; }
    var x = minutes(s.t);
    var kind = el.dataset.kind, series, columns, y;
    if (kind === 'sum') {
      series = [line('quota', '#1d2433', { dash: [6, 4] }), line('used, 60 s', '#2f855a')];
      columns = [x, s.quota, s.used60];
      if (s.sumRate.some(function (v) { return v !== null; })) {
        series.push(line('sum of rates', '#2b6cb0'));
        columns.push(s.sumRate);
      }
      y = 'units/min';
    } else if (kind === 'rates') {
      if (!s.rates.some(function (r) { return r.some(function (v) { return v !== null; }); })) {
        el.innerHTML = '<p class="empty">No limiter: no rate.</p>';
        return;
      }
      series = s.rates.map(function (_, i) { return line('instance ' + (i + 1), palette[i % palette.length]); });
      columns = [x].concat(s.rates);
      y = 'units/min';
    } else if (kind === 'queued') {
      series = [line('waiting', '#6b46c1')];
      columns = [x, s.queued];
      y = 'requests';
    } else {
      series = [line('429s', '#c53030', { fill: 'rgba(197,48,48,0.12)' })];
      columns = [x, s.throttled];
      y = 'per second';
    }
    charts.push({ el: el, plot: new uPlot(options(el, series, y), columns, el) });
  });
  var pending;
  window.addEventListener('resize', function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      charts.forEach(function (c) { c.plot.setSize({ width: Math.max(300, c.el.clientWidth), height: 200 }); });
    }, 150);
  });
})();
`;
