import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { githubCoreHeaders } from './helpers/github-window.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// The cold start against GitHub's fixed window, as chosen: the cold start's cap goes before any
// answer, as for any API; no call goes first alone to read what is left, unless `slowStart: 1`.
// A real node:http server on 127.0.0.1 that holds every answer until the test lets it go, the
// limiter's and the server's clocks one manual clock.

/** The server's wall clock at the manual clock's 0: a whole second, as a `Date` starts. */
const EPOCH_MS = Date.UTC(2026, 0, 5, 12, 0, 0);

/** GitHub's core hour with `left` left, its reset 50 minutes away; answers held until `answerAll`. */
async function github(clock: ManualClock, left: number) {
  const statuses: number[] = [];
  const held: (() => void)[] = [];
  const reset = Math.ceil((EPOCH_MS + 3_000_000) / 1000);
  const server = await serve({
    respond: (_req, res) => {
      const status = left === 0 ? 403 : 200;
      if (left > 0) left--;
      statuses.push(status);
      const headers = githubCoreHeaders(EPOCH_MS + clock.now(), left, reset);
      held.push(() => res.writeHead(status, headers).end('x'));
      return true;
    },
  });
  const answerAll = () => {
    for (const end of held.splice(0)) end();
  };
  // Answered before the server closes (cleanups run newest first): a held answer keeps it open.
  cleanups.push(answerAll);
  return { server, statuses, answerAll };
}

/** Steps the clock 50 ms `steps` times, letting the sockets settle between steps. */
async function settle(clock: ManualClock, steps = 20): Promise<void> {
  for (let i = 0; i < steps; i++) {
    let polls = 0;
    await until(() => ++polls >= 5, 'the sockets to settle');
    clock.advance(50);
  }
}

const options = { maxPause: 3_600_000, maxWait: 3_600_000 };

describe("a cold start against GitHub's fixed window", () => {
  it('sends its cap of 10 before any answer, with only 8 left: 2 get a 403, and nothing goes past 0 after', async () => {
    // Chosen: one call first, the rest once its answer told what is left, would have kept the 2
    // out; but it slowed every first batch by a round trip, and held a whole batch behind a
    // slow first call (40 at once, the first slow: 1 sent in 3 s, not 40).
    const clock = new ManualClock();
    const { server, statuses, answerAll } = await github(clock, 8);
    const rl = limit({ clock, default: { headers: 'github', ...options } });
    const agent = agentWith(rl);
    for (let i = 0; i < 12; i++) void get(agent, `${server.origin}/`).catch(() => {});
    await settle(clock);
    expect(statuses).toHaveLength(10);
    for (let round = 0; round < 5; round++) {
      answerAll();
      await settle(clock);
    }
    expect(statuses).toHaveLength(10);
    expect(statuses.filter((s) => s === 403)).toHaveLength(2);
  });

  it('sends one call first with slowStart: 1, and none past 0: 10 at once with 8 left, no 403', async () => {
    const clock = new ManualClock();
    const { server, statuses, answerAll } = await github(clock, 8);
    const rl = limit({ clock, default: { headers: 'github', slowStart: 1, ...options } });
    const agent = agentWith(rl);
    for (let i = 0; i < 10; i++) void get(agent, `${server.origin}/`).catch(() => {});
    await settle(clock);
    expect(statuses).toHaveLength(1);
    for (let round = 0; round < 10; round++) {
      answerAll();
      await settle(clock);
    }
    expect(statuses).toHaveLength(8);
    expect(statuses.filter((s) => s === 403)).toEqual([]);
  });
});
