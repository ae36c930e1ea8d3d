/**
 * A quota server process of the control bench (forked by bench/control.ts), so that each row's
 * server has its own event loop: `serve` starts it, warms it up, and answers its port; `start` sets the
 * server's clock to 0 at the run's common start time (the drop is timed from there); `stats`
 * answers its counters. It exits when its parent goes away.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { exitWithParent, sendToParent } from './control-procs.js';
import { type QuotaServer, type QuotaServerOptions, startQuotaServer } from './control-quota-server.js';
import { warmUpServer } from './control-warmup.js';

export type ToServer =
  | { type: 'serve'; options: Omit<QuotaServerOptions, 'now'> }
  | { type: 'start'; startAt: number }
  | { type: 'stats' };
export type FromServer =
  | { type: 'listening'; port: number }
  | { type: 'stats'; accepted: number; throttled: number }
  | { type: 'error'; message: string };

exitWithParent();
let origin = performance.now();
let server: QuotaServer | undefined;
process.on('message', (message: ToServer) => {
  void (async () => {
    try {
      if (message.type === 'serve') {
        server = await startQuotaServer({ ...message.options, now: () => performance.now() - origin });
        await warmUpServer(server.url);
        server.reset();
        await sendToParent({ type: 'listening', port: server.port } satisfies FromServer);
      } else if (message.type === 'start') {
        await sleep(Math.max(0, message.startAt - Date.now()));
        origin = performance.now();
        server?.reset();
      } else if (message.type === 'stats') {
        const stats: FromServer = {
          type: 'stats',
          accepted: server?.accepted ?? 0,
          throttled: server?.throttled ?? 0,
        };
        await sendToParent(stats);
      }
    } catch (error) {
      await sendToParent({
        type: 'error',
        message: String((error as Error)?.stack ?? error),
      } satisfies FromServer);
      process.exit(1);
    }
  })();
});
