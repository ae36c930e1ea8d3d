/**
 * Every SDK through its recipe (docs/sdks.md) against a local API with a hidden quota (120/min,
 * burst 5, 429 + Retry-After in whole seconds): 60 calls at once, then 60 s at twice the quota.
 * The recipes run side by side, each against its own server; figures are counted at the server
 * (requests, statuses, arrival times) and at the callers (what each call ended with).
 *
 *   node --import tsx bench/sdks.ts [recipe name filter] [--known-quota]
 *
 * Columns:
 * - ok / failed: calls; failed split into the server's 429 handed back, the library's refusal
 *   (a local 429 or `RateLimitRejectedError`), other (a refusal as a connection error, today).
 * - oracle ok: calls an ideal FIFO client pacing at the quota would serve within maxWait of their
 *   arrival; `ok` below it means calls failed that could have succeeded.
 * - attempts: the most requests the server saw for one call (the library's maxAttempts in ()).
 * - <1s after 429: requests that reached the server within a second after it sent a 429, the
 *   first 20 ms after it left out (requests already in flight then); of the 60 burst calls, and
 *   of the steady ones.
 * - sent <1s after a 429 came back: requests the limiter let go within a second after a 429
 *   reached it, timed below the limiter (the fetch-based recipes; `-` for the global dispatcher
 *   and got). Every 429 here asks for at least 1 s, so each one is a request Retry-After forbade.
 * - the last row, "today": openai with its default retries and the library's default refusals.
 * - burst 429s: 429s answered to the 60 calls sent at once (their retries included).
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { RateLimitRejectedError } from '../src/errors.js';
import { headerLookup } from '../src/headers.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { headersOfError } from '../src/wrap/sdk-errors.js';
import { type Recipe, recipes } from '../test/helpers/sdk-recipes.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const QUOTA_PER_MINUTE = 120;
const BURST = 5;
const BURST_CALLS = 60;
const STEADY_MS = 60_000;
const STEADY_PER_SECOND = (2 * QUOTA_PER_MINUTE) / 60;
const MAX_WAIT_MS = 60_000;
/** `--known-quota`: each limiter starts at the quota (`initialUnitsPerMinute` = `maxUnitsPerMinute` = 120). */
const KNOWN_QUOTA = process.argv.includes('--known-quota');
/** A run is cut off after this long (SDK retries sleep outside the limiter). */
const HARD_STOP_MS = 300_000;

interface Hit {
  call: number;
  at: number;
  status: number;
}

