import { modesFor } from '../../src/simulate/modes.js';
import { builtInMode, limiterOptionsFor, type ModeSpec } from '../../src/simulate/run.js';
import {
  BUILT_IN_MODES,
  cloneParams,
  findScenario,
  fitDemand,
  type ModeName,
  SCENARIOS,
  type Scenario,
  type SimParams,
} from '../../src/simulate/scenarios.js';

/** Virtual seconds per real second, or as fast as the browser runs it. */
export type Speed = 1 | 10 | 60 | 'max';
export const SPEEDS: readonly Speed[] = [1, 10, 60, 'max'];

/** A controller's view (`aimd`, `cubic`, ...) or the comparison of every mode. */
export interface ControllerView {
  kind: 'controller';
  /** The controller's name, as the `controller` option takes it. */
  controller: string;
  /** The simulator's mode that runs it. */
  mode: ModeSpec;
}

/**
 * The views, read from the simulator's own definitions: one per built-in controller that a
 * built-in mode runs (the mode whose limiter options name it), in the simulator's order.
 */
export function controllerViews(): ControllerView[] {
  const base = SCENARIOS[0]!.params;
  const views: ControllerView[] = [];
  for (const name of BUILT_IN_MODES) {
    const mode = builtInMode(name);
    const controller = limiterOptionsFor(mode, base)?.controller;
    if (typeof controller !== 'string' || views.some((v) => v.controller === controller)) continue;
    // The mode named after the controller runs it, when there is one (not a variant of it).
    const own = (BUILT_IN_MODES as readonly string[]).includes(controller)
      ? builtInMode(controller as Exclude<ModeName, 'custom'>)
      : mode;
    views.push({ kind: 'controller', controller, mode: own });
  }
  return views;
}

/** Everything a page shows and runs: what its URL holds. */
export interface Settings {
  /** A controller's name, or `compare`. */
  view: string;
  scenario: string;
  seed: number;
  speed: Speed;
  /** Slider values that differ from the scenario's, by slider key. */
  values: Map<string, number[]>;
}

/** One slider: a number of the simulator's parameters. */
export interface Slider {
  /** Its name in the URL. */
  key: string;
  label: string;
  min: number;
  max: number;
  step: number;
  /** How a value reads: `3,000 units/min`, `10 s`. */
  format(value: number): string;
  get(params: SimParams): number;
  set(params: SimParams, value: number): void;
}

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const decimal = new Intl.NumberFormat('en-US', { maximumFractionDigits: 3 });
const perMinute = (v: number) => `${integer.format(v)} units/min`;
const seconds = (v: number) => `${decimal.format(v / 1000)} s`;

const INSTANCES: Slider = {
  key: 'instances',
  label: 'Instances',
  min: 1,
  max: 20,
  step: 1,
  format: (v) => integer.format(v),
  get: (p) => p.instances,
  set: (p, v) => {
    // The demand list is used in turn: keep one value per instance so that each keeps its own.
    p.demand = Array.from({ length: v }, (_, i) => p.demand[i % p.demand.length]!);
    p.instances = v;
  },
};

const QUOTA: Slider = {
  key: 'quota',
  label: 'Hidden quota',
  min: 300,
  max: 12_000,
  step: 100,
  format: perMinute,
  get: (p) => p.quota,
  set: (p, v) => {
    p.quota = v;
  },
};

/** The mean demand of an instance; moving it scales every instance's demand alike. */
const DEMAND: Slider = {
  key: 'demand',
  label: 'Demand per instance',
  min: 0,
  max: 8_000,
  step: 100,
  format: perMinute,
  get: (p) => Math.round(mean(fitDemand(p.demand, p.instances))),
  set: (p, v) => {
    const list = fitDemand(p.demand, p.instances);
    const m = mean(list);
    p.demand = m > 0 ? list.map((d) => Math.round((d * v) / m)) : list.map(() => v);
  },
};

