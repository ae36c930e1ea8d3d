/**
 * The control bench's cold start (issue 10 item 4): on a server that never throttles, requests/s
 * of the default config, made fresh, against a pass-through interceptor (one that does nothing),
 * over the first 5 s and after. 50 requests in flight through undici's `request()`, from this
 * process, against a server in a process of its own. The figures are CPU-bound and the machine is
 * shared, so the two run in interleaved rounds (A B, A B, ...), each round with a fresh limiter,
 * after one warm-up of each; the table gives medians over the rounds, and each round's ratio to
 * the pass-through of the same round.
 */
import { setMaxListeners } from 'node:events';
import type { ClientJob, RowSpec } from './control-protocol.js';
import { startQuotaProcess } from './control-runner.js';
import { makeSender } from './control-senders.js';
import { warmUpClient } from './control-warmup.js';
import { median } from './harness.js';

const COLD = { inFlight: 50, firstMs: 5_000, afterMs: 5_000, rounds: 3 } as const;

interface Rates {
  first: number;
  after: number;
}

/** One fresh sender of `row`, `inFlight` loops for first + after ms; completions per second of each phase. */
async function once(job: ClientJob): Promise<Rates> {
  const sender = await makeSender(job);
  const signal = new AbortController().signal;
  setMaxListeners(0, signal);
  const start = Date.now();
  const firstEnd = start + COLD.firstMs;
  const end = firstEnd + COLD.afterMs;
  let first = 0;
  let after = 0;
  const worker = async (): Promise<void> => {
    while (Date.now() < end) {
      await sender.call(signal);
      if (Date.now() < firstEnd) first++;
      else after++;
    }
  };
  try {
    await Promise.all(Array.from({ length: COLD.inFlight }, worker));
  } finally {
    await sender.close();
  }
  return { first: (first * 1000) / COLD.firstMs, after: (after * 1000) / (Date.now() - firstEnd) };
}

export async function coldStart(scale: number): Promise<void> {
  const rounds = scale < 1 ? 2 : COLD.rounds;
  const variants: [string, RowSpec][] = [
    ['pass-through interceptor', { kind: 'pass-through' }],
    ['defaults (no options)', { kind: 'ours' }],
  ];
  console.log(`\ncold start: ${rounds} interleaved rounds ...`);
  const server = await startQuotaProcess({ perMinute: Number.POSITIVE_INFINITY, burstSeconds: 1 });
  const results: Rates[][] = variants.map(() => []);
  try {
    const job = (row: RowSpec): ClientJob => ({
      row,
      url: server.url,
      transport: 'request',
      load: { kind: 'closed', inFlight: COLD.inFlight, durationMs: COLD.firstMs + COLD.afterMs },
      maxAttempts: 4,
    });
    for (const [, row] of variants) await warmUpClient(job(row));
    for (let r = 0; r < rounds; r++) {
      for (const [i, [, row]] of variants.entries()) results[i]!.push(await once(job(row)));
    }
  } finally {
    await server.stop();
  }
  const base = results[0]!;
  console.log(
    `\nCold start on a server that never throttles: ${COLD.inFlight} requests in flight (undici request()), ` +
      `a fresh limiter each round, medians of ${rounds} interleaved rounds; requests/s over the first ` +
      `${COLD.firstMs / 1000} s and the ${COLD.afterMs / 1000} s after\n`,
  );
  console.log('| row | first 5 s | after | first 5 s vs pass-through | after vs pass-through |');
  console.log('| --- | --: | --: | --: | --: |');
  for (const [i, [label]] of variants.entries()) {
    const rs = results[i]!;
    const ratio = (phase: keyof Rates) => median(rs.map((x, r) => x[phase] / base[r]![phase]));
    console.log(
      `| ${label} | ${median(rs.map((x) => x.first)).toFixed(0)} /s | ${median(rs.map((x) => x.after)).toFixed(0)} /s | ` +
        `${ratio('first').toFixed(2)}× | ${ratio('after').toFixed(2)}× |`,
    );
  }
}
