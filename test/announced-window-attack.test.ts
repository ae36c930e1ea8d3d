import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { InterceptorOptions } from '../src/http/options.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';

// Hostile or odd quota-header sequences from real node:http servers on 127.0.0.1, read through
// real undici Agents and Node's fetch. The limiters run on a manual clock, and so do the servers'
// `Date` and resets (the server's clock is the limiter's plus a fixed epoch), so what a test counts
// never depends on real time.

/** The server's wall clock: the limiter's manual clock plus a fixed epoch (whole seconds in `Date`). */
const EPOCH_MS = Date.UTC(2026, 0, 5, 12, 0, 0);
const serverDate = (clock: ManualClock) => new Date(EPOCH_MS + clock.now()).toUTCString();
const epochSeconds = (clock: ManualClock, inMs: number) => Math.floor((EPOCH_MS + clock.now() + inMs) / 1000);

/**
 * GitHub's REST API: the `core` hour, 5,000 a token, with `remaining` counted when a request
 * arrives (as GitHub counts it), the reset 50 minutes away. A request to `/slow` is counted and
 * its answer held (in `held`) until the test ends it: a call GitHub takes long to answer.
 */
async function githubApi(clock: ManualClock, remainingAtStart = 4_880) {
  const held: ServerResponse[] = [];
  const seen = { requests: 0, fast: 0, over: 0 };
  const state = { holding: true };
  let remaining = remainingAtStart;
  const reset = epochSeconds(clock, 3_000_000);
  const server = await serve({
    respond: (req, res) => {
      seen.requests++;
      if (remaining === 0) seen.over++;
      else remaining--;
      const status = remaining === 0 && seen.over > 0 ? 403 : 200;
      res.writeHead(status, {
        date: serverDate(clock),
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': String(remaining),
        'x-ratelimit-used': String(5_000 - remaining),
        'x-ratelimit-reset': String(reset),
        'x-ratelimit-resource': 'core',
      });
      if (req.url === '/slow' && state.holding) held.push(res);
      else {
        seen.fast++;
        res.end('ok');
      }
      return true;
    },
  });
  /** Ends the held answers; later slow calls are answered at once. */
  const release = () => {
    state.holding = false;
    for (const res of held.splice(0)) res.end('ok');
  };
  return { server, seen, release };
}

/**
 * Steps `clock` by `stepMs` up to `ms`, letting the real sockets catch up after each step: until
 * the server has seen every request the limiter let go and the client has every fast answer.
 */
async function runFor(clock: ManualClock, ms: number, stepMs: number, settled: () => boolean): Promise<void> {
  for (let t = 0; t < ms; t += stepMs) {
    await settle(settled);
    clock.advance(stepMs);
  }
  await settle(settled);
}

/** Waits until `settled()` has held for 10 polls in a row (a request let go reaches the server). */
async function settle(settled: () => boolean): Promise<void> {
  let calm = 0;
  await until(() => {
    calm = settled() ? calm + 1 : 0;
    return calm >= 10;
  }, 'the sockets to settle');
}

/** Advances `clock` by `stepMs` while `waiting()` holds (a pause or the pacer holds a request). */
async function advanceWhile(clock: ManualClock, waiting: () => boolean, stepMs: number): Promise<void> {
  for (let i = 0; waiting(); i++) {
    if (i >= 2_000) throw new Error('the request never went');
    clock.advance(stepMs);
    await new Promise<void>((resolve) => setTimeout(resolve, 1));
  }
}

/** A server answering request n (from 1) with `script(n)`: a status and headers. */
function scripted(
  script: (n: number, req: IncomingMessage) => { status?: number; headers: OutgoingHttpHeaders },
) {
  let n = 0;
  return serve({
    respond: (req, res) => {
      const { status = 200, headers } = script(++n, req);
      res.writeHead(status, headers).end('x');
      return true;
    },
  });
}

function interceptor(clock: ManualClock, options: InterceptorOptions = {}) {
  const rl = limit({ clock, ...options });
  return { rl, agent: agentWith(rl) };
}

/** `n` GETs at once; their statuses once all settle (a rejection: its error's code). */
function burst(agent: Dispatcher, urls: (i: number) => string, n: number, done: (i: number) => void) {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      get(agent, urls(i)).then(
        (r) => {
          done(i);
          return r.status;
        },
        (e: { code?: string }) => e.code ?? 'error',
      ),
    ),
  );
}