function limiterSlider(
  key: 'initialUnitsPerMinute' | 'maxUnitsPerMinute' | 'fixedUnitsPerMinute',
  label: string,
): Slider {
  return {
    key,
    label,
    min: 100,
    max: 12_000,
    step: 100,
    format: perMinute,
    get: (p) => p.limiter[key],
    set: (p, v) => {
      p.limiter[key] = v;
    },
  };
}

/**
 * Sliders for a controller's options: every number under `params.limiter[controller]`, so a new
 * controller's options appear without a change here. The range follows the option's kind, read
 * from its name: a factor (0 to 1), a duration (ms), or a step or constant (up to 10 times its
 * default).
 */
export function controllerSliders(controller: string, params: SimParams): Slider[] {
  const options = (params.limiter as unknown as Record<string, unknown>)[controller];
  if (typeof options !== 'object' || options === null) return [];
  const sliders: Slider[] = [];
  for (const [name, value] of Object.entries(options)) {
    if (typeof value !== 'number') continue;
    const read = (p: SimParams) =>
      (p.limiter as unknown as Record<string, Record<string, number>>)[controller]!;
    const common = {
      key: `${controller}.${name}`,
      label: `${controller}.${name}`,
      get: (p: SimParams) => read(p)[name]!,
      set: (p: SimParams, v: number) => {
        read(p)[name] = v;
      },
    };
    if (/factor|beta|fraction/i.test(name)) {
      sliders.push({ ...common, min: 0.05, max: 0.95, step: 0.05, format: (v) => decimal.format(v) });
    } else if (/interval|cooldown|wait|pause|ms$|time$|hold$|^round$/i.test(name)) {
      const step = niceStep(value / 10);
      sliders.push({ ...common, min: step, max: step * 60, step, format: seconds });
    } else {
      const step = niceStep(value / 20);
      const unit = /step|rate|units/i.test(name) ? perMinute : (v: number) => decimal.format(v);
      sliders.push({ ...common, min: step, max: step * 200, step, format: unit });
    }
  }
  return sliders;
}

/** The sliders of a view: the model's, the limiter's rates, and the controller's options. */
export function slidersFor(view: string, params: SimParams): Slider[] {
  const model = [INSTANCES, QUOTA, DEMAND];
  if (view === 'compare') return [...model, limiterSlider('fixedUnitsPerMinute', 'Fixed rate')];
  return [
    ...model,
    limiterSlider('initialUnitsPerMinute', 'Initial rate'),
    limiterSlider('maxUnitsPerMinute', 'Maximum rate'),
    ...controllerSliders(view, params),
  ];
}

/** The scenarios a view can run: every one for the comparison; those that run its mode for a controller. */
export function scenariosFor(view: string): Scenario[] {
  if (view === 'compare') return [...SCENARIOS];
  const mode = controllerViews().find((v) => v.controller === view)?.mode.name;
  return SCENARIOS.filter((s) => mode !== undefined && s.modes.includes(mode));
}

/** The scenario a view opens with: the page's comparison has a quota drop. */
export function defaultScenario(view: string): string {
  const names = scenariosFor(view).map((s) => s.name);
  const preferred = view === 'compare' ? 'quota-drop' : 'steady';
  return names.includes(preferred) ? preferred : (names[0] ?? 'steady');
}

/** The parameters a setting runs: its scenario's, with its seed and sliders. */
export function paramsOf(settings: Settings): SimParams {
  const scenario = findScenario(settings.scenario) ?? SCENARIOS[0]!;
  const params = cloneParams(scenario.params);
  params.seed = settings.seed;
  for (const slider of slidersFor(settings.view, params)) {
    const value = settings.values.get(slider.key);
    if (slider.key === 'demand' && value !== undefined && value.length > 1) {
      params.demand = [...value];
    } else if (value !== undefined && value[0] !== undefined) {
      slider.set(params, value[0]);
    }
  }
  return params;
}

