/**
 * A client process of the control bench (forked by bench/control.ts): it gets a job over IPC,
 * warms up (bench/control-warmup.ts), builds its row's sender, says `ready`, waits for the common start time, makes its load, and
 * sends back its report. It exits when its parent goes away.
 */
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { exitWithParent, sendToParent } from './control-procs.js';
import type { CallerCounts, ClientJob, ClientReport, FromClient, ToClient } from './control-protocol.js';
import { makeSender, type Sender } from './control-senders.js';
import { warmUpClient } from './control-warmup.js';

/** Unexpected errors kept for the report. */
const MAX_ERRORS = 5;

function send(message: FromClient): Promise<void> {
  return sendToParent(message);
}

interface Tally {
  callers: CallerCounts;
  waitsMs: number[];
  errors: string[];
  /** Completions per second since the start (closed loop). */
  perSecond: number[];
  lastAnswerMs: number;
}

/** Runs one caller and books how it ended, unless the window closed first. */
async function caller(sender: Sender, signal: AbortSignal, tally: Tally, startAt: number): Promise<void> {
  const t0 = Date.now();
  tally.callers.started++;
  let outcome: string;
  try {
    outcome = await sender.call(signal);
  } catch (error) {
    if (signal.aborted) return; // booked as unfinished by the window's end
    outcome = 'failed';
    if (tally.errors.length < MAX_ERRORS) tally.errors.push(String((error as Error)?.stack ?? error));
  }
  if (signal.aborted) return;
  const now = Date.now();
  tally.callers[outcome as keyof CallerCounts]++;
  tally.waitsMs.push(now - t0);
  tally.lastAnswerMs = Math.max(tally.lastAnswerMs, now - startAt);
  const second = Math.floor((now - startAt) / 1000);
  tally.perSecond[second] = (tally.perSecond[second] ?? 0) + 1;
}

async function run(job: ClientJob, sender: Sender, startAt: number): Promise<ClientReport> {
  const tally: Tally = {
    callers: { started: 0, ok: 0, got429: 0, rejected: 0, failed: 0, unfinished: 0 },
    waitsMs: [],
    errors: [],
    perSecond: [],
    lastAnswerMs: 0,
  };
  const window = new AbortController();
  // Every caller listens on it.
  setMaxListeners(0, window.signal);
  const pending = new Map<Promise<void>, number>();
  // The scaled loads (a tick) give each caller a signal of its own, aborted with the window: one
  // signal for tens of thousands of waiters costs O(listeners) per added listener in Node.
  const own = job.load.kind === 'open' && job.load.tickMs !== undefined;
  const controllers = new Set<AbortController>();
  const launch = (): void => {
    const controller = own ? new AbortController() : undefined;
    if (controller !== undefined) controllers.add(controller);
    const p = caller(sender, controller?.signal ?? window.signal, tally, startAt);
    pending.set(p, Date.now());
    void p.finally(() => {
      pending.delete(p);
      if (controller !== undefined) controllers.delete(controller);
    });
  };
  await sleep(Math.max(0, startAt - Date.now()));
  const load = job.load;
  let endAt: number;
  const cpuAtStart = process.cpuUsage();
  let scheduled = 0;
  if (load.kind === 'open') {
    endAt = startAt + load.durationMs;
    const interval = 60_000 / load.perMinute;
    const total = Math.floor(load.durationMs / interval);
    scheduled = total;
    if (load.tickMs === undefined) {
      for (let i = 0; i < total; i++) {
        const due = startAt + i * interval;
        if (due > Date.now()) await sleep(due - Date.now());
        if (Date.now() >= endAt) break;
        launch();
      }
    } else {
      // One timer per tick: each tick starts every caller of the schedule due by now (all of
      // them, late ones too, as an open loop does), at most `total` in all and none after the end.
      let next = 0;
      while (next < total) {
        const now = Date.now();
        if (now >= endAt) break;
        while (next < total && startAt + next * interval <= now) {
          launch();
          next++;
        }
        await sleep(load.tickMs);
      }
    }
    await sleep(Math.max(0, endAt - Date.now()));
  } else if (load.kind === 'burst') {
    endAt = startAt + load.capMs;
    for (let i = 0; i < load.callers; i++) launch();
    await Promise.race([Promise.all([...pending.keys()]), sleep(load.capMs)]);
  } else {
    endAt = startAt + load.durationMs;
    const worker = async (): Promise<void> => {
      while (Date.now() < endAt) await caller(sender, window.signal, tally, startAt);
    };
    await Promise.all(Array.from({ length: load.inFlight }, worker));
  }
  // The window closes: what is still waiting is unfinished, with its wait so far.
  const attempts = { ...sender.attempts };
  const cpu = process.cpuUsage(cpuAtStart);
  const closedAt = Date.now();
  for (const started of pending.values()) {
    tally.callers.unfinished++;
    tally.waitsMs.push(closedAt - started);
  }
  const over = new Error('the run is over');
  window.abort(over);
  for (const controller of controllers) controller.abort(over);
  return {
    attempts,
    callers: tally.callers,
    waitsMs: tally.waitsMs,
    perSecond: Array.from(tally.perSecond, (n) => n ?? 0),
    lastAnswerMs: tally.lastAnswerMs,
    errors: tally.errors,
    cpuMicros: cpu.user + cpu.system,
    scheduled,
  };
}

exitWithParent();
let sender: Sender | undefined;
let job: ClientJob | undefined;
process.on('message', (message: ToClient) => {
  void (async () => {
    try {
      if (message.type === 'job') {
        job = message.job;
        await warmUpClient(job);
        sender = await makeSender(job);
        await send({ type: 'ready' });
      } else if (message.type === 'start' && sender !== undefined && job !== undefined) {
        const report = await run(job, sender, message.startAt);
        await send({ type: 'report', report });
        // Waiters of the AWS limiter cannot be aborted: end the process rather than wait for them.
        await Promise.race([sender.close(), sleep(2_000)]);
        process.exit(0);
      }
    } catch (error) {
      await send({ type: 'error', message: String((error as Error)?.stack ?? error) }).catch(() => {});
      process.exit(1);
    }
  })();
});