describe("GitHub's fixed window: a burst within the secondary limits", () => {
  it('sends 40 calls at once with 4,880 of 5,000 left within 3 s, 0 refused (Node fetch)', async () => {
    const clock = new ManualClock();
    const { server, seen } = await githubApi(clock);
    const limitedFetch = rateLimitedFetch({ clock, default: { headers: 'github' } });
    cleanups.push(() => limitedFetch.close());
    let answered = 0;
    const all = Promise.all(
      Array.from({ length: 40 }, async () => {
        const response = await limitedFetch(`${server.origin}/fast`);
        await response.text();
        answered++;
        return response.status;
      }),
    );
    await runFor(clock, 3_000, 50, () => answered === seen.requests);
    expect(seen.requests).toBe(40);
    expect(await all).toEqual(Array(40).fill(200));
    expect(seen.over).toBe(0);
  });

  it('sends 40 calls at once within 3 s when half of them are slow to answer (its own calls in flight are no other client)', async () => {
    // The process is alone on the token: every unit the window loses is one of its own calls.
    // Its slow calls are counted by GitHub when they arrive, and answered later: the fast
    // answers see `remaining` fall by two for each of them. Read as other clients' drain, the
    // process's part fell to 0.75 and the window lost its burst (900 a minute) for 62.5 a minute:
    // 24 of the 40 calls went in 3 s, the other 16 one every 0.96 s.
    const clock = new ManualClock();
    const { server, seen, release } = await githubApi(clock);
    const { rl, agent } = interceptor(clock, { default: { headers: 'github' } });
    let answered = 0;
    let fastAnswered = 0;
    const all = burst(
      agent,
      (i) => `${server.origin}/${i % 2 === 0 ? 'slow' : 'fast'}`,
      40,
      (i) => {
        answered++;
        if (i % 2 === 1) fastAnswered++;
      },
    );
    await runFor(clock, 3_000, 50, () => fastAnswered === seen.fast);
    const sent = seen.requests;
    const rate = rl.registry.get(server.origin)?.snapshot().announcedRate;
    release();
    await runFor(clock, 60_000, 1_000, () => answered === seen.requests);
    expect(await all).toEqual(Array(40).fill(200));
    expect(seen.over).toBe(0);
    expect({ sent, rate }).toEqual({ sent: 40, rate: 900 });
  });
});

