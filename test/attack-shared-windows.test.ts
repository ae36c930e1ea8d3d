import type { OutgoingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { githubCoreHeaders } from './helpers/github-window.js';
import { agentWith, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// Several clients (separate interceptors, each with its own undici Agent and registry, as separate
// processes would be) on one fixed window that a real node:http server on 127.0.0.1 keeps for all
// of them. The limiters and the server's clock (its `Date` and epoch resets) run on one manual
// clock, so what a test counts never depends on real time.

/** The server's wall clock at the manual clock's 0: a whole second, as a `Date` starts. */
const EPOCH_MS = Date.UTC(2026, 0, 5, 12, 0, 0);

/**
 * GitHub's `search` window, shared by every client: `limit` a minute, `remaining` left at the
 * start and its reset `resetInMs` away (then a new window each minute). A request is counted when
 * it arrives; with nothing left it is answered 403 (GitHub's primary limit). `log` holds each
 * request's window (0 for the first) and status.
 */
async function githubSearchWindow(
  clock: ManualClock,
  limitPerMinute: number,
  remaining: number,
  resetInMs: number,
) {
  let left = remaining;
  let resetAt = resetInMs;
  let window = 0;
  const log: { window: number; status: number }[] = [];
  const server = await serve({
    respond: (_req, res) => {
      const now = clock.now();
      while (now >= resetAt) {
        resetAt += 60_000;
        left = limitPerMinute;
        window++;
      }
      const status = left > 0 ? 200 : 403;
      if (left > 0) left--;
      log.push({ window, status });
      const headers: OutgoingHttpHeaders = {
        date: new Date(EPOCH_MS + now).toUTCString(),
        'x-ratelimit-limit': String(limitPerMinute),
        'x-ratelimit-remaining': String(left),
        'x-ratelimit-reset': String(Math.ceil((EPOCH_MS + resetAt) / 1000)),
        'x-ratelimit-resource': 'search',
      };
      res.writeHead(status, headers).end('x');
      return true;
    },
  });
  return { server, log };
}

/**
 * Steps `clock` by `stepMs` until `done()` holds, letting the real sockets catch up after each
 * step (10 polls): a call the limiter holds goes at its turn on the manual clock.
 */
async function stepUntil(clock: ManualClock, stepMs: number, done: () => boolean): Promise<void> {
  for (let i = 0; !done(); i++) {
    if (i >= 300) throw new Error('the calls never went');
    let polls = 0;
    await until(() => done() || ++polls >= 10, 'the sockets to settle');
    if (!done()) clock.advance(stepMs);
  }
}

/** One GET through `agent`, the clock stepped by whole seconds while the limiter holds it. */
async function call(clock: ManualClock, agent: Dispatcher, url: string): Promise<number> {
  let status: number | undefined;
  const pending = get(agent, url).then((r) => {
    status = r.status;
  });
  await stepUntil(clock, 1_000, () => status !== undefined);
  await pending;
  return status as number;
}

/** A client of its own: an interceptor on the manual clock reading GitHub's headers, and its Agent. */
function githubClient(clock: ManualClock) {
  const rl = limit({ clock, default: { headers: 'github', maxPause: 120_000, maxWait: 120_000 } });
  return { rl, agent: agentWith(rl) };
}

describe('clients sharing one fixed window: nothing left pauses until the reset', () => {
  it('sends no call into the exhausted window at its last half second (GitHub headers, two clients)', async () => {
    // The profile counted the reset from the middle of the `Date` second: with nothing left, the
    // pause ended up to a second before the reset (here 500 ms: the answers were made at a whole
    // second), and each client's next call met the exhausted window: a 403 per client.
    const clock = new ManualClock();
    const { server, log } = await githubSearchWindow(clock, 30, 4, 20_000);
    const a = githubClient(clock);
    const b = githubClient(clock);
    // Spent one call at a time, alternately: a's last answer said 1 was left, b's that none was.
    // The clock moves by whole seconds: every answer is made at the start of its `Date` second.
    for (const { agent } of [a, b, a, b]) expect(await call(clock, agent, `${server.origin}/`)).toBe(200);
    // a reads the 1 left, spent by b: one 403, and a pauses too.
    expect(await call(clock, a.agent, `${server.origin}/`)).toBe(403);
    for (const { rl } of [a, b]) expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBeDefined();
    // One call each, waiting for the reset.
    const next = [a, b].map(({ agent }) => get(agent, `${server.origin}/`));
    await stepUntil(clock, 100, () => log.length === 7);
    expect((await Promise.all(next)).map((r) => r.status)).toEqual([200, 200]);
    expect(log.map((e) => `${e.window}:${e.status}`)).toEqual([
      '0:200',
      '0:200',
      '0:200',
      '0:200',
      '0:403',
      '1:200',
      '1:200',
    ]);
  });
});

describe('a fixed window whose limit the API changes mid-run', () => {
  it("reads a lowered limit's drop of remaining as the API's, not other clients': the burst stays (GitHub headers)", async () => {
    // GitHub lowers a token's hour from 5,000 to 1,000 and `remaining` falls with it, from 3,997
    // to 999. Read as other clients' drain (3,000 units gone for this process's one call), the
    // process's part fell to about half and the window lost its burst (900 a minute) for its
    // share of 999 over the 50 minutes left: about 9 a minute, until more drops were measured.
    const clock = new ManualClock();
    const answers = [
      { limit: 5_000, remaining: 3_999 },
      { limit: 5_000, remaining: 3_998 },
      { limit: 5_000, remaining: 3_997 },
      { limit: 1_000, remaining: 999 },
    ];
    const reset = Math.ceil((EPOCH_MS + 3_000_000) / 1000);
    let n = 0;
    const server = await serve({
      respond: (_req, res) => {
        const { limit: quota, remaining } = answers[Math.min(n++, answers.length - 1)] as (typeof answers)[0];
        res
          .writeHead(200, {
            date: new Date(EPOCH_MS + clock.now()).toUTCString(),
            'x-ratelimit-limit': String(quota),
            'x-ratelimit-remaining': String(remaining),
            'x-ratelimit-reset': String(reset),
            'x-ratelimit-resource': 'core',
          })
          .end('x');
        return true;
      },
    });
    const { rl, agent } = githubClient(clock);
    for (let i = 0; i < answers.length; i++) expect(await call(clock, agent, `${server.origin}/`)).toBe(200);
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(900);
  });
});

describe('a fixed window alone, spent at its burst while its calls are in flight', () => {
  // The limiter spends a window it is alone on at GitHub's 900 a minute, and did not count its
  // calls in flight against `remaining` (nor did `burst: 'announced'`, whose bucket refills at
  // that rate): with 8 left and answers taking 1 s, 15 more calls went into the exhausted window
  // before the answer that said 0 came back.
  it('sends no call past remaining 0 when its answers take 1 s (GitHub headers)', async () => {
    const clock = new ManualClock();
    let left = 10;
    let throttled = 0;
    const held: { end: () => void; at: number }[] = [];
    const reset = Math.ceil((EPOCH_MS + 3_000_000) / 1000);
    const server = await serve({
      respond: (_req, res) => {
        const status = left > 0 ? 200 : 403;
        if (left > 0) left--;
        else throttled++;
        const headers = githubCoreHeaders(EPOCH_MS + clock.now(), left, reset);
        held.push({ end: () => res.writeHead(status, headers).end('x'), at: clock.now() });
        return true;
      },
    });
    const { rl, agent } = githubClient(clock);
    const answerUpTo = (at: number) => {
      for (const h of held.filter((h) => h.at <= at)) h.end();
      held.splice(0, held.length, ...held.filter((h) => h.at > at));
    };
    // Two calls one after the other: a window (the same reset, remaining falling), alone on it.
    for (let i = 0; i < 2; i++) {
      const pending = get(agent, `${server.origin}/`);
      await until(() => held.length === 1, 'the call to arrive');
      answerUpTo(clock.now());
      await pending;
    }
    let settled = 0;
    const calls = Array.from({ length: 30 }, () =>
      get(agent, `${server.origin}/`).then(
        () => settled++,
        () => settled++,
      ),
    );
    // Each answer leaves the server 1 s after its call arrived, for 3 s.
    await stepUntil(clock, 50, () => {
      answerUpTo(clock.now() - 1_000);
      return clock.now() >= 3_000;
    });
    rl.close();
    answerUpTo(Number.POSITIVE_INFINITY);
    await Promise.all(calls);
    expect(settled).toBe(30);
    expect(throttled).toBe(0);
  });
});
