import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateLimitRejectedError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import type { Permit } from '../src/limiter/types.js';
import { wrap } from '../src/wrap/wrap.js';
import { drive } from './helpers/drive.js';
import { agentWith, cleanups, firstAnswers, get, limit, serve } from './helpers/interceptor-fixtures.js';
import { until } from './helpers/rate-limited-server.js';
import { settled } from './helpers/settled.js';

// Attacks on the cold start's crowd wait (src/limiter/crowd-wait.ts): the random wait after a
// 429 that says nothing, while the limiter has not learned a rate. Times on a ManualClock; the
// HTTP tests run real node:http servers and undici Agents, and never assert a duration.

/** Lets resolved promises run; no time passes. */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A fresh limiter (no initial rate) on a manual clock, drawing the middle of each window. */
function fresh(options: { maxWait?: number; maxPause?: number } = {}) {
  const clock = new ManualClock();
  const limiter = new AdaptiveRateLimiter({ clock, random: () => 0.5, ...options });
  return { clock, limiter };
}

function take(limiter: AdaptiveRateLimiter): Permit {
  const permit = limiter.tryAcquire();
  if (permit === undefined) throw new Error('no permit');
  return permit;
}

/** Advances `clock` a second at a time (letting promises run) until `state.done`, at most `limit` s. */
async function stepUntil(clock: ManualClock, state: { done: boolean }, limit = 200): Promise<void> {
  for (let i = 0; i < limit && !state.done; i++) {
    clock.advance(1_000);
    await flush();
  }
}

describe('the crowd wait and the requests sent before it', () => {
  // Regression: the row was told "sent before the wait" only by "answered while the pause runs". A
  // 429 of a request sent with the first one, answered just after the wait (a slow server), was read
  // as a second bare 429 in a row: the window grew and the limiter paused again past its end.
  it('does not count a bare 429 answered after the wait, for a request sent before it, as another in a row', () => {
    const { clock, limiter } = fresh();
    const first = take(limiter);
    const slow = take(limiter); // sent with the first, at 0
    first.throttled();
    // No success: a window of 60 s, the wait in its middle.
    expect(limiter.snapshot().pausedUntil).toBe(30_500);
    clock.advance(31_000);
    // Its request went out at 0, before the wait: it says nothing of the bucket since.
    slow.throttled();
    expect(limiter.snapshot().pausedUntil).toBeUndefined();
  });

  // Regression: likewise a success answered after the wait, for a request sent before it, ended
  // the row.
  it('keeps the row through a success answered after the wait for a request sent before it', () => {
    const { clock, limiter } = fresh();
    const first = take(limiter);
    const long = take(limiter); // a long call, sent with the first, at 0
    first.throttled();
    expect(limiter.snapshot().pausedUntil).toBe(30_500);
    clock.advance(31_000);
    long.success(); // answered 0.5 s after the wait, sent before it
    // The retry of the first request, sent after the wait, meets the empty bucket again: the
    // second bare 429 in a row, past the first window (60 s), in the middle of the next 12 s (as
    // when the long call's success comes during the wait: test/crowd-wait.test.ts). The row
    // ended instead: a wait within the first window, to 54.2 s.
    take(limiter).throttled();
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(60_000 + 6_000, 6);
  });

  it('counts a success sent after the wait as the end of the row (a served wait)', () => {
    const { clock, limiter } = fresh();
    for (let i = 0; i < 4; i++) take(limiter).success();
    take(limiter).throttled();
    clock.advance(26_500);
    take(limiter).success(); // sent after the wait: the bucket refilled
    clock.advance(100);
    take(limiter).throttled();
    // As test/crowd-wait.test.ts: late in a window of 0.55 of 50 s, not past the first window.
    expect(limiter.snapshot().pausedUntil).toBeCloseTo(26_600 + 16_500 + 0.5 * (27_500 - 16_500), 6);
  });
});

