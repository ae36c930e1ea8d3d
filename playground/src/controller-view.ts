import type uPlot from 'uplot';
import { ConfigError } from '../../src/errors.js';
import { type LiveCounts, runMode } from '../../src/simulate/run.js';
import { findScenario } from '../../src/simulate/scenarios.js';
import { clockTime, liveChart, liveData } from './charts.js';
import { type PageContext, scenarioControls, sliderControls, speedButtons } from './controls.js';
import { h, widthOf } from './dom.js';
import { Pacer, StoppedError } from './pacer.js';
import { presetsFor } from './presets.js';
import { type ControllerView, cliCommand, modesOf, paramsOf } from './settings.js';

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** The six counters of the "Rate controllers" page: their labels, and what each reads from the run. */
const COUNTERS: { key: string; label: string; read(live: LiveCounts): string }[] = [
  { key: 'used60', label: 'Units used, 60 s', read: (l) => integer.format(last(l.series.used60) ?? 0) },
  { key: 'sum', label: 'Sum of rates', read: (l) => integer.format(last(l.series.sumRate) ?? 0) },
  { key: 'throttled', label: 'Throttled', read: (l) => integer.format(l.throttled) },
  { key: 'queued', label: 'In queue', read: (l) => integer.format(last(l.series.queued) ?? 0) },
  { key: 'p95', label: 'p95 wait', read: (l) => `${l.p95WaitSeconds().toFixed(1)} s` },
  { key: 'rejected', label: 'Rejected or gave up', read: (l) => integer.format(l.rejected + l.gaveUp) },
];

/** Short words on each built-in controller; a controller without them shows none. */
const LEADS: Record<string, string> = {
  aimd:
    'Additive increase, multiplicative decrease: after each increase interval in which requests waited, ' +
    'the rate goes up by a fixed step; on a throttle it is multiplied by the decrease factor. A saw tooth below the quota.',
  cubic:
    'The window curve of RFC 8312 with the AWS SDK constants: fast away from the rate of the last cut, slow near it, ' +
    'capped at twice the measured send rate. Most of its time at the maximum.',
};

/**
 * A controller's view: the model runs at once at the chosen speed; the six counters and the
 * chart follow it; sliders, presets and the scenario start it again.
 */
export class ControllerPage {
  readonly el: HTMLElement;
  readonly #ctx: PageContext;
  #pacer: Pacer | undefined;
  #plot: uPlot | undefined;
  #live: LiveCounts | undefined;
  #drawn = -1;
  #frame = 0;
  #done = false;
  readonly #counters = new Map<string, HTMLElement>();
  readonly #status = h('span', { class: 'status', id: 'status' });
  readonly #playButton = h('button', { type: 'button', id: 'play' }, 'Pause');
  readonly #chartBox = h('div', { class: 'chart live' });

  constructor(ctx: PageContext, view: ControllerView) {
    this.#ctx = ctx;
    const params = paramsOf(ctx.settings);
    const counters = h('div', { class: 'counters' });
    for (const c of COUNTERS) {
      const value = h('output', { 'data-counter': c.key }, c.key === 'p95' ? '0 s' : '0');
      this.#counters.set(c.key, value);
      counters.append(h('div', { class: 'counter' }, h('span', {}, c.label), value));
    }
    this.#playButton.addEventListener('click', () => this.#togglePlay());
    const toolbar = h(
      'div',
      { class: 'toolbar' },
      this.#playButton,
      h('button', { type: 'button', id: 'reset', onclick: () => this.start() }, 'Reset'),
      speedButtons(ctx),
      this.#status,
    );
    const presets = h('ol', { class: 'presets' });
    for (const p of presetsFor(view.controller)) {
      presets.append(
        h(
          'li',
          {},
          h('button', { type: 'button', class: 'preset', onclick: () => ctx.change(p.settings) }, p.title),
          ` ${p.text}`,
        ),
      );
    }
    this.el = h(
      'section',
      { class: 'view', 'data-view': view.controller },
      h('h2', {}, view.mode.label),
      LEADS[view.controller] ? h('p', { class: 'lead' }, LEADS[view.controller]) : null,
      counters,
      toolbar,
      this.#chartBox,
      h('p', { class: 'cli' }, 'The same run on the command line: ', h('code', {}, cliCommand(ctx.settings))),
      h(
        'div',
        { class: 'columns' },
        h('div', { class: 'settings' }, scenarioControls(ctx), sliderControls(ctx, params)),
        h('div', { class: 'try' }, h('h3', {}, 'Try these'), presets),
      ),
      h(
        'p',
        { class: 'note' },
        'All numbers here come from a model: the library’s own limiter, controller and attempt loop against a model API, ' +
          'on a virtual clock. Rates are in units per minute, for all instances together unless a line says otherwise.',
      ),
    );
  }

