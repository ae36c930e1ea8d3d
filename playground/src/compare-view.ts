import type uPlot from 'uplot';
import { ConfigError } from '../../src/errors.js';
import { emptySeries, type ModeResult, type ModeSpec, runMode, type Series } from '../../src/simulate/run.js';
import { describeParams, tableCells, tableLegend } from '../../src/simulate/table.js';
import { COMPARE_ROWS, clockTime, compareChart, compareData, rowMax, rowTop } from './charts.js';
import { type PageContext, scenarioControls, sliderControls, speedButtons } from './controls.js';
import { h, widthOf } from './dom.js';
import { Pacer, StoppedError } from './pacer.js';
import { cliCommand, modesOf, paramsOf } from './settings.js';

/**
 * "Compare the modes": every mode of the scenario on one seed, side by side, then the
 * simulator's table (the same cells as `npm run simulate`) and a grid of charts: one row per
 * quantity, one column per mode, one y-scale per row.
 */
export class ComparePage {
  readonly el: HTMLElement;
  readonly #ctx: PageContext;
  #pacer: Pacer | undefined;
  #plots: { plot: uPlot; row: number; mode: number }[] = [];
  /** The top of each row's y-scale: one scale per row across the modes. */
  #tops: number[] = [];
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
      h(
        'p',
        { class: 'cli' },
        'The same runs on the command line: ',
        h('code', {}, cliCommand(ctx.settings)),
      ),
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
    const live: Series[] = modes.map(() => emptySeries(params.instances));
    this.#buildGrid(modes, live, seconds);
    const stackTraceLimit = Error.stackTraceLimit;
    this.#status.textContent = `Running ${modes.length} modes…`;
    this.#status.dataset.done = 'false';
    const runs = modes.map((mode, i) =>
      runMode(settings.scenario, params, mode, {
        series: true,
        pace: pacer.pace,
        onSecond: (counts) => {
          at[i] = counts.second;
          live[i] = counts.series;
        },
      }),
    );
    let drawnAt = 0;
    const progress = () => {
      if (this.#pacer !== pacer || this.#status.dataset.done !== 'false') return;
      this.#status.textContent = `Running ${modes.length} modes: ${clockTime(Math.min(...at))} of ${clockTime(seconds)}…`;
      // 28 charts for 7 modes: a few redraws a second leave the runs most of the time.
      if (performance.now() - drawnAt > 250) {
        this.#draw(live);
        drawnAt = performance.now();
      }
      requestAnimationFrame(progress);
    };
    requestAnimationFrame(progress);
    Promise.all(runs).then(
      (results) => {
        // The runs took turns: each restored the stack trace limit it had found.
        Error.stackTraceLimit = stackTraceLimit;
        if (this.#pacer !== pacer) return;
        this.#status.dataset.done = 'true';
        this.#draw(results.map((r, i) => r.series ?? live[i]!));
        this.#show(results);
      },
      (error: unknown) => {
        Error.stackTraceLimit = stackTraceLimit;
        if (error instanceof StoppedError || this.#pacer !== pacer) return;
        this.#status.dataset.done = 'failed';
        // A setting the limiter refuses (an initial rate above the maximum): say which, as the CLI does.
        this.#status.textContent = `Stopped: ${(error as Error).message}`;
        if (error instanceof ConfigError) return;
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
    for (const p of this.#plots) p.plot.destroy();
    this.#plots = [];
    this.#table.replaceChildren();
    this.#grid.replaceChildren();
    this.#json.textContent = '';
  }

  /** The grid of charts: one row per quantity, one column per mode. */
  #buildGrid(modes: readonly ModeSpec[], series: readonly Series[], seconds: number): void {
    this.#grid.style.setProperty('--modes', String(modes.length));
    this.#grid.append(h('div', { class: 'corner' }), ...modes.map((m) => h('h3', {}, m.label)));
    const width = Math.max(240, Math.floor((widthOf(this.#grid, 1200) - 150) / modes.length) - 8);
    this.#tops = COMPARE_ROWS.map((row) => rowTop(row, 0));
    COMPARE_ROWS.forEach((row, r) => {
      this.#grid.append(
        h('div', { class: 'row-title' }, h('strong', {}, row.title), h('span', {}, row.unit)),
      );
      modes.forEach((mode, m) => {
        const cell = h('div', { class: 'cell' });
        this.#grid.append(cell);
        if (row.limiterOnly && mode.name === 'none') {
          cell.append(h('p', { class: 'no-chart' }, 'No limiter: every request is sent at once.'));
          return;
        }
        const plot = compareChart(cell, row, series[m]!, () => this.#tops[r]!, seconds, width);
        this.#plots.push({ plot, row: r, mode: m });
      });
    });
  }

  /** Redraws every chart from the modes' series, each row on the largest value of the row. */
  #draw(series: readonly Series[]): void {
    this.#tops = COMPARE_ROWS.map((row) => rowTop(row, rowMax(row, series)));
    for (const { plot, row, mode } of this.#plots)
      plot.setData(compareData(COMPARE_ROWS[row]!, series[mode]!));
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
    this.#table.replaceChildren(table, h('p', { class: 'legend' }, tableLegend(results)));
    this.#json.textContent = JSON.stringify(
      results.map(({ series: _series, ...rest }) => rest),
      null,
      2,
    );
  }
}