describe('a maxPause shorter than the crowd wait', () => {
  // Regression: the wait was drawn over the whole window (a minute) and then cut to maxPause, so
  // every process of a crowd drawing past it paused exactly maxPause and came back together.
  it('draws the wait within maxPause: processes drawing apart come back apart', () => {
    const pauses = [0.2, 0.8].map((draw) => {
      const limiter = new AdaptiveRateLimiter({
        clock: new ManualClock(),
        random: () => draw,
        maxPause: 10_000,
      });
      take(limiter).throttled();
      return limiter.snapshot().pausedUntil;
    });
    expect(pauses[0]).toBeLessThan(pauses[1] ?? 0);
    expect(pauses[1]).toBeLessThanOrEqual(10_000);
  });
});

describe('options given at run time', () => {
  // Regression: a limiter given a first rate by `update` still waited the crowd wait, up to a
  // minute, after a bare 429: the docs say a limiter with an `initialUnitsPerMinute` never waits so.
  it('does not crowd-wait once update() gave the cold limiter an initialUnitsPerMinute', () => {
    const { limiter } = fresh();
    limiter.update({ initialUnitsPerMinute: 600 });
    take(limiter).throttled();
    expect(limiter.snapshot().pausedUntil).toBeUndefined();
  });
});

describe('the crowd wait through the adapters (held)', () => {
  it('is ended for one caller by its abort, with its reason, and the other caller is served after it', async () => {
    const clock = new ManualClock();
    const server = await serve({ capacity: 5, respond: firstAnswers(1, 429) });
    const rl = limit({ clock, default: { random: () => 0.5 } });
    const agent = agentWith(rl);
    const controller = new AbortController();
    const mine = settled(get(agent, `${server.origin}/a`, { signal: controller.signal }));
    await server.waitForRequests(1);
    const limiter = () => rl.registry.get(server.origin)?.snapshot();
    await until(() => limiter()?.queued === 1, 'the retry to wait out the crowd wait');
    expect(limiter()?.pausedUntil).toBe(30_500);
    const other = settled(get(agent, `${server.origin}/b`));
    await until(() => limiter()?.queued === 2, 'the other caller to queue');
    const reason = new Error('caller went away');
    controller.abort(reason);
    await until(() => mine.done, 'the abort');
    expect(mine.error).toBe(reason);
    expect(limiter()?.queued).toBe(1);
    const answer = await drive(
      clock,
      until(() => other.done, 'the other caller').then(() => other),
      1_000,
    );
    expect(answer.value?.status).toBe(200);
    expect(server.requests).toBe(2); // the aborted retry never went
  });

  it('settles everyone at close(): the retrying caller gets its held 429, a queued caller a closed refusal', async () => {
    const clock = new ManualClock();
    const server = await serve({ capacity: 5, respond: firstAnswers(1, 429) });
    const rl = limit({ clock, default: { random: () => 0.5 } });
    const agent = agentWith(rl);
    const retrying = settled(get(agent, `${server.origin}/a`));
    const limiter = () => rl.registry.get(server.origin)?.snapshot();
    await until(() => limiter()?.queued === 1, 'the retry to wait');
    const queued = settled(get(agent, `${server.origin}/b`));
    await until(() => limiter()?.queued === 2, 'the second caller');
    rl.close();
    await until(() => retrying.done && queued.done, 'both to settle');
    expect(retrying.value?.status).toBe(429);
    expect(retrying.value?.body).toBe('scripted 429');
    expect((queued.error as RateLimitRejectedError).reason).toBe('closed');
  });

  it('takes a 429 with Retry-After: 0 for a told wait, not a bare one (no crowd wait)', async () => {
    const clock = new ManualClock();
    const server = await serve({ capacity: 5, respond: firstAnswers(1, 429, { 'retry-after': '0' }) });
    const rl = limit({ clock, default: { random: () => 0.5 } });
    const answer = await drive(clock, get(agentWith(rl), `${server.origin}/a`), 1_000);
    expect(answer.status).toBe(200);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBeUndefined();
  });

  it('after 30 successes, answers a bare 429 with no pause (a learned rate)', async () => {
    const clock = new ManualClock();
    let n = 0;
    const server = await serve({
      respond: (_req, res) => {
        if (++n !== 31) return false;
        res.writeHead(429).end('bare');
        return true;
      },
      capacity: 1_000,
    });
    const rl = limit({ clock, maxAttempts: 1, default: { random: () => 0.5 } });
    const agent = agentWith(rl);
    for (let i = 0; i < 30; i++) expect((await get(agent, `${server.origin}/${i}`)).status).toBe(200);
    expect((await get(agent, `${server.origin}/bare`)).status).toBe(429);
    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBeUndefined();
  });

  it('pauses every origin of a shared limiter for one bare 429, and serves both after it', async () => {
    const clock = new ManualClock();
    const a = await serve({ capacity: 5, respond: firstAnswers(1, 429) });
    const b = await serve({ capacity: 5 });
    const rl = limit({ clock, limiters: { api: { origins: [a.origin, b.origin], random: () => 0.5 } } });
    const agent = agentWith(rl);
    const fromA = settled(get(agent, `${a.origin}/a`));
    const snapshot = () => rl.registry.get('api')?.snapshot();
    await until(() => snapshot()?.queued === 1, 'the retry of a to wait');
    expect(snapshot()?.pausedUntil).toBe(30_500);
    const fromB = settled(get(agent, `${b.origin}/b`));
    await until(() => snapshot()?.queued === 2, 'b to wait in the same line');
    expect(b.requests).toBe(0);
    await drive(
      clock,
      until(() => fromA.done && fromB.done, 'both'),
      1_000,
    );
    expect([fromA.value?.status, fromB.value?.status]).toEqual([200, 200]);
  });

  it("replays a fetch's one-shot stream body after the crowd wait, byte for byte", async () => {
    const clock = new ManualClock();
    const server = await serve({ capacity: 5, respond: firstAnswers(1, 429) });
    const limited = rateLimitedFetch({ clock, default: { random: () => 0.5 } });
    cleanups.push(() => limited.close());
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('part one, '));
        controller.enqueue(new TextEncoder().encode('part two'));
        controller.close();
      },
    });
    const response = await drive(
      clock,
      limited(`${server.origin}/post`, { method: 'POST', body, duplex: 'half' } as RequestInit),
      1_000,
    );
    expect(response.status).toBe(200);
    expect(server.received.map((r) => [r.status, r.body])).toEqual([
      [429, 'part one, part two'],
      [200, 'part one, part two'],
    ]);
  });

  it("ends with the 429 at once, never a hang, when maxWait leaves no room for the retry's turn", async () => {
    const clock = new ManualClock();
    const server = await serve({ capacity: 5, respond: firstAnswers(1, 429) });
    const rl = limit({ clock, default: { random: () => 0.5, maxWait: 0 } });
    const answer = await get(agentWith(rl), `${server.origin}/a`);
    expect(answer.status).toBe(429);
    expect(server.requests).toBe(1);
  });
});