/** The modes a setting runs: its controller's, or every mode of its scenario (shared rows too). */
export function modesOf(settings: Settings): ModeSpec[] {
  const scenario = findScenario(settings.scenario) ?? SCENARIOS[0]!;
  if (settings.view === 'compare')
    return modesFor(scenario.modes, undefined, false, scenario.shared === true);
  const view = controllerViews().find((v) => v.controller === settings.view);
  return view === undefined ? [] : [view.mode];
}

/** Reads a page address; anything missing or unknown takes its default. */
export function parseSettings(search: string): Settings {
  const q = new URLSearchParams(search);
  const views = [...controllerViews().map((v) => v.controller), 'compare'];
  const view = views.includes(q.get('view') ?? '') ? q.get('view')! : views[0]!;
  const scenarioNames = scenariosFor(view).map((s) => s.name);
  const scenario = scenarioNames.includes(q.get('scenario') ?? '')
    ? q.get('scenario')!
    : defaultScenario(view);
  const seedText = q.get('seed');
  const seed = seedText !== null && /^\d+$/.test(seedText) ? Number(seedText) : 42;
  const speedText = q.get('speed');
  const speed = SPEEDS.find((s) => String(s) === speedText) ?? (view === 'compare' ? 'max' : 10);
  const values = new Map<string, number[]>();
  const probe = cloneParams((findScenario(scenario) ?? SCENARIOS[0]!).params);
  for (const slider of slidersFor(view, probe)) {
    const text = q.get(slider.key);
    if (text === null) continue;
    const list = text.split(',').map(Number);
    if (list.length > 0 && list.every((x) => Number.isFinite(x) && x >= 0)) values.set(slider.key, list);
  }
  return { view, scenario, seed, speed, values };
}

/**
 * The address of a setting: view, scenario, seed, speed, then every slider's value (the
 * demand as one value per instance, as `--demand` takes it).
 */
export function formatSettings(settings: Settings): string {
  const q = new URLSearchParams();
  q.set('view', settings.view);
  q.set('scenario', settings.scenario);
  q.set('seed', String(settings.seed));
  q.set('speed', String(settings.speed));
  const params = paramsOf(settings);
  for (const slider of slidersFor(settings.view, params)) {
    const value =
      slider.key === 'demand' ? fitDemand(params.demand, params.instances).join(',') : slider.get(params);
    q.set(slider.key, String(value));
  }
  return `?${q.toString()}`;
}

function mean(xs: readonly number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length;
}

/** 1, 2 or 5 times a power of ten, at least `x`. */
function niceStep(x: number): number {
  if (!(x > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 5, 10]) if (m * power >= x - 1e-12) return m * power;
  return 10 * power;
}

/**
 * The same run on the command line: `npm run simulate` with the scenario, the view's modes, and
 * a flag for each value that differs from the scenario's (a slider's key, in kebab case, is the
 * flag: `aimd.increaseStep` is `--increase-step`).
 */
export function cliCommand(settings: Settings): string {
  const scenario = findScenario(settings.scenario) ?? SCENARIOS[0]!;
  const base = cloneParams(scenario.params);
  const params = paramsOf(settings);
  const args = ['--scenario', scenario.name];
  if (settings.view !== 'compare')
    args.push(
      '--modes',
      modesOf(settings)
        .map((m) => m.name)
        .join(','),
    );
  if (params.seed !== base.seed) args.push('--seed', String(params.seed));
  for (const slider of slidersFor(settings.view, params)) {
    const flag = `--${slider.key.replace(/^.*\./, '').replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
    if (slider.key === 'demand') {
      const now = fitDemand(params.demand, params.instances);
      if (now.join() !== fitDemand(base.demand, params.instances).join()) {
        args.push(flag, now.every((d) => d === now[0]) ? String(now[0]) : now.join(','));
      }
    } else if (slider.get(params) !== slider.get(base)) {
      args.push(flag, String(slider.get(params)));
    }
  }
  return `npm run simulate -- ${args.join(' ')}`;
}
