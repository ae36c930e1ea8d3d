import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controllerViews } from '../playground/src/settings.js';
import { main } from '../src/simulate/cli.js';
import type { ModeResult } from '../src/simulate/run.js';
import { tableCells } from '../src/simulate/table.js';
import { type PlaygroundBrowser, SCREENSHOTS, startPlayground } from './helpers/playground-browser.js';

// The playground in Debian's chromium: built once, served on 127.0.0.1, one browser for all.
let pg: PlaygroundBrowser;

beforeAll(async () => {
  pg = await startPlayground();
}, 120_000);

afterAll(async () => {
  await pg?.close();
});

/** `npm run simulate -- ARGS --json`, as parsed JSON. */
async function simulateJson(args: string[]): Promise<ModeResult[]> {
  let out = '';
  const io = {
    stdout: { write: (t: string) => (out += t) },
    stderr: { write: () => true },
    cwd: process.cwd(),
  };
  expect(await main([...args, '--json'], io)).toBe(0);
  return JSON.parse(out) as ModeResult[];
}

const withoutWall = (results: readonly ModeResult[]) => results.map(({ wallMs: _w, ...rest }) => rest);

async function counters(page: Page): Promise<Record<string, string>> {
  return page.$$eval('[data-counter]', (els) =>
    Object.fromEntries(els.map((el) => [(el as HTMLElement).dataset.counter!, el.textContent ?? ''])),
  );
}

/**
 * Every chart of the page draws its series within its plot: each y-scale is finite and spans
 * the values its series hold (none infinite), and a linear scale has values to draw. An empty
 * chart (flat lines at the bottom, no y-scale) fails. The charts write their scales to
 * `data-scales` at each draw (playground/src/charts.ts).
 */
async function expectChartsDraw(page: Page, atLeast: number): Promise<void> {
  // The charts draw again in the next frame after their data changes.
  await page.evaluate(
    () => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))),
  );
  const charts = await page.$$eval('.uplot', (els) =>
    els.map((el, i) => ({ chart: i, scales: (el as HTMLElement).dataset.scales ?? 'undefined' })),
  );
  expect(charts.length).toBeGreaterThanOrEqual(atLeast);
  const problems: string[] = [];
  for (const { chart, scales } of charts) {
    if (scales === 'undefined') {
      problems.push(`chart ${chart}: never drawn`);
      continue;
    }
    const parsed = JSON.parse(scales) as Record<
      string,
      {
        min: number | null;
        max: number | null;
        log: boolean;
        dataMin: number | null;
        dataMax: number | null;
        nonFinite: number;
      }
    >;
    for (const [key, s] of Object.entries(parsed)) {
      const where = `chart ${chart}, scale ${key}: ${JSON.stringify(s)}`;
      if (s.min === null || s.max === null || !(s.min < s.max)) problems.push(`${where}: no finite range`);
      else if (
        s.dataMin !== null &&
        s.dataMax !== null &&
        (s.dataMin < s.min || s.dataMax > s.max * (1 + 1e-9))
      )
        problems.push(`${where}: data outside the scale`);
      if (s.nonFinite > 0) problems.push(`${where}: infinite values`);
      if (!s.log && s.dataMax === null) problems.push(`${where}: nothing to draw`);
    }
  }
  expect(problems).toEqual([]);
}

async function screenshot(page: Page, name: string): Promise<void> {
  // The charts' legends are set back on the newest values in the next frame.
  await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(resolve)));
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

