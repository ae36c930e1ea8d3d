/**
 * Suite `cold`: what the cold start (an unlimited limiter's slow start) costs an API that never
 * throttles. A fresh interceptor with the default config (no initial rate) against the
 * pass-through interceptor, on the same loopback server, 50 requests in flight from the first
 * moment for 10 s each: requests/s over the first 100 ms, the first 5 s, and the 5 s after. The
 * slow start caps units in flight at 10 and doubles the cap each round trip, so only the first
 * round trips are slowed; it is dropped once it no longer binds.
 */
import { Agent, type Dispatcher, request } from 'undici';
import { type AdaptiveRateLimitInterceptor, adaptiveRateLimit } from '../src/http/interceptor.js';
import { formatRate, nowMs } from './harness.js';
import { startServer } from './http.js';

const IN_FLIGHT = 50;
/** The windows, ms from the first request. */
const FIRST_MS = 100;
const EARLY_MS = 5_000;
const TOTAL_MS = 10_000;

const passThrough: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) =>
  dispatch(opts, handler);

/** Keeps 50 requests in flight for 10 s from a cold start; counts the answers in each window. */
async function coldRun(dispatcher: Dispatcher, url: string): Promise<[number, number, number]> {
  const counts: [number, number, number] = [0, 0, 0];
  const t0 = nowMs();
  const worker = async (): Promise<void> => {
    while (nowMs() - t0 < TOTAL_MS) {
      const { body } = await request(url, { dispatcher });
      await body.dump();
      const at = nowMs() - t0;
      if (at < FIRST_MS) counts[0]++;
      if (at < EARLY_MS) counts[1]++;
      else if (at < TOTAL_MS) counts[2]++;
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return counts;
}

export async function coldStartSuite(): Promise<void> {
  const server = await startServer();
  const url = `${server.origin}/`;
  const interceptors: AdaptiveRateLimitInterceptor[] = [];
  const agents: Agent[] = [];
  const fresh = (interceptor: Dispatcher.DispatcherComposeInterceptor): Dispatcher => {
    const agent = new Agent({ connections: IN_FLIGHT, pipelining: 1 });
    agents.push(agent);
    return agent.compose(interceptor);
  };
  try {
    const rows: string[][] = [];
    const variants: [string, () => Dispatcher][] = [
      ['pass-through interceptor', () => fresh(passThrough)],
      [
        'default config (cold: slow start)',
        () => {
          const interceptor = adaptiveRateLimit({});
          interceptors.push(interceptor);
          return fresh(interceptor);
        },
      ],
    ];
    for (const [label, make] of variants) {
      const [first, early, late] = await coldRun(make(), url);
      rows.push([
        label,
        formatRate((first * 1000) / FIRST_MS),
        formatRate((early * 1000) / EARLY_MS),
        formatRate((late * 1000) / (TOTAL_MS - EARLY_MS)),
      ]);
    }
    const header = ['variant', 'first 0.1 s', 'first 5 s', '5 s to 10 s'];
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    const line = (cells: readonly string[]) =>
      `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
    console.log(`\nrequest(), ${IN_FLIGHT} in flight from a cold start, a server that never throttles\n`);
    console.log(line(header));
    console.log(
      `|${widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`,
    );
    for (const row of rows) console.log(line(row));
  } finally {
    for (const interceptor of interceptors) interceptor.close();
    await Promise.all(agents.map((a) => a.close()));
    await server.stop();
  }
}
