import { ComparePage } from './compare-view.js';
import { ControllerPage } from './controller-view.js';
import type { PageContext } from './controls.js';
import { h } from './dom.js';
import {
  controllerViews,
  defaultScenario,
  formatSettings,
  parseSettings,
  type Settings,
  scenariosFor,
} from './settings.js';

/**
 * The playground: one view per built-in controller and "Compare the modes". The address holds
 * the whole setting (view, scenario, seed, speed, sliders), so a link runs the same thing.
 */
class Playground implements PageContext {
  settings: Settings;
  #page: ControllerPage | ComparePage | undefined;
  readonly #nav = h('nav', { class: 'tabs', 'aria-label': 'Views' });
  readonly #main = h('main');

  constructor(root: HTMLElement) {
    this.settings = parseSettings(location.search);
    root.replaceChildren(
      h(
        'header',
        {},
        h('h1', {}, 'adaptive-rate-limit playground'),
        h(
          'p',
          {},
          'The library’s limiter, controllers and attempt loop, run in your browser against a model API with a hidden quota, ' +
            'on a virtual clock: the same code and the same numbers as ',
          h('code', {}, 'npm run simulate'),
          '.',
        ),
      ),
      this.#nav,
      this.#main,
    );
    window.addEventListener('popstate', () => {
      this.settings = parseSettings(location.search);
      this.#render();
    });
    this.#render();
    history.replaceState(null, '', formatSettings(this.settings));
  }

  change(next: Partial<Settings>): void {
    const onlySpeed = Object.keys(next).every((k) => k === 'speed');
    let settings = { ...this.settings, ...next };
    if (next.view !== undefined && next.view !== this.settings.view) {
      // Another view keeps the scenario when it runs there, and the seed and speed.
      const keep = scenariosFor(next.view).some((s) => s.name === settings.scenario);
      settings = {
        ...settings,
        scenario: keep ? settings.scenario : defaultScenario(next.view),
        values: new Map(),
      };
    }
    this.settings = settings;
    history.pushState(null, '', formatSettings(settings));
    if (onlySpeed && this.#page !== undefined) {
      this.#page.speed = settings.speed;
      for (const b of document.querySelectorAll<HTMLButtonElement>('[data-speed]')) {
        b.setAttribute('aria-pressed', String(b.dataset.speed === String(settings.speed)));
      }
      return;
    }
    this.#render();
  }

  #render(): void {
    this.#page?.destroy();
    this.#nav.replaceChildren(
      ...[
        ...controllerViews().map((v) => [v.controller, v.mode.label]),
        ['compare', 'Compare the modes'],
      ].map(([view, label]) =>
        h(
          'a',
          {
            href: formatSettings({ ...this.settings, view: view!, values: new Map() }),
            'data-tab': view!,
            'aria-current': view === this.settings.view ? 'page' : undefined,
            onclick: (e: Event) => {
              e.preventDefault();
              this.change({ view: view! });
            },
          },
          label!,
        ),
      ),
    );
    const view = controllerViews().find((v) => v.controller === this.settings.view);
    this.#page = view === undefined ? new ComparePage(this) : new ControllerPage(this, view);
    this.#main.replaceChildren(this.#page.el);
    this.#page.start();
  }
}

new Playground(document.getElementById('app')!);