describe('wrap and a bare SDK 429 (held)', () => {
  const sdk429 = () => Object.assign(new Error('429 Too Many Requests'), { status: 429 });

  it("retries a call whose SDK error is a 429 with no headers after the crowd wait, and ends with the SDK's error when the row outgrows maxWait", async () => {
    const { clock, limiter } = fresh();
    let calls = 0;
    const call = wrap(limiter, async () => {
      calls++;
      throw sdk429();
    });
    const result = settled(call());
    await flush();
    expect(limiter.snapshot().pausedUntil).toBe(30_500);
    await stepUntil(clock, result);
    // The second bare 429 in a row waits past the first window (60 s): with the first wait,
    // more than the call's one maxWait. The retry is refused: the caller gets the SDK's error.
    expect(result.error).toMatchObject({ status: 429 });
    expect(calls).toBe(2);
  });

  it('ends a wrapped call waiting out the crowd wait at its abort, and the next call still goes', async () => {
    const { clock, limiter } = fresh();
    const controller = new AbortController();
    let calls = 0;
    const call = wrap(
      limiter,
      async () => {
        calls++;
        if (calls === 1) throw sdk429();
        return 'ok';
      },
      { signal: controller.signal },
    );
    const first = settled(call());
    await flush();
    expect(limiter.snapshot()).toMatchObject({ pausedUntil: 30_500, queued: 1 });
    const reason = new Error('stop');
    controller.abort(reason);
    await flush();
    expect(first.error).toBe(reason);
    expect(limiter.snapshot().queued).toBe(0);
    const plain = settled(wrap(limiter, async () => 'plain')());
    await stepUntil(clock, plain);
    expect(plain.value).toBe('plain');
  });
});
