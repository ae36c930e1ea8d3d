import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { githubCoreHeaders } from './helpers/github-window.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// A `classify` of the caller's that throws on an answer the API counted: the answer's quota
// headers are still read, so the window's credit counts the call. A real node:http server on
// 127.0.0.1 announcing GitHub's headers, the limiter's and the server's clocks one manual clock.

/** The server's wall clock at the manual clock's 0: a whole second, as a `Date` starts. */
const EPOCH_MS = Date.UTC(2026, 0, 5, 12, 0, 0);

/**
 * GitHub's core hour with 10 left, its reset 50 minutes away: `/bad` is answered 422, counted;
 * `/held` is answered when the test calls `answerHeld` (calls in flight).
 */
async function github(clock: ManualClock) {
  let left = 10;
  const statuses: number[] = [];
  const held: (() => void)[] = [];
  const reset = Math.ceil((EPOCH_MS + 3_000_000) / 1000);
  const server = await serve({
    respond: (req, res) => {
      const status = left === 0 ? 403 : req.url === '/bad' ? 422 : 200;
      if (left > 0) left--;
      statuses.push(status);
      const headers = githubCoreHeaders(EPOCH_MS + clock.now(), left, reset);
      const end = () => res.writeHead(status, headers).end('x');
      if (req.url === '/held') held.push(end);
      else end();
      return true;
    },
  });
  const answerHeld = () => {
    for (const end of held.splice(0)) end();
  };
  return { server, statuses, answerHeld };
}

/** A `classify` with a bug on 422. */
const classify = (status: number) => {
  if (status === 422) throw new Error('classify bug');
  return undefined;
};

const options = {
  classify,
  default: { headers: 'github', maxPause: 3_600_000, maxWait: 3_600_000 },
} as const;

/** Awaits `pending`, stepping the clock 50 ms while it is not settled. */
async function stepping<T>(clock: ManualClock, pending: Promise<T>): Promise<T> {
  let settled = false;
  const done = pending.finally(() => {
    settled = true;
  });
  void done.catch(() => {});
  while (!settled) {
    let polls = 0;
    await until(() => settled || ++polls >= 5, 'the sockets to settle');
    if (!settled) clock.advance(50);
  }
  return pending;
}

/** Sends `n` at once, stepping the clock 50 ms for 3 s, none answered: how many reached the server. */
async function sentAtOnce(clock: ManualClock, send: () => Promise<unknown>, n: number, seen: () => number) {
  const before = seen();
  for (let i = 0; i < n; i++) void send().catch(() => {});
  for (let t = 0; t < 3_000; t += 50) {
    let polls = 0;
    await until(() => ++polls >= 5, 'the sockets to settle');
    clock.advance(50);
  }
  return seen() - before;
}

describe('a classify that throws on an answer the API counted', () => {
  it('counts the call against the window (the interceptor): 7 left, 8 sent at once, 7 go and none is refused', async () => {
    const clock = new ManualClock();
    const { server, statuses, answerHeld } = await github(clock);
    const rl = limit({ clock, ...options });
    const agent = agentWith(rl);
    expect((await stepping(clock, get(agent, `${server.origin}/`))).status).toBe(200);
    expect((await stepping(clock, get(agent, `${server.origin}/`))).status).toBe(200);
    await expect(stepping(clock, get(agent, `${server.origin}/bad`))).rejects.toThrow('classify bug');
    const sent = await sentAtOnce(
      clock,
      () => get(agent, `${server.origin}/held`),
      8,
      () => statuses.length,
    );
    answerHeld();
    expect(sent).toBe(7);
    expect(statuses.filter((s) => s === 403)).toEqual([]);
  });

  it('counts the call against the window (the fetch wrapper): 7 left, 8 sent at once, 7 go and none is refused', async () => {
    const clock = new ManualClock();
    const { server, statuses, answerHeld } = await github(clock);
    const limited = rateLimitedFetch({ clock, ...options });
    cleanups.push(() => limited.close());
    const url = `${server.origin}/`;
    const later = `${server.origin}/held`;
    expect((await stepping(clock, limited(url))).status).toBe(200);
    expect((await stepping(clock, limited(url))).status).toBe(200);
    await expect(stepping(clock, limited(`${server.origin}/bad`))).rejects.toThrow('classify bug');
    const sent = await sentAtOnce(
      clock,
      () => limited(later).then((r) => r.text()),
      8,
      () => statuses.length,
    );
    answerHeld();
    expect(sent).toBe(7);
    expect(statuses.filter((s) => s === 403)).toEqual([]);
  });
});
