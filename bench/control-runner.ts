/**
 * Runs rows of the control bench side by side: starts each row's server (a quota server process
 * of its own, or a zone of one shared nginx with a port per zone), forks each row's client
 * processes, waits until every one is ready, gives them all one start time, collects their
 * reports, and stops every process it started, also when something fails.
 */
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { NGINX_PATH, type NginxZone, type StartedNginx, startNginx } from './control-nginx.js';
import { forkBench, stop } from './control-procs.js';
import type { ClientJob, ClientReport, FromClient, ToClient } from './control-protocol.js';
import type { QuotaServerOptions } from './control-quota-server.js';
import type { FromServer, ToServer } from './control-server-main.js';

const CLIENT_MAIN = fileURLToPath(new URL('./control-client-main.ts', import.meta.url));
const SERVER_MAIN = fileURLToPath(new URL('./control-server-main.ts', import.meta.url));

/** Time a process gets to start and say it is ready (ms): tsx compiles on a shared, busy machine. */
const READY_MS = 120_000;
/** Time past a load's own length before a missing report is an error (ms). */
const REPORT_GRACE_MS = 60_000;
/** The common start is this far after the last process is ready (ms), so every start message arrives first. */
const START_LEAD_MS = 1_500;

export type ServerPlan =
  | { kind: 'quota'; options: Omit<QuotaServerOptions, 'now'> }
  | { kind: 'nginx'; zone: NginxZone; retryAfterSeconds: number };

/** One row: its server and its client processes' jobs (their `url` is filled in once the server listens). */
export interface RowRun {
  label: string;
  server: ServerPlan;
  jobs: Omit<ClientJob, 'url'>[];
}

/** A promise of the next message of `child` that `pick` accepts; rejects when the child exits first or after `ms`. */
export function nextMessage<M, T>(
  child: ChildProcess,
  what: string,
  ms: number,
  pick: (m: M) => T | undefined,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const done = (): void => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    const onMessage = (message: M): void => {
      if ((message as { type?: string }).type === 'error') {
        done();
        reject(new Error(`${what}: ${(message as { message?: string }).message}`));
        return;
      }
      const value = pick(message);
      if (value === undefined) return;
      done();
      resolve(value);
    };
    const onExit = (code: number | null, signal: string | null): void => {
      done();
      reject(new Error(`${what}: the process exited (code ${code}, signal ${signal})`));
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`${what}: no answer in ${ms} ms`));
    }, ms);
    child.on('message', onMessage);
    child.on('exit', onExit);
  });
}

/** A quota server in a process of its own (warmed up); for a caller that drives its own load. */
export async function startQuotaProcess(
  options: Omit<QuotaServerOptions, 'now'>,
): Promise<{ url: string; stop(): Promise<void> }> {
  const child = forkBench(SERVER_MAIN);
  try {
    const listening = nextMessage(child, 'the quota server', READY_MS, (m: FromServer) =>
      m.type === 'listening' ? m.port : undefined,
    );
    child.send({ type: 'serve', options } satisfies ToServer);
    return { url: `http://127.0.0.1:${await listening}/`, stop: () => stop(child) };
  } catch (error) {
    await stop(child);
    throw error;
  }
}

function loadMs(job: Omit<ClientJob, 'url'>): number {
  return job.load.kind === 'burst' ? job.load.capMs : job.load.durationMs;
}

/** Runs `runs` side by side from one start time; answers each row's client reports, in order. */
export async function runSideBySide(runs: readonly RowRun[]): Promise<ClientReport[][]> {
  const started: ChildProcess[] = [];
  let nginx: StartedNginx | undefined;
  try {
    // Servers.
    const origins: string[] = new Array(runs.length);
    const nginxRuns = runs.map((run, i) => ({ run, i })).filter(({ run }) => run.server.kind === 'nginx');
    if (nginxRuns.length > 0) {
      const zones = nginxRuns.map(({ run }) => (run.server as { zone: NginxZone }).zone);
      const retryAfter = (nginxRuns[0]!.run.server as { retryAfterSeconds: number }).retryAfterSeconds;
      nginx = await startNginx(zones, retryAfter);
      nginxRuns.forEach(({ i }, k) => {
        origins[i] = `${nginx!.origins[k]}${NGINX_PATH}`;
      });
    }
    const quotaServers: ChildProcess[] = [];
    await Promise.all(
      runs.map(async (run, i) => {
        if (run.server.kind !== 'quota') return;
        const child = forkBench(SERVER_MAIN);
        started.push(child);
        quotaServers.push(child);
        const listening = nextMessage(
          child,
          `the quota server of "${run.label}"`,
          READY_MS,
          (m: FromServer) => (m.type === 'listening' ? m.port : undefined),
        );
        child.send({ type: 'serve', options: run.server.options } satisfies ToServer);
        origins[i] = `http://127.0.0.1:${await listening}/`;
      }),
    );

    // Clients: all forked and ready before any starts.
    const clients = runs.map((run, i) =>
      run.jobs.map((job, k) => {
        const child = forkBench(CLIENT_MAIN);
        started.push(child);
        const what = `client ${k + 1} of "${run.label}"`;
        const ready = nextMessage(child, what, READY_MS, (m: FromClient) =>
          m.type === 'ready' ? true : undefined,
        );
        child.send({ type: 'job', job: { ...job, url: origins[i]! } } satisfies ToClient);
        return { child, what, job, ready };
      }),
    );
    const forkedAt = Date.now();
    await Promise.all(clients.flat().map((c) => c.ready));
    const count = clients.flat().length + quotaServers.length;
    console.log(`  ${count} processes ready in ${((Date.now() - forkedAt) / 1000).toFixed(1)} s`);

    const startAt = Date.now() + START_LEAD_MS;
    const reports = clients.map((row) =>
      row.map((c) => {
        const report = nextMessage(
          c.child,
          c.what,
          START_LEAD_MS + loadMs(c.job) + REPORT_GRACE_MS,
          (m: FromClient) => (m.type === 'report' ? m.report : undefined),
        );
        c.child.send({ type: 'start', startAt } satisfies ToClient);
        return report;
      }),
    );
    for (const server of quotaServers) server.send({ type: 'start', startAt } satisfies ToServer);
    return await Promise.all(reports.map((row) => Promise.all(row)));
  } finally {
    await Promise.all(started.map((child) => stop(child)));
    await nginx?.stop();
  }
}