  /** Starts the run from the beginning (the page calls it once the view is in the document). */
  start(): void {
    this.#stop();
    const settings = this.#ctx.settings;
    const params = paramsOf(settings);
    const mode = modesOf(settings)[0];
    if (mode === undefined) return;
    this.#plot?.destroy();
    this.#chartBox.replaceChildren();
    this.#plot = liveChart(this.#chartBox, params.instances, widthOf(this.#chartBox));
    this.#live = undefined;
    this.#drawn = -1;
    this.#done = false;
    const pacer = new Pacer(settings.speed);
    this.#pacer = pacer;
    this.#playButton.textContent = 'Pause';
    const total = clockTime(params.minutes * 60);
    const scenario = findScenario(settings.scenario)?.name ?? settings.scenario;
    runMode(scenario, params, mode, {
      series: true,
      pace: pacer.pace,
      onSecond: (live) => {
        this.#live = live;
      },
    }).then(
      () => {
        if (this.#pacer !== pacer) return;
        this.#done = true;
        this.#draw();
        this.#status.textContent = `${total} of ${total}: done. Reset to run it again.`;
        this.#status.dataset.done = 'true';
        this.#playButton.textContent = 'Play';
      },
      (error: unknown) => {
        if (error instanceof StoppedError || this.#pacer !== pacer) return;
        this.#done = true;
        cancelAnimationFrame(this.#frame);
        this.#playButton.textContent = 'Play';
        // A setting the limiter refuses (an initial rate above the maximum): say which, as the CLI does.
        this.#status.textContent = `Stopped: ${(error as Error).message}`;
        if (error instanceof ConfigError) return;
        this.#status.dataset.error = 'true';
        console.error(error);
      },
    );
    const loop = () => {
      if (this.#pacer !== pacer) return;
      this.#draw();
      const at = this.#live === undefined ? 0 : this.#live.second;
      if (!this.#done) {
        const state = pacer.paused
          ? 'paused'
          : `running at ${pacer.speed === 'max' ? 'max' : `${pacer.speed}x`}`;
        this.#status.textContent = `${clockTime(at)} of ${total}, ${state}`;
        this.#frame = requestAnimationFrame(loop);
      }
    };
    this.#frame = requestAnimationFrame(loop);
  }

  /** Changes the speed of the run in progress. */
  set speed(speed: PageContext['settings']['speed']) {
    if (this.#pacer) this.#pacer.speed = speed;
  }

  destroy(): void {
    this.#stop();
    this.#plot?.destroy();
  }

  #stop(): void {
    cancelAnimationFrame(this.#frame);
    this.#pacer?.stop();
    this.#pacer = undefined;
  }

  #togglePlay(): void {
    const pacer = this.#pacer;
    if (this.#done || pacer === undefined) {
      this.start();
      return;
    }
    if (pacer.paused) pacer.resume();
    else pacer.pause();
    this.#playButton.textContent = pacer.paused ? 'Play' : 'Pause';
  }

  #draw(): void {
    const live = this.#live;
    if (live === undefined || live.second === this.#drawn) return;
    this.#drawn = live.second;
    for (const c of COUNTERS) this.#counters.get(c.key)!.textContent = c.read(live);
    this.#plot?.setData(liveData(live.series, live.series.rates.length));
  }
}

function last<T>(xs: readonly T[]): T | undefined {
  return xs[xs.length - 1];
}
