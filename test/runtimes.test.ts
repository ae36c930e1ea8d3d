import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// rateLimitedFetch and wrap(limiter, fn) on Deno, Bun and Cloudflare's workerd, each with its own
// fetch, against a local node:http server with a quota: the package is built as it is published
// and imported as `adaptive-rate-limit/fetch` (workerd: bundled by esbuild with the `workerd`
// condition, as wrangler bundles). The binaries come from the npm registry: .ci/run installs
// them and sets DENO_BIN, BUN_BIN and WORKERD_BIN (with ARL_RUNTIMES=required, a missing one
// fails); without them here, these tests are skipped. On workerd also: a pause nobody waits for
// where timers are numbers (an earlier compatibility date), a fetch wrapper in module scope
// shared by two requests at once, a limiter in module scope whose rate rises as it serves 30
// requests at once, each answering as soon as it is served, and one whose head's request answered
// without its call (it gave up waiting), the call left in the line.

const run = promisify(execFile);
const root = resolve('.');
const required = process.env.ARL_RUNTIMES === 'required';

function binary(env: string, cached: string): string | undefined {
  const path = process.env[env] ?? resolve('.ci/cache', cached);
  return existsSync(path) ? path : undefined;
}

const RUNTIMES = {
  deno: binary('DENO_BIN', 'deno-2.9.6/node_modules/@deno/linux-x64-glibc/deno'),
  bun: binary('BUN_BIN', 'bun-1.4.4/node_modules/@oven/bun-linux-x64/bin/bun'),
  workerd: binary(
    'WORKERD_BIN',
    'workerd-1.20261117.1/node_modules/@cloudflare/workerd-linux-64/bin/workerd',
  ),
};

/**
 * A server with a quota per path prefix (`/fetch/`, `/wrap/`): the third request of each is
 * answered 429 with Retry-After: 1, once; every other one 200. It counts what it answered.
 */
class QuotaServer {
  readonly answers = new Map<string, number[]>();
  readonly server: Server = createServer((req, res) => {
    const prefix = (req.url ?? '').split('/')[1] ?? '';
    const seen = this.answers.get(prefix) ?? [];
    this.answers.set(prefix, seen);
    const status = seen.length === 2 ? 429 : 200;
    seen.push(status);
    if (status === 429) res.writeHead(429, { 'retry-after': '1' }).end('slow down');
    else res.writeHead(200, { 'content-type': 'text/plain' }).end(`ok ${req.url}`);
  });

  get origin(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
}

let work: string;

beforeAll(async () => {
  if (!Object.values(RUNTIMES).some(Boolean)) return;
  // The package as published (dist from tsc, package.json's exports), in a project of its own
  // whose other packages are this checkout's.
  work = await mkdtemp(join(tmpdir(), 'arl-runtimes-'));
  const pkg = join(work, 'node_modules', 'adaptive-rate-limit');
  await mkdir(pkg, { recursive: true });
  for (const entry of await readdir(join(root, 'node_modules'))) {
    if (entry !== '.bin') await symlink(join(root, 'node_modules', entry), join(work, 'node_modules', entry));
  }
  const tsc = [
    join(root, 'node_modules/typescript/bin/tsc'),
    '-p',
    'tsconfig.build.json',
    '--outDir',
    join(pkg, 'dist'),
  ];
  try {
    await run(process.execPath, tsc, { cwd: root });
  } catch (error) {
    // tsc reports its errors on stdout: show them, not only "Command failed".
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`tsc ${tsc.slice(1).join(' ')} failed:\n${stdout ?? ''}${stderr ?? ''}`, {
      cause: error,
    });
  }
  await copyFile(join(root, 'package.json'), join(pkg, 'package.json'));
  await writeFile(
    join(work, 'package.json'),
    JSON.stringify({ name: 'runtimes-check', private: true, type: 'module' }),
  );
  for (const file of [
    'check.mjs',
    'main.mjs',
    'worker.mjs',
    'idle-pause.mjs',
    'shared-limiter.mjs',
    'rising-limiter.mjs',
    'gone-head.mjs',
  ])
    await copyFile(join(root, 'test/runtimes', file), join(work, file));
}, 120_000);

