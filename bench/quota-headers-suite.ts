/**
 * `npm run bench -- quota-headers`: what an API's announced state is read as, against real
 * `node:http` servers on 127.0.0.1 (Node's fetch through `new Agent().compose(adaptiveRateLimit(...))`),
 * each row beside the same load with no limiter, all rows in one run:
 *
 * - a GitHub-like hour (5,000, 4,880 left, `x-ratelimit-*` on every answer, `core`): 40 calls at
 *   once through `headers: 'github'`: the time until all 40 are answered, and the 429s;
 * - a token bucket of 600 a minute (10 tokens at most, refilled continuously) announcing its state
 *   on every answer, in the IETF fields (`RateLimit-Policy: "default";q=600;w=60`,
 *   `RateLimit: "default";r=<tokens>;t=<seconds to the next token, rounded up>`, no options) or
 *   GitHub-style (`x-ratelimit-*`, `search`, the reset the next token's epoch second,
 *   `headers: 'github'`), answering 429 + `Retry-After: 1` when empty; demand at twice the quota
 *   for 31 s; the share of the quota taken after the first second, and the 429s after it.
 */
import { once } from 'node:events';
import { createServer, type OutgoingHttpHeaders, type Server } from 'node:http';
import { Agent, type Dispatcher } from 'undici';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { InterceptorOptions } from '../src/http/options.js';

interface Counted {
  readonly url: string;
  /** Answers 200 and 429 at or after `since` (ms, `Date.now()`). */
  ok(since: number): number;
  throttled(since: number): number;
  close(): Promise<void>;
}