describe('the playground in a browser', () => {
  const views = controllerViews().map((v) => v.controller);

  it('has a view per built-in controller', () => {
    expect(views).toEqual(expect.arrayContaining(['aimd', 'cubic']));
  });

  it.each(views)(
    'opens the %s view running: its counters move, no console error',
    async (view) => {
      const { page, errors } = await pg.open(`?view=${view}&speed=60`);
      const used = page.locator('[data-counter="used60"]');
      await expect.poll(() => used.textContent(), { timeout: 30_000 }).not.toBe('0');
      const first = await counters(page);
      await expect
        .poll(async () => (await counters(page)).used60, { timeout: 30_000 })
        .not.toBe(first.used60);
      expect(await page.locator('[data-tab][aria-current="page"]').getAttribute('data-tab')).toBe(view);
      await expectChartsDraw(page, 1);
      await screenshot(page, view);
      expect(errors).toEqual([]);
      await page.close();
    },
    120_000,
  );

  it('runs a preset: "Bigger steps" sets increaseStep to 600 and runs the simulator\'s numbers', async () => {
    const { page, errors } = await pg.open('?view=aimd&scenario=steady&seed=42&speed=max');
    const step = page.locator('input[data-key="aimd.increaseStep"]');
    expect(await step.inputValue()).toBe('120');
    await expect.poll(() => page.locator('[data-counter="used60"]').textContent()).not.toBe('0');

    await page.getByRole('button', { name: 'Bigger steps.' }).click();
    expect(await page.locator('input[data-key="aimd.increaseStep"]').inputValue()).toBe('600');
    expect(new URL(page.url()).searchParams.get('aimd.increaseStep')).toBe('600');
    await page.locator('#status[data-done="true"]').waitFor({ timeout: 60_000 });
    const after = await counters(page);

    // The end of the run is the simulator's for the preset's scenario and seed (not steady's).
    const [cli] = await simulateJson(['--scenario', 'try-aimd-step-600', '--modes', 'aimd', '--series']);
    const s = cli!.series!;
    const n = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
    expect(after).toEqual({
      used60: n.format(s.used60.at(-1)!),
      sum: n.format(s.sumRate.at(-1)!),
      throttled: n.format(cli!.throttled),
      queued: n.format(s.queued.at(-1)!),
      p95: `${cli!.p95WaitSeconds.toFixed(1)} s`,
      rejected: n.format(cli!.rejected + cli!.gaveUp),
    });
    expect(errors).toEqual([]);
    await page.close();
  }, 120_000);

  it('runs the setting a link holds', async () => {
    const { page, errors } = await pg.open(
      '?view=cubic&scenario=quota-drop&seed=9&speed=1&quota=2000&cubic.beta=0.6',
    );
    expect(await page.locator('#scenario').inputValue()).toBe('quota-drop');
    expect(await page.locator('#seed').inputValue()).toBe('9');
    expect(await page.locator('input[data-key="quota"]').inputValue()).toBe('2000');
    expect(await page.locator('input[data-key="cubic.beta"]').inputValue()).toBe('0.6');
    expect(await page.locator('[data-speed="1"]').getAttribute('aria-pressed')).toBe('true');
    const q = new URL(page.url()).searchParams;
    expect([q.get('view'), q.get('scenario'), q.get('seed'), q.get('speed'), q.get('quota')]).toEqual([
      'cubic',
      'quota-drop',
      '9',
      '1',
      '2000',
    ]);
    expect(errors).toEqual([]);
    await page.close();
  }, 120_000);

  it('compares the modes: the table and the numbers are npm run simulate -- --json', async () => {
    const { page, errors } = await pg.open(
      '?view=compare&scenario=quota-drop&seed=7&speed=max&quota=2400&instances=3',
    );
    // The command the page shows for the same runs, run here while the page runs.
    const command = (await page.locator('.cli code').textContent()) ?? '';
    expect(command).toBe('npm run simulate -- --scenario quota-drop --seed 7 --instances 3 --quota 2400');
    const fromCli = simulateJson(command.replace('npm run simulate -- ', '').split(' '));
    await page.locator('#status[data-done="true"]').waitFor({ timeout: 90_000 });
    const cells = await page.$$eval('#compare-table tr', (rows) =>
      rows.map((row) => Array.from(row.children, (c) => c.textContent ?? '')),
    );
    const pageJson = JSON.parse((await page.locator('#compare-json').textContent()) ?? '[]') as ModeResult[];
    const cli = await fromCli;
    const { header, rows } = tableCells(cli);
    expect(cli.length).toBeGreaterThanOrEqual(4);
    expect(cells).toEqual([header, ...rows]);
    expect(withoutWall(pageJson)).toEqual(withoutWall(cli));
    // A row of charts per quantity, a column per mode (no rate chart without a limiter): every one draws.
    const none = cli.filter((r) => r.mode === 'none').length;
    expect(none).toBe(1);
    await expectChartsDraw(page, 4 * cli.length - none);
    expect(await page.locator('.no-chart').count()).toBe(none);
    await screenshot(page, 'compare');
    expect(errors).toEqual([]);
    await page.close();
  }, 120_000);

  it('shows the --html report with a summary on top, one y-scale per chart row and legends with values', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'report-'));
    try {
      const file = join(dir, 'report.html');
      const args = ['--scenario', 'steady,quota-drop', '--minutes', '6'];
      // One run gives the page and the JSON to check it against.
      const results = await simulateJson([...args, '--html', file]);

      const page = await pg.context.newPage();
      const errors: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      page.on('pageerror', (e) => errors.push(String(e)));
      await page.goto(pathToFileURL(file).href);
      await page.evaluate(
        () => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))),
      );

      // The first table sums up every scenario and mode, with the CLI's cells.
      const expected = tableCells(results);
      const summary = await page.$$eval(
        'table',
        (tables, columns) =>
          Array.from(tables[0]!.querySelectorAll('tbody tr'), (tr) =>
            Array.from(tr.children, (c) => c.textContent ?? '').slice(-columns),
          ),
        expected.header.length,
      );
      expect(summary).toEqual(expected.rows);

      // Each row of a scenario's grid: the same y-scale for every mode; 429s on a log scale.
      const charts = await page.$$eval('.chart[data-top]', (els) =>
        els.map((el) => {
          const d = (el as HTMLElement).dataset;
          return { row: `${d.g}/${d.kind}`, top: d.top, scale: d.scale };
        }),
      );
      expect(charts.length).toBeGreaterThan(8);
      const rows = new Map<string, Set<string>>();
      for (const c of charts) rows.set(c.row, (rows.get(c.row) ?? new Set()).add(`${c.top} ${c.scale}`));
      expect([...rows.values()].map((tops) => tops.size)).toEqual([...rows.values()].map(() => 1));
      expect(
        [...rows.entries()]
          .filter(([row]) => row.endsWith('/throttled'))
          .map(([, t]) => [...t][0]!.split(' ')[1]),
      ).toEqual(['log', 'log']);

      // Legends read the last values, not blanks.
      const values = await page.$$eval('.u-legend .u-value', (els) => els.map((el) => el.textContent ?? ''));
      expect(values.filter((v) => v === '' || v === '--')).toEqual([]);
      await page.screenshot({ path: join(SCREENSHOTS, 'report.png'), fullPage: true });
      expect(errors).toEqual([]);
      await page.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