afterAll(async () => {
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

interface Report {
  statuses: number[];
  waited: number;
  pauses: number[];
  throttles: number;
  cuts: number;
}

async function withServer(check: (origin: string) => Promise<{ fetch: Report; wrap: Report }>) {
  const quota = new QuotaServer();
  quota.server.listen(0, '127.0.0.1');
  await once(quota.server, 'listening');
  try {
    const report = await check(quota.origin);
    for (const [prefix, part] of [
      ['fetch', report.fetch],
      ['wrap', report.wrap],
    ] as const) {
      // Every call ended 200: the 429 was sent again after its pause.
      expect(part.statuses, prefix).toEqual([200, 200, 200, 200, 200]);
      // What the server answered: five 200s and the one 429.
      expect(quota.answers.get(prefix)?.sort(), prefix).toEqual([200, 200, 200, 200, 200, 429]);
      // The 429 honoured: it paused the limiter for the Retry-After, and counted as a throttle.
      expect(part.pauses, prefix).toEqual([1000]);
      expect(part.throttles, prefix).toBe(1);
      // Paced: at 600 units/min, five calls at once do not all go at once.
      expect(part.waited, prefix).toBeGreaterThanOrEqual(3);
    }
  } finally {
    quota.server.closeAllConnections();
    quota.server.close();
  }
}

function parseReport(stdout: string) {
  return JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as { fetch: Report; wrap: Report };
}

function runtime(name: keyof typeof RUNTIMES) {
  const bin = RUNTIMES[name];
  if (bin === undefined && required)
    throw new Error(`${name} not found: .ci/run installs it (ARL_RUNTIMES=required)`);
  return it.skipIf(bin === undefined);
}

describe('the fetch wrapper and wrap on other runtimes', () => {
  runtime('deno')('Deno', { timeout: 60_000 }, async () => {
    await withServer(async (origin) => {
      const { stdout } = await run(
        RUNTIMES.deno!,
        ['run', '--allow-net', '--allow-read', '--allow-env', '--allow-sys', 'main.mjs', origin],
        { cwd: work, timeout: 50_000, env: { ...process.env, NO_COLOR: '1', DENO_NO_UPDATE_CHECK: '1' } },
      );
      return parseReport(stdout);
    });
  });

  runtime('bun')('Bun', { timeout: 60_000 }, async () => {
    await withServer(async (origin) => {
      const { stdout } = await run(RUNTIMES.bun!, ['main.mjs', origin], { cwd: work, timeout: 50_000 });
      return parseReport(stdout);
    });
  });

  runtime('workerd')('workerd', { timeout: 90_000 }, async () => {
    await bundleWorker('worker.mjs');
    await withServer(async (origin) => {
      const response = await serveWorker(
        (port) => `http://127.0.0.1:${port}/?origin=${encodeURIComponent(origin)}`,
      );
      expect(response.status).toBe(200);
      return (await response.json()) as { fetch: Report; wrap: Report };
    });
  });

  runtime('workerd')(
    'workerd whose timers are numbers (a compatibility date before 2026-02): a pause nobody waits for',
    { timeout: 90_000 },
    async () => {
      // The limiter's idle timer (the end of a pause with no waiter) called unref() on the
      // number: a TypeError out of permit.throttled() and out of a fetch answered 429.
      await bundleWorker('idle-pause.mjs');
      const quota = new QuotaServer();
      quota.server.listen(0, '127.0.0.1');
      await once(quota.server, 'listening');
      try {
        const response = await serveWorker(
          (port) => `http://127.0.0.1:${port}/?origin=${encodeURIComponent(quota.origin)}`,
          { compatibilityDate: '2026-01-01', compatibilityFlags: ['nodejs_compat'] },
        );
        expect(await response.json()).toEqual({
          timer: 'number',
          permit: 'paused',
          fetched: [200, 200, 429],
        });
      } finally {
        quota.server.closeAllConnections();
        quota.server.close();
      }
    },
  );

  runtime('workerd')(
    'workerd: a request waiting its turn behind another request of a limiter kept in module scope',
    { timeout: 90_000 },
    async () => {
      // A timer belongs to the request that armed it and ends with it, and a request that waits
      // with none of its own is cancelled as hung: the limiter's one timer, armed by the first
      // request for its own second call, left the second request nothing to wake it.
      await bundleWorker('shared-limiter.mjs');
      let queued: () => void = () => {};
      const server = createServer((req, res) => {
        if (req.url === '/queued') queued();
        res.writeHead(200, { 'content-type': 'text/plain' }).end(`ok ${req.url}`);
      });
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      const origin = encodeURIComponent(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
      try {
        const [first, second] = await withWorker(async (port) => {
          const base = `http://127.0.0.1:${port}/?origin=${origin}`;
          const secondQueued = new Promise<void>((resolve) => (queued = resolve));
          const first = get(`${base}&name=first&calls=2&tell=1`);
          // Sent once the first request's second call waits for its turn: this one waits behind it.
          await Promise.race([secondQueued, first]);
          const second = get(`${base}&name=second&calls=1`);
          return [await first, await second];
        });
        expect(first.status).toBe(200);
        expect(await first.json()).toEqual({ statuses: [200, 200] });
        expect(second.status, await second.clone().text()).toBe(200);
        expect(await second.json()).toEqual({ statuses: [200] });
      } finally {
        server.closeAllConnections();
        server.close();
      }
    },
  );

  runtime('workerd')(
    'workerd: 30 requests at once served in turn by a limiter kept in module scope whose rate rises, each answering as soon as it is served',
    { timeout: 90_000 },
    async () => {
      // Each answer ends the request that armed the limiter's timer, with its timers: the next in
      // line is woken by a timer its own request arms when told it is the head, in the
      // continuation of a promise it made, which workerd runs in that request. Run elsewhere, the
      // timer ended with the request that told it, and every later request waited for its
      // keep-alive at its deadline (maxWait 35 s): refused, 503, or cancelled as hung.
      await bundleWorker('rising-limiter.mjs');
      const responses = await withWorker(async (port) => {
        // The first alone: one that is refused a connection (workerd not listening yet) is tried again.
        const first = await get(`http://127.0.0.1:${port}/0`);
        const rest = Array.from({ length: 29 }, (_, i) => get(`http://127.0.0.1:${port}/${i + 1}`));
        return [first, ...(await Promise.all(rest))];
      });
      const answers = await Promise.all(responses.map(async (r) => `${r.status} ${await r.text()}`));
      expect(
        answers.filter((answer) => !answer.startsWith('200 ')),
        answers.join('\n'),
      ).toEqual([]);
    },
  );

  runtime('workerd')(
    'workerd: the requests waiting behind a call whose request answered without it (it gave up, its call left in the line) are served at their turns',
    { timeout: 90_000 },
    async () => {
      // The head's timers end with its request; the calls behind it kept only a keep-alive at
      // their deadline (maxWait 20 s): each waited 20 s, and two of three were refused (503).
      await bundleWorker('gone-head.mjs');
      const answers = await withWorker(async (port) => {
        const first = await get(`http://127.0.0.1:${port}/0`);
        const head = get(`http://127.0.0.1:${port}/head`);
        // Queued behind the head's call, which then gives up.
        await new Promise((r) => setTimeout(r, 100));
        const rest = [1, 2, 3].map((i) => get(`http://127.0.0.1:${port}/${i}`));
        return Promise.all(
          [first, head, ...rest].map(async (r) => `${(await r).status} ${await (await r).text()}`),
        );
      });
      expect(answers[1]).toBe('200 gave up');
      // Each a second or so after the one before it, from the head's turn (the rate rises as each is served).
      const waited = answers
        .slice(2)
        .map((answer) => (answer.startsWith('200 ') ? JSON.parse(answer.slice(4)).waited : answer));
      expect(
        waited.every((w) => typeof w === 'number' && w < 10_000),
        answers.join('\n'),
      ).toBe(true);
    },
  );
});

/**
 * Bundles test/runtimes/`entry` into bundle.mjs as wrangler does: the `workerd` and `worker`
 * conditions, Node's modules left to workerd's nodejs_compat (the default from compatibility date
 * 2026-08-04; node:os needs a 2026 date too).
 */
async function bundleWorker(entry: string): Promise<void> {
  await build({
    entryPoints: [join(work, entry)],
    outfile: join(work, 'bundle.mjs'),
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    conditions: ['workerd', 'worker', 'import'],
    mainFields: ['module', 'main'],
    external: ['node:*'],
    logLevel: 'silent',
  });
}

/** A Worker's compatibility date and flags (see workerd's compatibility-date.capnp). */
interface Compatibility {
  compatibilityDate: string;
  compatibilityFlags?: readonly string[];
}

const TESTED: Compatibility = { compatibilityDate: '2026-11-01' };

/**
 * Starts `workerd serve` on a free port and GETs `url(port)` once it listens. A workerd that
 * exits before it answers (the port taken meanwhile) is started again, at most 3 times; the
 * error says how each ended.
 */
function serveWorker(url: (port: number) => string, compatibility = TESTED): Promise<Response> {
  return withWorker((port) => get(url(port)), compatibility);
}

/** GETs `url`, its body read now: the worker's answer must not outlive the process. */
async function get(url: string): Promise<Response> {
  const response = await fetch(url, { signal: AbortSignal.timeout(40_000) });
  const body = await response.arrayBuffer();
  return new Response(body, { status: response.status, headers: response.headers });
}

/**
 * Starts `workerd serve` on a free port and runs `ask(port)` once it listens (until then `ask`
 * throws, its connection refused, and is tried again), then stops it. A workerd that exits before
 * `ask` ends is started again, at most 3 times; the error says how each ended.
 */
async function withWorker<T>(ask: (port: number) => Promise<T>, compatibility = TESTED): Promise<T> {
  const failures: string[] = [];
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    await writeFile(join(work, 'config.capnp'), workerdConfig(port, compatibility));
    const child = spawn(RUNTIMES.workerd!, ['serve', 'config.capnp', '--experimental'], { cwd: work });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    let exited: string | undefined;
    child.on('exit', (code, signal) => (exited = `exit code ${code}, signal ${signal}`));
    try {
      // It refuses connections until it listens: at most 400 tries, none once it exited.
      for (let i = 0; exited === undefined && i < 400; i++) {
        try {
          return await ask(port);
        } catch {
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      failures.push(`attempt ${attempt + 1}: ${exited ?? 'never listened'}; output: ${output}`);
    } finally {
      if (exited === undefined) {
        child.kill();
        await once(child, 'exit');
      }
    }
  }
  throw new Error(`workerd never answered:\n${failures.join('\n')}`);
}

function workerdConfig(port: number, { compatibilityDate, compatibilityFlags = [] }: Compatibility): string {
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    (name = "net", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "main")],
);
const worker :Workerd.Worker = (
  modules = [(name = "bundle.mjs", esModule = embed "bundle.mjs")],
  compatibilityDate = "${compatibilityDate}",
  compatibilityFlags = [${compatibilityFlags.map((flag) => JSON.stringify(flag)).join(', ')}],
  globalOutbound = "net",
);
`;
}

async function freePort(): Promise<number> {
  const server = createNetServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise((done) => server.close(done));
  return port;
}
