/**
 * One short-lived process of the crowd bench (forked by bench/crowd.ts): it gets its job over IPC,
 * warms up against an in-process server that never throttles (every limiter it used is thrown
 * away), builds its row's client, says `ready`, waits for the common start, sends its requests one
 * at a time (each until it is served, or the row's cap), reports, and exits. It exits when its
 * parent goes away.
 */
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { exitWithParent, sendToParent } from './control-procs.js';
import { startQuotaServer } from './control-quota-server.js';
import { makeSender } from './control-senders.js';

/** How a row's process sends. */
export type CrowdRow = 'ours' | 'backoff' | 'atb' | 'aws';

export interface CrowdJob {
  row: CrowdRow;
  url: string;
  /** Requests this process sends, one at a time. */
  requests: number;
  /** No attempt starts later than this after the common start (ms): every loop is bounded. */
  capMs: number;
}

export interface CrowdReport {
  /** Attempts the server answered 200 and 429. */
  ok: number;
  throttled: number;
  other: number;
  /** Requests served (a 2xx in the end). */
  served: number;
  /**
   * Calls whose final answer was a 429 (the library or the SDK gave up on its attempts) or a
   * refusal (the limiter's predicted wait was longer than `maxWait`): the script called again.
   */
  gaveUp: number;
  rejected: number;
  /** ms from the common start to the last success; 0 without one. */
  lastSuccessMs: number;
  errors: string[];
}

export type ToCrowdClient = { type: 'job'; job: CrowdJob } | { type: 'start'; startAt: number };
export type FromCrowdClient =
  | { type: 'ready' }
  | { type: 'report'; report: CrowdReport }
  | { type: 'error'; message: string };

/** One call of the row's client: every attempt it takes, until its final answer. */
type Call = (signal: AbortSignal) => Promise<'ok' | 'got429' | 'rejected' | 'failed'>;

interface Client {
  call: Call;
  counts(): { ok: number; throttled: number; other: number };
  close(): Promise<void>;
}

/** A GET through `agent` that counts each attempt's status. */
function counted(agent: Agent, url: string, counts: { ok: number; throttled: number; other: number }) {
  return async (signal: AbortSignal): Promise<number> => {
    const res = await request(url, { dispatcher: agent, signal });
    await res.body.dump();
    if (res.statusCode === 429) counts.throttled++;
    else if (res.statusCode >= 200 && res.statusCode < 300) counts.ok++;
    else counts.other++;
    return res.statusCode;
  };
}

const seconds = (s: number) => sleep(s * 1000);
const uniform = (a: number, b: number) => a + Math.random() * (b - a);

/**
 * The paper's exponential backoff: after the n-th failure of a request, sleep
 * U(0.1, min(2^n - 1, U(30, 34))) s; retry until served.
 */
function backoff(url: string): Client {
  const agent = new Agent({ keepAliveTimeout: 60_000 });
  const counts = { ok: 0, throttled: 0, other: 0 };
  const get = counted(agent, url, counts);
  return {
    async call(signal) {
      for (let n = 1; ; n++) {
        const status = await get(signal);
        if (status !== 429) return status < 300 ? 'ok' : 'failed';
        await seconds(uniform(0.1, Math.max(0.1, Math.min(2 ** n - 1, uniform(30, 34)))));
      }
    },
    counts: () => counts,
    close: () => agent.close(),
  };
}

/**
 * The paper's adaptive token bucket (ATB): a bucket of 40 tokens holding one at the start,
 * refilled at 40 a minute; each request takes a token (waiting for one); a success multiplies
 * the rate by 1.2; a 429 halves it (at least 0.01 tokens/s) and empties the bucket. Retries until served.
 */
function atb(url: string): Client {
  const agent = new Agent({ keepAliveTimeout: 60_000 });
  const counts = { ok: 0, throttled: 0, other: 0 };
  const get = counted(agent, url, counts);
  const size = 40;
  let rate = 40 / 60; // tokens/s
  let tokens = 1;
  let at = performance.now();
  const refill = () => {
    const now = performance.now();
    tokens = Math.min(size, tokens + ((now - at) / 1000) * rate);
    at = now;
  };
  return {
    async call(signal) {
      for (;;) {
        refill();
        if (tokens < 1) {
          await seconds((1 - tokens) / rate);
          continue;
        }
        tokens -= 1;
        const status = await get(signal);
        refill();
        if (status === 429) {
          rate = Math.max(rate / 2, 0.01);
          tokens = 0;
          continue;
        }
        if (status < 300) rate *= 1.2;
        return status < 300 ? 'ok' : 'failed';
      }
    },
    counts: () => counts,
    close: () => agent.close(),
  };
}

