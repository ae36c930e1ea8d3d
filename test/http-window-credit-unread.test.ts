import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { githubCoreHeaders } from './helpers/github-window.js';
import { agentWith, get, getMany, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// A fixed window's credit behind a proxy that answers some calls itself, with no quota headers (a
// 502 page, a 429): a real node:http server on 127.0.0.1, GitHub's headers, and the limiter's and
// the server's clocks one manual clock, so what a test counts never depends on real time.

/** The server's wall clock at the manual clock's 0: a whole second, as a `Date` starts. */
const EPOCH_MS = Date.UTC(2026, 0, 5, 12, 0, 0);

/**
 * GitHub's core hour with 10 left, its reset 50 minutes away, behind a proxy: `proxy(n)` for the
 * n-th request to arrive (0-based) answers it at once with that status and no quota headers (it
 * never reaches the API), or `undefined`: the API counts it and answers 1 s later.
 */
async function githubBehindProxy(clock: ManualClock, proxy: (n: number) => number | undefined) {
  let left = 10;
  let arrivals = 0;
  const api: { status: number; at: number }[] = [];
  const held: { end: () => void; at: number }[] = [];
  const reset = Math.ceil((EPOCH_MS + 3_000_000) / 1000);
  const server = await serve({
    respond: (_req, res) => {
      const own = proxy(arrivals++);
      if (own !== undefined) {
        res.writeHead(own, { 'content-type': 'text/html' }).end('<html>proxy</html>');
        return true;
      }
      const status = left > 0 ? 200 : 403;
      if (left > 0) left--;
      api.push({ status, at: clock.now() });
      const headers = githubCoreHeaders(EPOCH_MS + clock.now(), left, reset);
      held.push({ end: () => res.writeHead(status, headers).end('x'), at: clock.now() });
      return true;
    },
  });
  const answerUpTo = (at: number) => {
    for (const h of held.filter((h) => h.at <= at)) h.end();
    held.splice(0, held.length, ...held.filter((h) => h.at > at));
  };
  return { server, api, answerUpTo, arrivals: () => arrivals };
}

/** Steps `clock` by 50 ms for `ms`, the API's answers leaving 1 s after their calls arrived. */
async function run(clock: ManualClock, ms: number, answerUpTo: (at: number) => void): Promise<void> {
  const end = clock.now() + ms;
  while (clock.now() < end) {
    let polls = 0;
    await until(() => ++polls >= 10, 'the sockets to settle');
    answerUpTo(clock.now() - 1_000);
    clock.advance(50);
  }
}

/** A GitHub client on the manual clock, and two calls that read the window: 8 left. */
async function readWindow(clock: ManualClock, origin: string, answerUpTo: (at: number) => void) {
  const rl = limit({ clock, default: { headers: 'github', maxPause: 120_000, maxWait: 120_000 } });
  const agent = agentWith(rl);
  for (let i = 0; i < 2; i++) {
    const pending = get(agent, `${origin}/`);
    await run(clock, 100, () => answerUpTo(Number.POSITIVE_INFINITY));
    await pending;
  }
  return { rl, agent };
}

describe("a fixed window's credit behind a proxy that answers with no quota headers", () => {
  it('spends the units a proxy 502 left unspent, with no call into the exhausted window', async () => {
    const clock = new ManualClock();
    // The last 3 of the 8 calls the credit allows are answered 502 by the proxy.
    const { server, api, answerUpTo } = await githubBehindProxy(clock, (n) =>
      n >= 7 && n <= 9 ? 502 : undefined,
    );
    const { rl, agent } = await readWindow(clock, server.origin, answerUpTo);
    const { statuses, all } = getMany(agent, `${server.origin}/`, 11);
    await run(clock, 10_000, answerUpTo);
    // The 8 left all reached the API within 10 s (they waited 2 minutes, maxPause, for a reading).
    expect(api.filter((a) => a.status === 200)).toHaveLength(10);
    expect(api.filter((a) => a.status === 403)).toHaveLength(0);
    rl.close();
    answerUpTo(Number.POSITIVE_INFINITY);
    await all;
    expect(statuses.filter((s) => s === 502)).toHaveLength(3);
  });

  it('counts a call throttled by the proxy (429, no quota headers) and retried once', async () => {
    const clock = new ManualClock();
    // The last of the 8 calls the credit allows is answered 429 by the proxy; its retry reaches the API.
    const { server, api, answerUpTo } = await githubBehindProxy(clock, (n) => (n === 9 ? 429 : undefined));
    const { rl, agent } = await readWindow(clock, server.origin, answerUpTo);
    const { statuses, all } = getMany(agent, `${server.origin}/`, 8);
    await run(clock, 10_000, answerUpTo);
    // The retry went with the unit left (it waited 2 minutes, maxPause, both attempts counted).
    expect(api.filter((a) => a.status === 200)).toHaveLength(10);
    expect(api.filter((a) => a.status === 403)).toHaveLength(0);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 200]);
    rl.close();
    answerUpTo(Number.POSITIVE_INFINITY);
    await all;
  });
});

describe("a cold start's first answers on a fixed window", () => {
  it('sends no call past 0 after the first answers, before they tell the window (10 left, 10 sent at once)', async () => {
    // The cold start sends 10 at once, before any answer: the 10 left. Each answer freed its
    // place in the cold start's cap (and grew it) before its quota was read, and one reading
    // alone was not yet a window: 3 more calls went into the exhausted window, answered 403.
    const clock = new ManualClock();
    const { server, api, answerUpTo } = await githubBehindProxy(clock, () => undefined);
    const rl = limit({ clock, default: { headers: 'github', maxPause: 120_000, maxWait: 120_000 } });
    const agent = agentWith(rl);
    let settled = 0;
    const calls = Array.from({ length: 30 }, () =>
      get(agent, `${server.origin}/`).then(
        () => settled++,
        () => settled++,
      ),
    );
    await until(() => api.length === 10, 'the cold start to send 10');
    await run(clock, 5_000, answerUpTo);
    expect(api.filter((a) => a.at === 0)).toHaveLength(10);
    expect(api.filter((a) => a.status === 403)).toHaveLength(0);
    rl.close();
    answerUpTo(Number.POSITIVE_INFINITY);
    await Promise.all(calls);
    expect(settled).toBe(30);
  });
});
