/**
 * Measures pacing from announced quotas against a real local server (not a test: it prints).
 *
 *   node --import tsx bench/quota-headers.ts ietf|github|two [windowSeconds]
 *
 * The server announces `quota` 600 per window (60 s by default) in the family named and answers
 * 429 + Retry-After past it (fixed windows from its start). Window 0: 200 fetch calls at once
 * (Node's fetch through `new Agent().compose(adaptiveRateLimit(...))`), then demand at twice the
 * quota until the end of window 2; windows 1 and 2 (whole windows) are measured. `two`: two
 * interceptors with their own limiters (two clients, each told the shared remaining) send half
 * the demand each.
 */
import { Agent, type Dispatcher } from 'undici';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import type { InterceptorOptions } from '../src/http/options.js';
import { type HeaderFamily, startAnnouncingServer } from '../test/helpers/announcing-server.js';

const mode = (process.argv[2] ?? 'ietf') as 'ietf' | 'github' | 'two';
const windowSeconds = Number(process.argv[3] ?? 60);
const QUOTA = 600;
const family: HeaderFamily = mode === 'github' ? 'github' : 'ietf';
const server = await startAnnouncingServer({ quota: QUOTA, windowSeconds, family });
const options: InterceptorOptions =
  mode === 'github' ? { limiters: { api: { origins: [server.url], headers: 'github' } } } : {};
const clients = mode === 'two' ? 2 : 1;
const dispatchers: Dispatcher[] = [];
const interceptors: ReturnType<typeof adaptiveRateLimit>[] = [];
for (let i = 0; i < clients; i++) {
  const interceptor = adaptiveRateLimit(options);
  interceptors.push(interceptor);
  dispatchers.push(new Agent().compose(interceptor));
}

const counts = { ok: 0, throttled: 0, rejected: 0, other: 0 };
function send(dispatcher: Dispatcher): Promise<void> {
  return fetch(`${server.url}/`, { dispatcher } as RequestInit).then(
    async (response) => {
      await response.arrayBuffer();
      if (response.status === 200) counts.ok++;
      else if (response.status === 429) counts.throttled++;
      else counts.other++;
    },
    () => {
      counts.rejected++;
    },
  );
}

// 200 calls at once, from the first client.
await Promise.all(Array.from({ length: 200 }, () => send(dispatchers[0] as Dispatcher)));
const burst429 = server.throttled;
console.log(`burst: 200 fetch at once -> ${counts.ok} ok, ${server.throttled} answered 429 by the server`);

// Twice the quota until window 2 ends.
const perSecond = (2 * QUOTA) / windowSeconds;
const endAt = Date.now() + server.window().leftMs + 2 * windowSeconds * 1000;
const pending = new Set<Promise<void>>();
const demandFrom = Date.now();
let next = 0;
// Catches up on late ticks: the demand is counted from the clock, not from the ticks.
const timer = setInterval(() => {
  const now = Math.min(Date.now(), endAt);
  const due = Math.floor(((now - demandFrom) * perSecond) / 1000);
  while (next < due) {
    const p = send(dispatchers[next++ % clients] as Dispatcher);
    pending.add(p);
    p.finally(() => pending.delete(p));
  }
}, 50);
const progress = setInterval(() => {
  const { index } = server.window();
  console.log(
    `window ${index}: accepted ${server.acceptedIn(index)}, 429s so far ${server.throttled}, limiter ${interceptors
      .map((r) => {
        const s = r.registry.get(mode === 'github' ? 'api' : server.url)?.snapshot();
        return `announced ${s?.announcedRate?.toFixed(1)} queued ${s?.queued}`;
      })
      .join(' | ')}`,
  );
}, 10_000);
await new Promise((resolve) => setTimeout(resolve, endAt - Date.now()));
clearInterval(timer);
clearInterval(progress);
const measured = server.acceptedIn(1) + server.acceptedIn(2);
const sent = server.accepted + server.throttled;
console.log(
  `${mode}: windows 1-2 accepted ${measured} of ${2 * QUOTA} (${((100 * measured) / (2 * QUOTA)).toFixed(1)} %); ` +
    `429s after the burst ${server.throttled - burst429} of ${sent} requests the server saw ` +
    `(${((100 * server.throttled) / sent).toFixed(2)} %); demand ${next} requests in ` +
    `${((endAt - demandFrom) / 1000).toFixed(0)} s; rejected by the limiter ${counts.rejected}`,
);
for (const interceptor of interceptors) interceptor.close();
await Promise.allSettled([...pending]);
for (const dispatcher of dispatchers) await dispatcher.close();
await server.close();