async function listen(
  handler: (now: number) => { status: number; headers: OutgoingHttpHeaders },
): Promise<Counted> {
  const ok: number[] = [];
  const throttled: number[] = [];
  const server: Server = createServer((_req, res) => {
    const now = Date.now();
    const { status, headers } = handler(now);
    (status === 200 ? ok : throttled).push(now);
    res
      .writeHead(status, { 'content-type': 'text/plain', ...headers })
      .end(status === 200 ? 'ok' : 'slow down');
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    ok: (since) => ok.filter((t) => t >= since).length,
    throttled: (since) => throttled.filter((t) => t >= since).length,
    close: async () => {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

/** A GitHub-like hour: `limit` per fixed window of an hour, `left` remaining at the start. */
function githubHour(limit: number, left: number): Promise<Counted> {
  let remaining = left;
  const resetAt = Math.ceil((Date.now() + 3_000_000) / 1000);
  return listen((now) => {
    const status = remaining > 0 ? 200 : 429;
    if (status === 200) remaining--;
    const headers: OutgoingHttpHeaders = {
      date: new Date(now).toUTCString(),
      'x-ratelimit-limit': String(limit),
      'x-ratelimit-remaining': String(remaining),
      'x-ratelimit-used': String(limit - remaining),
      'x-ratelimit-reset': String(resetAt),
      'x-ratelimit-resource': 'core',
    };
    if (status === 429) headers['retry-after'] = String(resetAt - Math.floor(now / 1000));
    return { status, headers };
  });
}

const BUCKET_PER_MINUTE = 600;
const BUCKET_SIZE = 10;

/** A token bucket of 600 a minute (at most 10), announcing its state in `family`'s headers. */
function tokenBucket(family: 'ietf' | 'github'): Promise<Counted> {
  const perMs = BUCKET_PER_MINUTE / 60_000;
  let tokens = BUCKET_SIZE;
  let at = Date.now();
  return listen((now) => {
    tokens = Math.min(BUCKET_SIZE, tokens + (now - at) * perMs);
    at = now;
    const status = tokens >= 1 ? 200 : 429;
    if (status === 200) tokens -= 1;
    const remaining = Math.floor(tokens);
    const nextMs = (1 - (tokens - remaining)) / perMs;
    const headers: OutgoingHttpHeaders =
      family === 'ietf'
        ? {
            'ratelimit-policy': `"default";q=${BUCKET_PER_MINUTE};w=60`,
            ratelimit: `"default";r=${remaining};t=${Math.max(1, Math.ceil(nextMs / 1000))}`,
          }
        : {
            date: new Date(now).toUTCString(),
            'x-ratelimit-limit': String(BUCKET_PER_MINUTE),
            'x-ratelimit-remaining': String(remaining),
            'x-ratelimit-used': String(BUCKET_PER_MINUTE - remaining),
            'x-ratelimit-reset': String(Math.ceil((now + nextMs) / 1000)),
            'x-ratelimit-resource': 'search',
          };
    if (status === 429) headers['retry-after'] = '1';
    return { status, headers };
  });
}

function dispatcherFor(options: InterceptorOptions | undefined): {
  dispatcher: Dispatcher;
  close: () => Promise<void>;
} {
  const agent = new Agent();
  if (options === undefined) return { dispatcher: agent, close: () => agent.close() };
  const interceptor = adaptiveRateLimit(options);
  const dispatcher = agent.compose(interceptor);
  return {
    dispatcher,
    close: async () => {
      interceptor.close();
      await agent.close();
    },
  };
}

async function send(url: string, dispatcher: Dispatcher): Promise<void> {
  try {
    const response = await fetch(url, { dispatcher } as RequestInit);
    await response.arrayBuffer();
  } catch {
    // A rejection by the limiter: counted by the server as nothing sent.
  }
}

async function fortyAtOnce(limited: boolean): Promise<string> {
  const server = await githubHour(5_000, 4_880);
  const { dispatcher, close } = dispatcherFor(
    limited ? { limiters: { api: { origins: [server.url], headers: 'github' } } } : undefined,
  );
  const start = performance.now();
  await Promise.all(Array.from({ length: 40 }, () => send(`${server.url}/`, dispatcher)));
  const seconds = (performance.now() - start) / 1000;
  const line = `| GitHub-like hour, 40 calls at once | ${limited ? "`headers: 'github'`" : 'no limiter'} | ${seconds.toFixed(2)} s | ${server.ok(0)} ok, ${server.throttled(0)} × 429 |`;
  await close();
  await server.close();
  return line;
}

const DEMAND_SECONDS = 31;

async function bucketAtTwice(family: 'ietf' | 'github', limited: boolean): Promise<string> {
  const server = await tokenBucket(family);
  const options: InterceptorOptions | undefined = !limited
    ? undefined
    : family === 'github'
      ? { limiters: { api: { origins: [server.url], headers: 'github' } } }
      : {};
  const { dispatcher, close } = dispatcherFor(options);
  const perSecond = (2 * BUCKET_PER_MINUTE) / 60;
  const start = Date.now();
  const endAt = start + DEMAND_SECONDS * 1000;
  const pending = new Set<Promise<void>>();
  let next = 0;
  await new Promise<void>((resolve) => {
    // Catches up on late ticks: the demand is counted from the clock, not from the ticks.
    const timer = setInterval(() => {
      const now = Math.min(Date.now(), endAt);
      const due = Math.floor(((now - start) * perSecond) / 1000);
      while (next < due) {
        const p = send(`${server.url}/`, dispatcher);
        next++;
        pending.add(p);
        p.finally(() => pending.delete(p));
      }
      if (now >= endAt) {
        clearInterval(timer);
        resolve();
      }
    }, 50);
  });
  const after = start + 1000;
  const quota = ((DEMAND_SECONDS - 1) * BUCKET_PER_MINUTE) / 60;
  const ok = server.ok(after);
  const name = family === 'ietf' ? 'token bucket, IETF fields' : 'token bucket, GitHub-style';
  const who = !limited ? 'no limiter' : family === 'github' ? "`headers: 'github'`" : 'no options';
  const line = `| ${name}, demand 2x for ${DEMAND_SECONDS} s | ${who} | ${((100 * ok) / quota).toFixed(1)} % of the quota after 1 s | ${server.throttled(after)} × 429 after 1 s (${server.throttled(0)} in all), ${next} sent |`;
  await close();
  await Promise.allSettled([...pending]);
  await server.close();
  return line;
}

export async function quotaHeadersSuite(): Promise<void> {
  console.log('| server | client | result | answers |');
  console.log('| --- | --- | --: | --- |');
  // The 40-call rows one after the other (a few seconds); the buckets' four rows side by side.
  for (const limited of [true, false]) console.log(await fortyAtOnce(limited));
  const rows = await Promise.all([
    bucketAtTwice('ietf', true),
    bucketAtTwice('github', true),
    bucketAtTwice('ietf', false),
    bucketAtTwice('github', false),
  ]);
  for (const row of rows) console.log(row);
}
