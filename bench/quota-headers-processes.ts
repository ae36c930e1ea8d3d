/**
 * Two real processes sharing one announced quota (not a test: it prints).
 *
 *   node --import tsx bench/quota-headers-processes.ts [windowSeconds]
 *
 * The parent starts the server of bench/quota-headers.ts (600 per window, IETF RateLimit fields,
 * 429 + Retry-After past the quota) and two child processes, each with Node's fetch through its
 * own `new Agent().compose(adaptiveRateLimit())`: each sends 100 calls at once, then half of
 * twice the quota until window 2 ends. Windows 1 and 2 are measured.
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Agent, type Dispatcher } from 'undici';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { startAnnouncingServer } from '../test/helpers/announcing-server.js';

const QUOTA = 600;

if (process.argv[2] === 'client')
  await client(process.argv[3] ?? '', Number(process.argv[4]), Number(process.argv[5]));
else await parent(Number(process.argv[2] ?? 60));

async function parent(windowSeconds: number): Promise<void> {
  const server = await startAnnouncingServer({ quota: QUOTA, windowSeconds, family: 'ietf' });
  const endAt = Date.now() + server.window().leftMs + 2 * windowSeconds * 1000;
  const perSecond = QUOTA / windowSeconds; // each: half of twice the quota
  const self = fileURLToPath(import.meta.url);
  const children = [0, 1].map(() =>
    fork(self, ['client', server.url, String(perSecond), String(endAt)], {
      execArgv: ['--import', 'tsx'],
      stdio: 'inherit',
    }),
  );
  await Promise.all(children.map((child) => once(child, 'exit')));
  const measured = server.acceptedIn(1) + server.acceptedIn(2);
  const sent = server.accepted + server.throttled;
  console.log(
    `two processes: windows 1-2 accepted ${measured} of ${2 * QUOTA} (${((100 * measured) / (2 * QUOTA)).toFixed(1)} %); ` +
      `429s ${server.throttled} of ${sent} requests the server saw (${((100 * server.throttled) / sent).toFixed(2)} %)`,
  );
  await server.close();
}

async function client(url: string, perSecond: number, endAt: number): Promise<void> {
  const interceptor = adaptiveRateLimit();
  const dispatcher: Dispatcher = new Agent().compose(interceptor);
  const counts = { ok: 0, throttled: 0, rejected: 0 };
  const send = () =>
    fetch(`${url}/`, { dispatcher } as RequestInit).then(
      async (response) => {
        await response.arrayBuffer();
        if (response.status === 429) counts.throttled++;
        else counts.ok++;
      },
      () => {
        counts.rejected++;
      },
    );
  await Promise.all(Array.from({ length: 100 }, send));
  const from = Date.now();
  let sent = 0;
  const pending = new Set<Promise<void>>();
  const timer = setInterval(() => {
    const due = Math.floor(((Math.min(Date.now(), endAt) - from) * perSecond) / 1000);
    while (sent < due) {
      sent++;
      const p = send();
      pending.add(p);
      p.finally(() => pending.delete(p));
    }
  }, 50);
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, endAt - Date.now())));
  clearInterval(timer);
  const s = interceptor.registry.get(url)?.snapshot();
  console.log(
    `process ${process.pid}: demand ${sent}, ok ${counts.ok}, 429 ${counts.throttled}, ` +
      `rejected ${counts.rejected}, announced ${s?.announcedRate?.toFixed(1)} units/min at the end`,
  );
  interceptor.close();
  await Promise.allSettled([...pending]);
  await dispatcher.close();
}
