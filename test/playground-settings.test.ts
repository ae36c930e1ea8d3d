import { describe, expect, it } from 'vitest';
import { presetsFor } from '../playground/src/presets.js';
import {
  cliCommand,
  controllerSliders,
  controllerViews,
  formatSettings,
  modesOf,
  paramsOf,
  parseSettings,
} from '../playground/src/settings.js';
import { BUILT_IN_MODES, cloneParams, findScenario } from '../src/simulate/scenarios.js';

// The playground's settings (no browser needed): what it reads from the simulator's definitions,
// and how an address maps to a run.

describe('playground settings', () => {
  it('offers the LLM API scenario as a preset, with its heavy-tailed tokens', () => {
    const preset = presetsFor('probe').find((p) => p.settings.scenario === 'llm');
    expect(preset?.title).toBe('An LLM API.');
    const params = paramsOf({ ...parseSettings('?view=probe&scenario=llm'), values: new Map() });
    expect(params.llm).toEqual({ requestsPerMinute: 500 });
    expect(params.unitsPerRequest.tail).toBe(1.5);
    expect(modesOf(parseSettings('?view=compare&scenario=llm')).map((m) => m.label)).toContain('Probe');
  });

  it('makes a view of each controller that a built-in mode runs', () => {
    const views = controllerViews();
    // Each from a built-in mode, each controller once; none for the modes without a controller.
    expect(
      views.map((v) => v.mode.name).filter((m) => !(BUILT_IN_MODES as readonly string[]).includes(m)),
    ).toEqual([]);
    expect(new Set(views.map((v) => v.controller)).size).toBe(views.length);
    expect(views.map((v) => v.controller)).not.toContain('none');
    expect(views.map((v) => v.controller)).not.toContain('fixed');
    expect(views.slice(0, 2).map((v) => [v.controller, v.mode.label])).toEqual([
      ['aimd', 'AIMD'],
      ['cubic', 'CUBIC'],
    ]);
  });

  it("gives a slider to every number of a controller's options, by kind", () => {
    const params = cloneParams(findScenario('steady')!.params);
    // A controller the page has never heard of: its options still get sliders.
    (params.limiter as unknown as Record<string, unknown>).probe = {
      backoffFactor: 0.5,
      probeInterval: 5_000,
      gain: 3,
    };
    const sliders = controllerSliders('probe', params);
    expect(sliders.map((s) => [s.key, s.min, s.max, s.step])).toEqual([
      ['probe.backoffFactor', 0.05, 0.95, 0.05],
      ['probe.probeInterval', 500, 30_000, 500],
      ['probe.gain', 0.2, 40, 0.2],
    ]);
    sliders[2]!.set(params, 7);
    expect(sliders[2]!.get(params)).toBe(7);
  });

  it('reads an address into a run and writes it back', () => {
    const settings = parseSettings(
      '?view=aimd&scenario=quota-drop&seed=9&speed=60&quota=2000&aimd.increaseStep=600',
    );
    expect([settings.view, settings.scenario, settings.seed, settings.speed]).toEqual([
      'aimd',
      'quota-drop',
      9,
      60,
    ]);
    const params = paramsOf(settings);
    expect([params.quota, params.seed, params.limiter.aimd.increaseStep]).toEqual([2000, 9, 600]);
    expect(params.quotaEvents).toEqual(findScenario('quota-drop')!.params.quotaEvents);
    expect(modesOf(settings).map((m) => m.name)).toEqual(['aimd']);
    expect(parseSettings(formatSettings(settings))).toEqual(
      expect.objectContaining({ view: 'aimd', scenario: 'quota-drop', seed: 9, speed: 60 }),
    );
    expect(paramsOf(parseSettings(formatSettings(settings)))).toEqual(params);
    expect(cliCommand(settings)).toBe(
      'npm run simulate -- --scenario quota-drop --modes aimd --seed 9 --quota 2000 --increase-step 600',
    );
  });

  it('falls back to defaults for what an address lacks or gets wrong', () => {
    const settings = parseSettings('?view=nope&scenario=nope&seed=-1&speed=7&quota=abc');
    expect([settings.view, settings.scenario, settings.seed, settings.speed]).toEqual([
      'aimd',
      'steady',
      42,
      10,
    ]);
    expect(settings.values.size).toBe(0);
    const compare = parseSettings('?view=compare');
    expect([compare.scenario, compare.speed]).toEqual(['quota-drop', 'max']);
    expect(modesOf(compare).map((m) => m.label)).toEqual([
      'No limiter',
      'Fixed rate',
      'AIMD',
      'CUBIC',
      'Probe',
      'Defaults',
    ]);
  });
});