describe('hostile announcements: every request ends, no pause outlives maxPause', () => {
  it('reads GitHub values out of range, garbage and a reset in the past or in year 5138 without hanging', async () => {
    const clock = new ManualClock();
    const answers: (() => OutgoingHttpHeaders)[] = [
      // Nothing left, the reset in year 5138: an hour's window at most, capped by maxPause.
      () => ({
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': '0',
        'x-ratelimit-reset': '99999999999',
      }),
      // A reset in the past: nothing to wait for.
      () => ({
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': '0',
        'x-ratelimit-reset': String(epochSeconds(clock, -100_000)),
      }),
      // Remaining above the limit, then negative, fractional, huge, a limit of 0.
      () => ({
        'x-ratelimit-limit': '10',
        'x-ratelimit-remaining': '50',
        'x-ratelimit-reset': String(epochSeconds(clock, 60_000)),
      }),
      () => ({
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': '-5',
        'x-ratelimit-reset': String(epochSeconds(clock, 60_000)),
      }),
      () => ({ 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '1.5', 'x-ratelimit-reset': '1e12' }),
      () => ({
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': '999999999999999999999',
        'x-ratelimit-reset': 'soon',
      }),
      () => ({
        'x-ratelimit-limit': '0',
        'x-ratelimit-remaining': '0',
        'x-ratelimit-reset': String(epochSeconds(clock, 30_000)),
      }),
    ];
    const server = await scripted((n) => ({
      headers: { date: serverDate(clock), ...answers[(n - 1) % answers.length]?.() },
    }));
    const { rl, agent } = interceptor(clock, {
      default: { headers: 'github', maxPause: 120_000, maxWait: 600_000 },
    });
    const paused: (number | undefined)[] = [];
    for (let i = 0; i < answers.length; i++) {
      const pending = get(agent, `${server.origin}/`);
      await advanceWhile(clock, () => server.requests === i, 1_000);
      expect((await pending).status).toBe(200);
      const until = rl.registry.get(server.origin)?.snapshot().pausedUntil;
      paused.push(until === undefined ? undefined : until - clock.now());
    }
    // Only the far reset (capped at 120 s) and limit 0 with 0 left (30 s) pause.
    expect(paused.slice(0, 6)).toEqual([120_000, undefined, undefined, undefined, undefined, undefined]);
    expect(paused[6]).toBeGreaterThan(28_000);
    expect(paused[6]).toBeLessThanOrEqual(31_000);
  });

  it('reads r=0;t=0 as nothing to wait for, and stops capping once the fields disappear', async () => {
    const clock = new ManualClock();
    const server = await scripted((n) => ({
      headers:
        n === 1
          ? { 'ratelimit-policy': '"default";q=6;w=60', ratelimit: '"default";r=0;t=0' }
          : n === 2
            ? { 'ratelimit-policy': '"default";q=6;w=60', ratelimit: '"default";r=5;t=60' }
            : {},
    }));
    const { rl, agent } = interceptor(clock);
    expect((await get(agent, `${server.origin}/`)).status).toBe(200);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBeUndefined();
    expect((await get(agent, `${server.origin}/`)).status).toBe(200);
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(5);
    // 5 a minute: one every 12 s, through answers that do not announce the policy, until its reset.
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const pending = get(agent, `${server.origin}/`);
      await advanceWhile(clock, () => server.requests === 2 + i, 1_000);
      statuses.push((await pending).status);
    }
    expect(statuses).toEqual([200, 200, 200, 200]);
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(5);
    // Past the reset, the first answer without the fields forgets them (4 in a row left them out).
    clock.advance(60_000);
    expect((await get(agent, `${server.origin}/`)).status).toBe(200);
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBeUndefined();
  });

  it('tells an Envoy-like refilling bucket (remaining rising, t=1) from a window: its quota, one unit of pause', async () => {
    const clock = new ManualClock();
    const levels = [3, 4, 5, 0];
    const server = await scripted((n) => ({
      headers: {
        'ratelimit-policy': '"default";q=600;w=60',
        ratelimit: `"default";r=${levels[Math.min(n, levels.length) - 1]};t=1`,
      },
    }));
    const { rl, agent } = interceptor(clock);
    for (let i = 0; i < levels.length; i++) {
      clock.advance(200);
      expect((await get(agent, `${server.origin}/`)).status).toBe(200);
    }
    // Not r/t (0 a second), nor a 1 s pause: 600 a minute, the next unit in 100 ms.
    const snapshot = rl.registry.get(server.origin)?.snapshot();
    expect(snapshot?.announcedRate).toBe(600);
    expect((snapshot?.pausedUntil ?? 0) - clock.now()).toBeLessThanOrEqual(100);
  });
});

describe("GitHub's fixed window: what the answers say it is", () => {
  it('pauses until the reset when an hour has nothing left, after answers whose reset had already passed', async () => {
    // A `Date` a few seconds ahead of the clock that made the reset (or a reset not moved on
    // yet): two answers 2 s apart whose reset is already past read as "the next unit" again and
    // again, a refilling bucket. The hour that follows, with nothing left and its reset 50 minutes
    // away, then paused 720 ms (one unit of 5,000 an hour), not until the reset (capped by
    // maxPause): the next call goes into an exhausted window.
    const clock = new ManualClock();
    const answers = [
      { remaining: 100, resetInMs: -5_000 },
      { remaining: 99, resetInMs: -3_000 },
      { remaining: 0, resetInMs: 3_000_000 },
    ];
    const server = await scripted((n) => {
      const { remaining, resetInMs } = answers[Math.min(n, answers.length) - 1] ?? {
        remaining: 0,
        resetInMs: 0,
      };
      return {
        headers: {
          date: serverDate(clock),
          'x-ratelimit-limit': '5000',
          'x-ratelimit-remaining': String(remaining),
          'x-ratelimit-reset': String(epochSeconds(clock, resetInMs)),
          'x-ratelimit-resource': 'core',
        },
      };
    });
    const { rl, agent } = interceptor(clock, { default: { headers: 'github', maxPause: 120_000 } });
    for (let i = 0; i < answers.length; i++) {
      if (i > 0) clock.advance(2_000);
      expect((await get(agent, `${server.origin}/`)).status).toBe(200);
    }
    expect((rl.registry.get(server.origin)?.snapshot().pausedUntil ?? 0) - clock.now()).toBe(120_000);
  });
});
