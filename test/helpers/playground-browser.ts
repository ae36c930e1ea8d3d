import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { build, type PreviewServer, preview } from 'vite';

/** Debian's chromium (`.ci/install-chromium` installs it); `CHROMIUM` names another. */
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

/** Where the test run writes a screenshot per view (gitignored). */
export const SCREENSHOTS = resolve('.screenshots');

/** Headless, quiet, and with nothing of the machine's own profile. */
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** The built playground served on 127.0.0.1 (a free port), and one browser for every page. */
export interface PlaygroundBrowser {
  url: string;
  context: BrowserContext;
  /** Opens a page that records its console errors and uncaught exceptions in `errors`. */
  open(search: string): Promise<{ page: Page; errors: string[] }>;
  close(): Promise<void>;
}

export async function startPlayground(): Promise<PlaygroundBrowser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} not found: install chromium (.ci/install-chromium) or set CHROMIUM`);
  }
  const configFile = resolve('playground/vite.config.ts');
  const work = await mkdtemp(join(tmpdir(), 'playground-'));
  const outDir = join(work, 'site');
  await build({ configFile, logLevel: 'warn', build: { outDir } });
  const server: PreviewServer = await preview({
    configFile,
    logLevel: 'warn',
    build: { outDir },
    preview: { host: '127.0.0.1', port: 0, open: false },
  });
  const url = server.resolvedUrls?.local[0];
  if (url === undefined) throw new Error('the preview server has no address');
  // A fresh profile in its own directory (playwright passes it as --user-data-dir).
  const context = await chromium.launchPersistentContext(join(work, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1400, height: 1000 },
  });
  await mkdir(SCREENSHOTS, { recursive: true });
  return {
    url,
    context,
    async open(search) {
      const page = await context.newPage();
      const errors: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      page.on('pageerror', (e) => errors.push(String(e)));
      await page.goto(new URL(search, url).href);
      return { page, errors };
    },
    async close() {
      await context.close();
      await server.close();
      await rm(work, { recursive: true, force: true });
    },
  };
}
