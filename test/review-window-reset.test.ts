import type { OutgoingHttpHeaders } from 'node:http';
import { Agent, request, fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { classifyThrown } from '../src/wrap/sdk-errors.js';
import { wrap } from '../src/wrap/wrap.js';
import { githubCoreHeaders } from './helpers/github-window.js';
import { agentWith, cleanups, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { take, windowLimiter } from './helpers/window-limiter.js';

// A review of "a window read from some answers' headers holds until its reset" (announced quotas
// kept through answers that leave them out). Real node:http servers on 127.0.0.1, the limiter's
// and the servers' clocks one manual clock; requests are counted as the clock is stepped.

/** Steps the clock 50 ms `steps` times, letting the sockets settle between steps. */
async function settle(clock: ManualClock, steps: number): Promise<void> {
  for (let i = 0; i < steps; i++) {
    let polls = 0;
    await until(() => ++polls >= 5, 'the sockets to settle');
    clock.advance(50);
  }
}

/**
 * An IETF refilling bucket of 60 a minute (5 at most, one more each second of the manual clock),
 * announced on every answer (`t`: the next unit, 1 s), but for `/proxy`: a proxy's 502 with no
 * quota headers.
 */
async function bucketBehindProxy(clock: ManualClock) {
  let tokens = 5;
  let at = 0;
  const statuses: number[] = [];
  const server = await serve({
    respond: (req, res) => {
      if (req.url === '/proxy') {
        statuses.push(502);
        res.writeHead(502).end('bad gateway');
        return true;
      }
      tokens = Math.min(5, tokens + Math.floor((clock.now() - at) / 1_000));
      at = clock.now() - ((clock.now() - at) % 1_000);
      const status = tokens >= 1 ? 200 : 429;
      if (status === 200) tokens--;
      statuses.push(status);
      const headers: OutgoingHttpHeaders = {
        'ratelimit-policy': '"default";q=60;w=60',
        ratelimit: `"default";r=${tokens};t=1`,
      };
      res.writeHead(status, headers).end('x');
      return true;
    },
  });
  return { server, statuses };
}

describe('a refilling bucket announced on some answers only', () => {
  it("keeps its quota through a proxy's answer without headers past the next unit's reset: 20 queued go at 1 a second, none refused", async () => {
    const clock = new ManualClock();
    const { server, statuses } = await bucketBehindProxy(clock);
    const rl = limit({ clock, default: { maxPause: 60_000, maxWait: 600_000 } });
    const agent = agentWith(rl);
    for (let i = 0; i < 2; i++) {
      expect((await get(agent, `${server.origin}/`)).status).toBe(200);
      clock.advance(1_000);
    }
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(60);
    // The proxy's 502 is answered past the reading's `t` (1 s), with 20 calls queued behind it.
    void get(agent, `${server.origin}/proxy`).catch(() => {});
    for (let i = 0; i < 20; i++) void get(agent, `${server.origin}/`).catch(() => {});
    await settle(clock, 40);
    expect(statuses[2]).toBe(502);
    // 2 s of the clock at 60 a minute: a few more, none refused.
    expect(statuses.length).toBeLessThanOrEqual(3 + 4);
    expect(statuses.filter((s) => s === 429)).toEqual([]);
    expect(rl.registry.get(server.origin)?.snapshot().announcedRate).toBe(60);
  });
});

/** The server's wall clock at the manual clock's 0: a whole second, as a `Date` starts. */
const EPOCH_MS = Date.UTC(2026, 0, 5, 12, 0, 0);

/**
 * GitHub's core hour with 10 left, its reset 50 minutes away; every call counted. `/missing` is
 * answered 404, `/bad` 422, `/held` 200 when the test calls `answerHeld` (calls in flight).
 */
async function github(clock: ManualClock) {
  let left = 10;
  const statuses: number[] = [];
  const held: (() => void)[] = [];
  const reset = Math.ceil((EPOCH_MS + 3_000_000) / 1000);
  const server = await serve({
    respond: (req, res) => {
      const status = left === 0 ? 403 : req.url === '/bad' ? 422 : req.url === '/missing' ? 404 : 200;
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
  cleanups.push(answerHeld);
  return { server, statuses, answerHeld };
}

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

describe("wrap: a classifyError that throws on an error the API counted (an SDK's 422)", () => {
  it('counts the call against the window from the error headers: 7 left, 8 sent at once, 7 go and none is refused', async () => {
    const clock = new ManualClock();
    const { server, statuses, answerHeld } = await github(clock);
    const agent = new Agent();
    cleanups.push(() => agent.close());
    // An SDK's call: a 4xx is thrown with its status and headers (as Octokit's RequestError).
    const call = async (path: string) => {
      const res = await request(`${server.origin}${path}`, { dispatcher: agent });
      const body = await res.body.text();
      if (res.statusCode >= 400)
        throw Object.assign(new Error(`HTTP ${res.statusCode}`), {
          status: res.statusCode,
          headers: res.headers,
        });
      return body;
    };
    const limiter = new AdaptiveRateLimiter({ clock, maxPause: 3_600_000, maxWait: 3_600_000 });
    cleanups.push(() => limiter.close());
    const limited = wrap(limiter, call, {
      headers: 'github',
      // A `classifyError` with a bug on 422.
      classifyError: (error) => {
        if ((error as { status?: number }).status === 422) throw new Error('classifyError bug');
        return classifyThrown(error);
      },
    });
    // Two 404s read the window (a 4xx the API counted: a success, its headers read).
    await expect(stepping(clock, limited('/missing'))).rejects.toThrow('HTTP 404');
    await expect(stepping(clock, limited('/missing'))).rejects.toThrow('HTTP 404');
    await expect(stepping(clock, limited('/bad'))).rejects.toThrow('classifyError bug');
    const before = statuses.length;
    for (let i = 0; i < 8; i++) void limited('/held').catch(() => {});
    for (let t = 0; t < 3_000; t += 50) {
      let polls = 0;
      await until(() => ++polls >= 5, 'the sockets to settle');
      clock.advance(50);
    }
    const sent = statuses.length - before;
    answerHeld();
    expect(sent).toBe(7);
    expect(statuses.filter((s) => s === 403)).toEqual([]);
  });
});

describe("the interceptor's attempt loop: a retry whose classify throws", () => {
  it("counts the retry's call against the window: 5 left after it, 6 sent at once, 5 go and none is refused", async () => {
    const clock = new ManualClock();
    let left = 10;
    let retried = 0;
    const statuses: number[] = [];
    const held: (() => void)[] = [];
    const reset = Math.ceil((EPOCH_MS + 3_000_000) / 1000);
    const server = await serve({
      respond: (req, res) => {
        // `/retry`: a 429 first (not counted), then a 422 (counted).
        const throttle = req.url === '/retry' && retried++ === 0;
        const status = throttle ? 429 : left === 0 ? 403 : req.url === '/retry' ? 422 : 200;
        if (!throttle && left > 0) left--;
        statuses.push(status);
        const headers: OutgoingHttpHeaders = {
          date: new Date(EPOCH_MS + clock.now()).toUTCString(),
          'x-ratelimit-limit': '5000',
          'x-ratelimit-remaining': String(left),
          'x-ratelimit-reset': String(reset),
          'x-ratelimit-resource': 'core',
          ...(throttle ? { 'retry-after': '1' } : {}),
        };
        const end = () => res.writeHead(status, headers).end('x');
        if (req.url === '/held') held.push(end);
        else end();
        return true;
      },
    });
    const rl = limit({
      clock,
      // A `classify` with a bug on 422.
      classify: (status) => {
        if (status === 422) throw new Error('classify bug');
        return undefined;
      },
      default: { headers: 'github', maxPause: 3_600_000, maxWait: 3_600_000 },
    });
    const agent = agentWith(rl);
    // Answered before the agent closes (cleanups run newest first): a held answer keeps it open.
    cleanups.push(() => {
      for (const end of held.splice(0)) end();
    });
    for (let i = 0; i < 4; i++)
      expect((await stepping(clock, get(agent, `${server.origin}/`))).status).toBe(200);
    await expect(stepping(clock, get(agent, `${server.origin}/retry`))).rejects.toThrow('classify bug');
    expect(statuses).toEqual([200, 200, 200, 200, 429, 422]);
    for (let i = 0; i < 6; i++) void get(agent, `${server.origin}/held`).catch(() => {});
    for (let t = 0; t < 3_000; t += 50) {
      let polls = 0;
      await until(() => ++polls >= 5, 'the sockets to settle');
      clock.advance(50);
    }
    expect(statuses.length - 6).toBe(5);
    expect(statuses.filter((s) => s === 403)).toEqual([]);
  });
});

describe("the fetch wrapper over the undici package's fetch: a classify that throws", () => {
  it('counts the call against the window: 7 left, 8 sent at once, 7 go and none is refused', async () => {
    const clock = new ManualClock();
    const { server, statuses, answerHeld } = await github(clock);
    const limited = rateLimitedFetch({
      clock,
      fetch: undiciFetch as unknown as typeof fetch,
      classify: (status) => {
        if (status === 422) throw new Error('classify bug');
        return undefined;
      },
      default: { headers: 'github', maxPause: 3_600_000, maxWait: 3_600_000 },
    });
    cleanups.push(() => limited.close());
    for (let i = 0; i < 2; i++) {
      const res = await stepping(clock, limited(`${server.origin}/`));
      expect(res.status).toBe(200);
      await res.text();
    }
    await expect(stepping(clock, limited(`${server.origin}/bad`))).rejects.toThrow('classify bug');
    const before = statuses.length;
    for (let i = 0; i < 8; i++)
      void limited(`${server.origin}/held`)
        .then((r) => r.text())
        .catch(() => {});
    for (let t = 0; t < 3_000; t += 50) {
      let polls = 0;
      await until(() => ++polls >= 5, 'the sockets to settle');
      clock.advance(50);
    }
    const sent = statuses.length - before;
    answerHeld();
    expect(sent).toBe(7);
    expect(statuses.filter((s) => s === 403)).toEqual([]);
  });
});

describe('a server that moves this client to another named limit', () => {
  // Expected failure, kept for a decision: an answer that announces other policies and not this
  // one keeps it until its reset too, as GitHub's core is kept through its search's answers (one
  // origin, one resource a answer). Before, 4 such answers in a row dropped it: a client moved
  // from a "free" policy (500 left of 1,000 an hour, 30 minutes to its reset: 16.7 a minute) to a
  // "pro" one (99,000 left) went at pro's rate after 4 answers; now at free's 16.7 a minute for
  // the 30 minutes. Telling a tier change from GitHub's resources needs more than this reading.
  it.fails("stops capping at the old policy's rate once answers announce only the new one", () => {
    const { clock, limiter } = windowLimiter({ burst: 'second' });
    const policy = (name: string, limit: number) => (remaining: number) => [
      { policy: name, limit, windowMs: 3_600_000, remaining, resetMs: 1_800_000 },
    ];
    const free = policy('free', 1_000);
    const pro = policy('pro', 100_000);
    take(limiter).success(undefined, free(500));
    expect(limiter.snapshot().announcedRate).toBeCloseTo(16.7, 1);
    for (let i = 0; i < 10; i++) {
      clock.advance(4_000);
      take(limiter).success(undefined, pro(99_000 - i));
    }
    expect(limiter.snapshot().announcedRate).toBeGreaterThan(1_000);
  });
});

describe('a SharedBudget (memory store) behind the interceptor: a classify that throws', () => {
  it("counts the call against this process's window: 7 left, 8 sent at once, 7 go and none is refused", async () => {
    const clock = new ManualClock();
    const { server, statuses, answerHeld } = await github(clock);
    const budget = createSharedBudget({
      name: 'api',
      store: new MemoryBudgetStore({ clock }),
      clock,
      maxPause: 3_600_000,
      maxWait: 3_600_000,
    });
    cleanups.push(() => budget.close());
    const rl = limit({
      clock,
      classify: (status) => {
        if (status === 422) throw new Error('classify bug');
        return undefined;
      },
      limiters: { api: { origins: [server.origin], limiter: budget, headers: 'github' } },
    });
    const agent = agentWith(rl);
    for (let i = 0; i < 2; i++)
      expect((await stepping(clock, get(agent, `${server.origin}/`))).status).toBe(200);
    await expect(stepping(clock, get(agent, `${server.origin}/bad`))).rejects.toThrow('classify bug');
    const before = statuses.length;
    for (let i = 0; i < 8; i++) void get(agent, `${server.origin}/held`).catch(() => {});
    for (let t = 0; t < 3_000; t += 50) {
      let polls = 0;
      await until(() => ++polls >= 5, 'the sockets to settle');
      clock.advance(50);
    }
    const sent = statuses.length - before;
    answerHeld();
    expect(sent).toBe(7);
    expect(statuses.filter((s) => s === 403)).toEqual([]);
  });
});