/** The quota server: a token bucket refilled continuously; each request's call id, time and status recorded. */
async function startApi() {
  const perMs = QUOTA_PER_MINUTE / 60_000;
  let tokens = BURST;
  let refilledAt = performance.now();
  const hits: Hit[] = [];
  const server = createServer((req, res) => {
    const now = performance.now();
    tokens = Math.min(BURST, tokens + (now - refilledAt) * perMs);
    refilledAt = now;
    const call = Number(/c(\d+)/.exec(req.url ?? '')?.[1] ?? -1);
    if (tokens >= 1) {
      tokens -= 1;
      hits.push({ call, at: now, status: 200 });
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    } else {
      hits.push({ call, at: now, status: 429 });
      const seconds = Math.max(1, Math.ceil((1 - tokens) / perMs / 1000));
      res.writeHead(429, { 'retry-after': String(seconds), 'content-type': 'text/plain' }).end('slow down');
    }
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits,
    close: async () => {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

type Ending = 'ok' | 'server-429' | 'refused' | 'other';

function endingOf(error: unknown): Ending {
  if (error instanceof RateLimitRejectedError) return 'refused';
  const headers = headersOfError(error);
  if (headers !== undefined && headerLookup(headers)('x-adaptive-rate-limit') !== undefined) return 'refused';
  return headersOfError(error) !== undefined ? 'server-429' : 'other';
}

/** Calls an ideal client would serve within maxWait: FIFO at the quota, a call it cannot serve in time given up at once. */
function oracle(arrivals: number[]): number {
  const perMs = QUOTA_PER_MINUTE / 60_000;
  let tokens = BURST;
  let at = 0;
  let served = 0;
  for (const arrival of [...arrivals].sort((a, b) => a - b)) {
    // The earliest time >= arrival and >= the last service with a token.
    let t = Math.max(arrival, at);
    const available = Math.min(BURST, tokens + (t - at) * perMs);
    if (available < 1) t += (1 - available) / perMs;
    if (t - arrival > MAX_WAIT_MS) continue;
    tokens = Math.min(BURST, tokens + (t - at) * perMs) - 1;
    at = t;
    served++;
  }
  return served;
}

async function run(recipe: Recipe) {
  const api = await startApi();
  // Below the limiter: when each request left, and when each 429 came back (fetch-based recipes).
  const sentAt: number[] = [];
  const throttledBackAt: number[] = [];
  const watched: typeof fetch = async (input, init) => {
    sentAt.push(performance.now());
    const response = await globalThis.fetch(input, init);
    if (response.status === 429) throttledBackAt.push(performance.now());
    return response;
  };
  const limiter = KNOWN_QUOTA
    ? { maxWait: MAX_WAIT_MS, initialUnitsPerMinute: QUOTA_PER_MINUTE, maxUnitsPerMinute: QUOTA_PER_MINUTE }
    : { maxWait: MAX_WAIT_MS };
  const client = recipe.make(api.origin, { limiter, fetch: watched });
  const start = performance.now();
  const arrivals: number[] = [];
  const endings: Promise<Ending>[] = [];
  const callOne = (i: number) => {
    arrivals.push(performance.now() - start);
    endings.push(
      client.call(`/bucket/c${i}`).then(
        () => 'ok' as const,
        (error: unknown) => endingOf(error),
      ),
    );
  };
  for (let i = 0; i < BURST_CALLS; i++) callOne(i);
  const steadyCalls = Math.round((STEADY_MS / 1000) * STEADY_PER_SECOND);
  for (let i = 0; i < steadyCalls; i++) {
    // On a schedule from the start, so that late timers do not stretch the load.
    const due = start + ((i + 1) * 1000) / STEADY_PER_SECOND;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, due - performance.now())));
    callOne(BURST_CALLS + i);
  }
  const span = performance.now() - start;
  let timer: NodeJS.Timeout | undefined;
  const stop = new Promise<'stopped'>((resolve) => {
    timer = setTimeout(() => resolve('stopped'), HARD_STOP_MS - (performance.now() - start));
  });
  const settled = await Promise.race([Promise.all(endings), stop]);
  clearTimeout(timer);
  const snapshot = client.registry.get('api')?.snapshot();
  await client.close();
  await api.close();

  const counts = { ok: 0, 'server-429': 0, refused: 0, other: 0 };
  if (settled !== 'stopped') for (const e of settled) counts[e]++;
  const perCall = new Map<number, number>();
  for (const hit of api.hits) perCall.set(hit.call, (perCall.get(hit.call) ?? 0) + 1);
  const throttledAt = api.hits.filter((h) => h.status === 429).map((h) => h.at);
  const soon = api.hits.filter((h) => throttledAt.some((t) => h.at - t > 20 && h.at - t < 1000));
  const burst = (h: Hit) => h.call < BURST_CALLS;
  return {
    sdk: recipe.name,
    calls: endings.length,
    'load s': Math.round(span / 100) / 10,
    ok: counts.ok,
    'oracle ok': oracle(arrivals),
    'failed: 429': counts['server-429'],
    'failed: refused': counts.refused,
    'failed: other': counts.other + (settled === 'stopped' ? endings.length : 0),
    requests: api.hits.length,
    '429s': throttledAt.length,
    'burst 429s': api.hits.filter((h) => h.status === 429 && burst(h)).length,
    attempts: `${Math.max(...perCall.values())} (${recipe.maxAttempts})`,
    '<1s after 429 (burst/steady)': `${soon.filter(burst).length}/${soon.filter((h) => !burst(h)).length}`,
    'sent <1s after a 429 came back':
      sentAt.length === 0
        ? '-'
        : sentAt.filter((t) => throttledBackAt.some((r) => t > r && t - r < 1000)).length,
    cuts: snapshot?.cuts ?? '-',
  };
}

/** Today's setup, for comparison: the SDK's defaults (openai retries twice), the library's (refusals as errors). */
const today: Recipe = {
  name: 'openai, defaults (today)',
  retries: 'library',
  maxAttempts: 4,
  attemptsPerCall: 12,
  throttleStatus: 429,
  make(origin, options = {}) {
    const fetch = rateLimitedFetch({
      ...(options.fetch !== undefined && { fetch: options.fetch }),
      limiters: { api: { origins: [origin], ...options.limiter } },
    });
    const client = new OpenAI({ apiKey: 'test', baseURL: `${origin}/v1`, fetch, logger: quiet });
    return {
      registry: fetch.registry,
      call: async (path) => {
        await client.get(path);
      },
      close: async () => fetch.close(),
    };
  },
};
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

const args = process.argv.slice(2);
const filter = args.find((a) => !a.startsWith('--'));
const chosen = [...recipes, today].filter((r) => filter === undefined || r.name.includes(filter));
console.log(
  `${KNOWN_QUOTA ? 'limiters start at the quota; ' : ''}quota ${QUOTA_PER_MINUTE}/min, burst ${BURST}; ${BURST_CALLS} calls at once, then ${STEADY_MS / 1000} s at ${STEADY_PER_SECOND}/s; maxWait ${MAX_WAIT_MS / 1000} s`,
);
// Side by side, each recipe against its own server (the global dispatcher's limiter covers only
// its own API's origin: the others' requests pass through it).
console.table(await Promise.all(chosen.map(run)));
