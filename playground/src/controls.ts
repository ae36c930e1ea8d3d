import type { SimParams } from '../../src/simulate/scenarios.js';
import { h } from './dom.js';
import { type Settings, type Slider, SPEEDS, scenariosFor, slidersFor } from './settings.js';

/** What a view may ask of the page: a new setting (the page reruns it and updates the address). */
export interface PageContext {
  settings: Settings;
  /** Applies a change of the setting; anything but the speed starts the run again. */
  change(next: Partial<Settings>): void;
}

/** The speed buttons; `onSpeed` changes the running pacer too. */
export function speedButtons(ctx: PageContext): HTMLElement {
  const group = h('div', { class: 'speeds', role: 'group', 'aria-label': 'Speed' }, h('span', {}, 'Speed'));
  for (const speed of SPEEDS) {
    group.append(
      h(
        'button',
        {
          type: 'button',
          'data-speed': String(speed),
          'aria-pressed': String(ctx.settings.speed === speed),
          title: speed === 'max' ? 'As fast as the browser can' : `${speed} virtual seconds per second`,
          onclick: () => ctx.change({ speed }),
        },
        speed === 'max' ? 'max' : `${speed}x`,
      ),
    );
  }
  return group;
}

/** The scenario and the seed. */
export function scenarioControls(ctx: PageContext): HTMLElement {
  const { settings } = ctx;
  const select = h('select', {
    id: 'scenario',
    onchange: (e: Event) =>
      ctx.change({ scenario: (e.target as HTMLSelectElement).value, values: new Map() }),
  });
  for (const s of scenariosFor(settings.view)) {
    const option = h('option', { value: s.name, title: s.description }, s.name);
    option.selected = s.name === settings.scenario;
    select.append(option);
  }
  const seed = h('input', {
    id: 'seed',
    type: 'number',
    min: 0,
    step: 1,
    value: settings.seed,
    onchange: (e: Event) => {
      const value = Number((e.target as HTMLInputElement).value);
      if (Number.isInteger(value) && value >= 0) ctx.change({ seed: value });
    },
  });
  const description = scenariosFor(settings.view).find((s) => s.name === settings.scenario)?.description;
  return h(
    'div',
    { class: 'scenario' },
    h('label', { for: 'scenario' }, 'Scenario'),
    select,
    h('label', { for: 'seed' }, 'Seed'),
    seed,
    description ? h('p', { class: 'description' }, description) : null,
  );
}

/** A slider per parameter of the view; letting one go runs the new setting. */
export function sliderControls(ctx: PageContext, params: SimParams): HTMLElement {
  const box = h('div', { class: 'sliders' });
  for (const slider of slidersFor(ctx.settings.view, params)) box.append(sliderControl(ctx, slider, params));
  return box;
}

function sliderControl(ctx: PageContext, slider: Slider, params: SimParams): HTMLElement {
  const current = slider.get(params);
  const id = `slider-${slider.key.replace(/\W/g, '-')}`;
  const shown = h('output', { for: id, 'data-value': current }, slider.format(current));
  const input = h('input', {
    id,
    type: 'range',
    'data-key': slider.key,
    min: slider.min,
    max: Math.max(slider.max, current),
    step: slider.step,
    value: current,
    oninput: (e: Event) => {
      const v = Number((e.target as HTMLInputElement).value);
      shown.textContent = slider.format(v);
    },
    onchange: (e: Event) => {
      const v = Number((e.target as HTMLInputElement).value);
      const values = new Map(ctx.settings.values);
      values.set(slider.key, [v]);
      ctx.change({ values });
    },
  });
  // A value off the slider's grid (5,625) is shown as it is, not rounded to a step.
  input.value = String(current);
  return h('div', { class: 'slider' }, h('label', { for: id }, slider.label), input, shown);
}
