import { findScenario } from '../../src/simulate/scenarios.js';
import { type Settings, scenariosFor } from './settings.js';

/** One "Try these" entry: a title, what to watch, and the setting it runs. */
export interface Preset {
  title: string;
  text: string;
  settings: Partial<Settings>;
}

/**
 * The presets the "Rate controllers" page gives each controller. Each runs a simulator scenario
 * when there is one (`try-aimd-step-600`), else the steady setting with the slider it names.
 */
const PAGE_PRESETS: Record<
  string,
  {
    title: string;
    text: string;
    scenario: string;
    values?: Record<string, number>;
    speed?: Settings['speed'];
  }[]
> = {
  aimd: [
    {
      title: 'Saw tooth.',
      text: 'Watch the steps of 60 units/min for each of the 2 instances, and the 30% cut at the limit.',
      scenario: 'steady',
    },
    {
      title: 'Bigger steps.',
      text: 'An increaseStep of 600: the rate climbs 5 times faster and finds the limit sooner.',
      scenario: 'try-aimd-step-600',
      values: { 'aimd.increaseStep': 600 },
    },
    {
      title: 'Quota drop.',
      text: 'Another client takes half of the quota for 60 seconds.',
      scenario: 'quota-drop',
    },
  ],
  cubic: [
    {
      title: 'The first seconds.',
      text: 'At 1x, watch the rate leave the initial value after about 5 seconds.',
      scenario: 'steady',
      speed: 1,
    },
    {
      title: 'Maximum below the quota.',
      text: 'maxUnitsPerMinute 2,700, below the hidden quota of 3,000: the rate stays at the maximum with few 429s.',
      scenario: 'try-cubic-max-2700',
      values: { maxUnitsPerMinute: 2_700 },
    },
    {
      title: 'Quota drop.',
      text: 'Another client takes half of the quota for 60 seconds.',
      scenario: 'quota-drop',
    },
  ],
  probe: [
    {
      title: 'An LLM API.',
      text:
        'Tokens and requests metered at once (40,000 tokens/min, 500 requests/min), requests of heavy-tailed sizes, ' +
        'buckets of a minute, then three times the demand for 30 seconds. Rates are in tokens/min.',
      scenario: 'llm',
    },
  ],
};

/**
 * A controller's presets: the page's own, then every other simulator scenario that runs this
 * controller (so new scenarios appear here as they are added).
 */
export function presetsFor(controller: string): Preset[] {
  const presets: Preset[] = [];
  const used = new Set<string>();
  for (const p of PAGE_PRESETS[controller] ?? []) {
    const exists = findScenario(p.scenario) !== undefined;
    const scenario = exists ? p.scenario : 'steady';
    used.add(scenario);
    const values = new Map<string, number[]>();
    // The scenario carries its own setting; without it, the slider does.
    if (!exists) for (const [k, v] of Object.entries(p.values ?? {})) values.set(k, [v]);
    presets.push({
      title: p.title,
      text: p.text,
      settings: { scenario, values, ...(p.speed !== undefined ? { speed: p.speed } : {}) },
    });
  }
  for (const s of scenariosFor(controller)) {
    if (used.has(s.name)) continue;
    presets.push({
      title: `${s.name}.`,
      text: s.description,
      settings: { scenario: s.name, values: new Map() },
    });
  }
  return presets;
}
