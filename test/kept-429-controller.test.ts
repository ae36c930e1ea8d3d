import { Agent, type Dispatcher, Pool, request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { advanceUntil, limit, throttleThenHold } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// The kept 429 handed to the caller after its retry's dispatch failed on a closed Agent, seen
// through a raw dispatch handler: its callbacks, and the controller the caller holds.

interface Log {
  told: string[];
  raw?: unknown;
  done: boolean;
}

function run(
  dispatcher: Dispatcher,
  origin: string,
  hooks: { onStart?: (c: Dispatcher.DispatchController) => void } = {},
) {
  const log: Log = { told: [], done: false };
  let controller: Dispatcher.DispatchController | undefined;
  dispatcher.dispatch({ origin, path: '/item', method: 'GET' }, {
    onRequestStart(c) {
      controller = c;
    },
    onResponseStart(c, status) {
      log.told.push(`start ${status}`);
      log.raw = c.rawHeaders;
      hooks.onStart?.(c);
    },
    onResponseData(_c, chunk) {
      log.told.push(`data ${chunk.toString()}`);
    },
    onResponseEnd() {
      log.told.push('end');
      log.done = true;
    },
    onResponseError(_c, error) {
      log.told.push(`error: ${error.message}`);
      log.done = true;
    },
  } as Dispatcher.DispatchHandler);
  return { log, controller: () => controller };
}

const rawNames = (raw: unknown) =>
  Array.isArray(raw) ? raw.filter((_, i) => i % 2 === 0).map((b) => String(b).toLowerCase()) : raw;

describe('kept 429: the kept 429 delivered after the retry met a closed Agent', () => {
  // The limiter refuses the retry when the interceptor closes: the same 429, delivered the way the
  // kept one is, is the control.
  it.each([
    [
      "the caller's controller.rawHeaders are the delivered 429's (as when the limiter refuses the retry)",
      'agent',
    ],
    [
      'control: the same 429 delivered because the interceptor closed (the limiter refused the retry) has its rawHeaders',
      'interceptor',
    ],
  ] as const)('%s', async (_name, closed) => {
    const { server } = await throttleThenHold(1);
    const clock = new ManualClock();
    const rl = limit({ clock });
    const inner = new Agent();
    const agent = inner.compose(rl);
    const { log } = run(agent, server.origin);
    await until(() => rl.registry.get(server.origin)?.snapshot().queued === 1, 'the retry to queue');
    await (closed === 'agent' ? inner.close() : rl.close());
    await advanceUntil(clock, () => log.done, 'the end');
    if (closed === 'interceptor') await inner.close();
    expect(log.told).toEqual(['start 429', 'data 429 #1', 'end']);
    expect(rawNames(log.raw)).toEqual(expect.arrayContaining(['retry-after', 'x-which']));
  });

  it('the caller aborts in onResponseStart of the delivered 429: one onResponseError, nothing after', async () => {
    const { server } = await throttleThenHold(1);
    const clock = new ManualClock();
    const rl = limit({ clock });
    const agent = new Agent().compose(rl);
    const { log } = run(agent, server.origin, { onStart: (c) => c.abort(new Error('the caller aborts')) });
    await until(() => rl.registry.get(server.origin)?.snapshot().queued === 1, 'the retry to queue');
    await agent.close();
    await advanceUntil(clock, () => log.done, 'the end');
    expect(log.told).toEqual(['start 429', 'error: the caller aborts']);
  });

  it('the caller aborts while the retry is at the server (a 429 kept): one onResponseError, no 429', async () => {
    const { server, held } = await throttleThenHold(1);
    const clock = new ManualClock();
    const rl = limit({ clock });
    const inner = new Agent();
    const agent = inner.compose(rl);
    const { log, controller } = run(agent, server.origin);
    await advanceUntil(clock, () => held.length === 1, 'the retry at the server');
    controller()?.abort(new Error('the caller aborts'));
    await until(() => log.done, 'the end');
    held[0]?.end('late');
    await inner.close();
    expect(log.told).toEqual(['error: the caller aborts']);
  });

  it('maxAttempts 3: a second 429 replaces the first; the Agent closed before the third: the second 429', async () => {
    const { server } = await throttleThenHold(2);
    const clock = new ManualClock();
    const rl = limit({ clock, maxAttempts: 3 });
    const agent = new Agent().compose(rl);
    const { log } = run(agent, server.origin);
    await advanceUntil(clock, () => server.requests === 2, 'the second 429');
    await until(() => rl.registry.get(server.origin)?.snapshot().queued === 1, 'the third to queue');
    await agent.close();
    await advanceUntil(clock, () => log.done, 'the end');
    expect(log.told).toEqual(['start 429', 'data 429 #2', 'end']);
  });

  it('a Pool destroyed (not closed) while the retry waits: the 429', async () => {
    const { server } = await throttleThenHold(1);
    const clock = new ManualClock();
    const rl = limit({ clock });
    const pool = new Pool(server.origin);
    const agent = pool.compose(rl);
    const answer = request(`${server.origin}/item`, { dispatcher: agent }).then(
      async (r) => ({ status: r.statusCode, body: await r.body.text() }),
      (error: unknown) => ({ error }),
    );
    await until(() => rl.registry.get(server.origin)?.snapshot().queued === 1, 'the retry to queue');
    await pool.destroy();
    let settled: unknown;
    void answer.then((a) => (settled = a));
    await advanceUntil(clock, () => settled !== undefined, 'the answer');
    expect(settled).toEqual({ status: 429, body: '429 #1' });
    expect(rl.registry.get(server.origin)?.snapshot()).toMatchObject({ queued: 0 });
  });
});