/**
 * The library as a user writes it (Node's `fetch` through `setGlobalDispatcher(new
 * Agent().compose(adaptiveRateLimit()))`, no options), or the AWS SDK's adaptive retry strategy
 * (`@smithy/util-retry`, 3 attempts as the SDK's default), both through bench/control-senders.ts.
 */
async function sdk(row: 'ours' | 'aws', url: string): Promise<Client> {
  const sender = await makeSender({
    row: row === 'ours' ? { kind: 'ours' } : { kind: 'aws' },
    url,
    transport: row === 'ours' ? 'fetch' : 'request',
    load: { kind: 'burst', callers: 1, capMs: 0 },
    maxAttempts: row === 'ours' ? 4 : 3,
  });
  return {
    call: (signal) => sender.call(signal),
    counts: () => sender.attempts,
    close: () => sender.close(),
  };
}

async function makeClient(row: CrowdRow, url: string): Promise<Client> {
  if (row === 'backoff') return backoff(url);
  if (row === 'atb') return atb(url);
  return sdk(row, url);
}

/** A few calls through a throwaway client of the row's kind against a server that never throttles. */
async function warmUp(row: CrowdRow): Promise<void> {
  const server = await startQuotaServer({ perMinute: Number.POSITIVE_INFINITY, burstSeconds: 1 });
  const client = await makeClient(row, server.url);
  const signal = new AbortController().signal;
  try {
    for (let i = 0; i < 20; i++) await client.call(signal);
  } finally {
    await client.close();
    await server.close();
  }
}

async function run(job: CrowdJob, client: Client, startAt: number): Promise<CrowdReport> {
  const report: CrowdReport = {
    ok: 0,
    throttled: 0,
    other: 0,
    served: 0,
    gaveUp: 0,
    rejected: 0,
    lastSuccessMs: 0,
    errors: [],
  };
  await sleep(Math.max(0, startAt - Date.now()));
  const window = new AbortController();
  setMaxListeners(0, window.signal);
  const cap = setTimeout(() => window.abort(new Error('the row is over')), job.capMs);
  try {
    for (let i = 0; i < job.requests && !window.signal.aborted; i++) {
      // A script that must get its work done: it calls again until served (or the row's cap).
      while (!window.signal.aborted) {
        let outcome: Awaited<ReturnType<Call>>;
        try {
          outcome = await client.call(window.signal);
        } catch (error) {
          if (window.signal.aborted) break;
          outcome = 'failed';
          if (report.errors.length < 3) report.errors.push(String((error as Error)?.stack ?? error));
        }
        if (outcome === 'ok') {
          report.served++;
          report.lastSuccessMs = Date.now() - startAt;
          break;
        }
        if (outcome === 'got429') report.gaveUp++;
        else if (outcome === 'rejected') report.rejected++;
        // A refusal or an error comes back at once: a second before calling again.
        if (outcome !== 'got429') await sleep(1_000).catch(() => {});
      }
    }
  } finally {
    clearTimeout(cap);
  }
  return { ...report, ...client.counts() };
}

exitWithParent();
let client: Client | undefined;
let job: CrowdJob | undefined;
process.on('message', (message: ToCrowdClient) => {
  void (async () => {
    try {
      if (message.type === 'job') {
        job = message.job;
        await warmUp(job.row);
        client = await makeClient(job.row, job.url);
        await sendToParent({ type: 'ready' } satisfies FromCrowdClient);
      } else if (message.type === 'start' && client !== undefined && job !== undefined) {
        const report = await run(job, client, message.startAt);
        await sendToParent({ type: 'report', report } satisfies FromCrowdClient);
        // Waiters of the AWS limiter cannot be aborted: end the process rather than wait for them.
        await Promise.race([client.close(), sleep(2_000)]);
        process.exit(0);
      }
    } catch (error) {
      await sendToParent({
        type: 'error',
        message: String((error as Error)?.stack ?? error),
      } satisfies FromCrowdClient).catch(() => {});
      process.exit(1);
    }
  })();
});
