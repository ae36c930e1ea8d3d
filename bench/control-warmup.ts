/**
 * Warms a bench process up before the common start: the first requests of a process load
 * modules, compile undici's HTTP parser and run cold code, which takes seconds of CPU; with some
 * thirty bench processes starting at once on a busy 2-core machine, a cold start would measure
 * that, not the limiters. Warm-up traffic goes to a server that never throttles, never to the
 * row's own server, and every limiter it used is thrown away.
 */
import { setMaxListeners } from 'node:events';
import { request } from 'undici';
import type { ClientJob } from './control-protocol.js';
import { startQuotaServer } from './control-quota-server.js';
import { makeSender } from './control-senders.js';

/** Bounds of one warm-up: whichever comes first. */
const WARMUP_CALLS = 2_000;
const WARMUP_MS = 3_000;
const WARMUP_IN_FLIGHT = 20;

/** Runs `call` from {@link WARMUP_IN_FLIGHT} loops until {@link WARMUP_CALLS} calls or {@link WARMUP_MS}. */
async function loop(call: () => Promise<unknown>): Promise<void> {
  let calls = 0;
  const end = Date.now() + WARMUP_MS;
  const worker = async (): Promise<void> => {
    while (calls < WARMUP_CALLS && Date.now() < end) {
      calls++;
      await call();
    }
  };
  await Promise.all(Array.from({ length: WARMUP_IN_FLIGHT }, worker));
}

/**
 * A client's warm-up: a throwaway sender of the job's kind (the shared budget warms the plain
 * interceptor: its Redis state must not see warm-up traffic) against an in-process server.
 */
export async function warmUpClient(job: ClientJob): Promise<void> {
  const server = await startQuotaServer({ perMinute: Number.POSITIVE_INFINITY, burstSeconds: 1 });
  const row = job.row.kind === 'shared' ? { kind: 'ours' as const } : job.row;
  const sender = await makeSender({ ...job, row, url: server.url });
  const signal = new AbortController().signal;
  setMaxListeners(0, signal);
  try {
    await loop(() => sender.call(signal));
  } finally {
    await sender.close();
    await server.close();
  }
}

/** A server process's warm-up: requests to itself (the caller resets its counters and bucket after). */
export async function warmUpServer(url: string): Promise<void> {
  await loop(async () => {
    const res = await request(url);
    await res.body.dump();
  });
}
