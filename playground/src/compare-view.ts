import type uPlot from 'uplot';
import { type ModeResult, runMode, type Series } from '../../src/simulate/run.js';
import { describeParams, tableCells } from '../../src/simulate/table.js';
import { COMPARE_ROWS, clockTime, compareChart, rowMax } from './charts.js';
import { type PageContext, scenarioControls, sliderControls, speedButtons } from './controls.js';
import { h, widthOf } from './dom.js';
import { Pacer, StoppedError } from './pacer.js';
import { modesOf, paramsOf } from './settings.js';

/** The seed's column definitions, as the simulator's docs give them. */
const LEGEND =
  'Throughput: units the API accepted per minute. Share: of the mean quota. 429s: throttled answers, retries included. ' +
  'Rejected: not sent by the limiter (queue full or wait over maxWait). Gave up: a 429 on every attempt. ' +
  'p95 wait: for units, s. Recovery: s after the quota comes back until the accepted units reach 90% of the minute before the drop.';

/**
 * "Compare the modes": every mode of the scenario on one seed, side by side, then the
 * simulator's table (the same cells as `npm run simulate`) and a grid of charts: one row per
 * quantity, one column per mode, one y-scale per row.
 */
export class ComparePage {
  readonly el: HTMLElement;
  readonly #ctx: PageContext;
  #pacer: Pacer | undefined;
  #plots: uPlot[] = [];
  readonly #status = h('p', { class: 'status', id: 'status' });
  readonly #table = h('div', { class: 'table' });
  readonly #grid = h('div', { class: 'grid' });
  readonly #json = h('pre', { id: 'compare-json' });

  constructor(ctx: PageContext) {
    this.#ctx = ctx;
    const params = paramsOf(ctx.settings);
    this.el = h(
      'section',
      { class: 'view', 'data-view': 'compare' },
      h('h2', {}, 'Compare the modes'),
      h(
        'p',
        { class: 'lead' },
        'Every mode of the scenario on the same seed, for its whole length. Change the instances, the quota or the demand, and it runs again.',
      ),
      h(
        'div',
        { class: 'toolbar' },
        h('button', { type: 'button', id: 'reset', onclick: () => this.start() }, 'Run again'),
        speedButtons(ctx),
      ),
      h('div', { class: 'settings wide' }, scenarioControls(ctx), sliderControls(ctx, params)),
      this.#status,
      this.#table,
      this.#grid,
      h(
        'details',
        {},
        h('summary', {}, 'The results as JSON (as npm run simulate -- --json gives them)'),
        this.#json,
      ),
    );
  }

  start(): void {
    this.#pacer?.stop();
    const settings = this.#ctx.settings;
    const params = paramsOf(settings);
    const modes = modesOf(settings);
    const pacer = new Pacer(settings.speed);
    this.#pacer = pacer;
    this.#clear();
    const seconds = params.minutes * 60;
    const at = modes.map(() => 0);
    const stackTraceLimit = Error.stackTraceLimit;
    this.#status.textContent = `Running ${modes.length} modes…`;
    this.#status.dataset.done = 'false';
    const runs = modes.map((mode, i) =>
      runMode(settings.scenario, params, mode, {
        series: true,
        pace: pacer.pace,
        onSecond: (live) => {
          at[i] = live.second;
        },
      }),
    );
    const progress = () => {
      if (this.#pacer !== pacer || this.#status.dataset.done === 'true') return;
      this.#status.textContent = `Running ${modes.length} modes: ${clockTime(Math.min(...at))} of ${clockTime(seconds)}…`;
      requestAnimationFrame(progress);
    };
    requestAnimationFrame(progress);
    Promise.all(runs).then(
      (results) => {
        // The runs took turns: each restored the stack trace limit it had found.
        Error.stackTraceLimit = stackTraceLimit;
        if (this.#pacer !== pacer) return;
        this.#status.dataset.done = 'true';
        this.#show(results);
      },
      (error: unknown) => {
        Error.stackTraceLimit = stackTraceLimit;
        if (error instanceof StoppedError) return;
        this.#status.textContent = `Stopped: ${(error as Error).message}`;
        console.error(error);
      },
    );
  }

  set speed(speed: PageContext['settings']['speed']) {
    if (this.#pacer) this.#pacer.speed = speed;
  }

  destroy(): void {
    this.#pacer?.stop();
    this.#clear();
  }

  #clear(): void {
    for (const p of this.#plots) p.destroy();
    this.#plots = [];
    this.#table.replaceChildren();
    this.#grid.replaceChildren();
    this.#json.textContent = '';
  }

  #show(results: ModeResult[]): void {
    const first = results[0];
    this.#status.textContent = first
      ? `${describeParams(first)}. Model numbers, units/min.`
      : 'No mode to run.';
    const { header, rows } = tableCells(results);
    const table = h(
      'table',
      { id: 'compare-table' },
      h('thead', {}, h('tr', {}, ...header.map((c) => h('th', { scope: 'col' }, c)))),
      h(
        'tbody',
        {},
        ...rows.map((row) =>
          h(
            'tr',
            {},
            ...row.map((cell, i) => (i === 0 ? h('th', { scope: 'row' }, cell) : h('td', {}, cell))),
          ),
        ),
      ),
    );
    this.#table.replaceChildren(table, h('p', { class: 'legend' }, LEGEND));
    this.#json.textContent = JSON.stringify(
      results.map(({ series: _series, ...rest }) => rest),
      null,
      2,
    );

    const all = results.map((r) => r.series).filter((s): s is Series => s !== undefined);
    this.#grid.style.setProperty('--modes', String(results.length));
    this.#grid.append(h('div', { class: 'corner' }), ...results.map((r) => h('h3', {}, r.label)));
    const width = Math.max(240, Math.floor((widthOf(this.#grid, 1200) - 150) / results.length) - 8);
    for (const row of COMPARE_ROWS) {
      const max = rowMax(row, all);
      this.#grid.append(
        h('div', { class: 'row-title' }, h('strong', {}, row.title), h('span', {}, row.unit)),
      );
      for (const r of results) {
        const cell = h('div', { class: 'cell' });
        this.#grid.append(cell);
        if (r.series) this.#plots.push(compareChart(cell, row, r.series, max, width));
      }
    }
  }
}
