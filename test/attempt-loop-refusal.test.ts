import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { createSharedBudget, MemoryBudgetStore, type SharedBudget } from '../src/redis/index.js';
import type { HeartbeatReply, HeartbeatRequest } from '../src/redis/store.js';
import { wrap } from '../src/wrap/wrap.js';
import { advanceUntil, agentWith, get, limit, throttleThenHold } from './helpers/interceptor-fixtures.js';

// src/attempt-loop.ts: "When the attempts run out, or the limiter refuses a retry, the caller
// gets the last answer itself". A fail-closed shared budget refusing a queued retry (Redis gone
// while it waited) once replaced the server's 429 with SharedBudgetUnavailableError.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A memory store that can be taken down: its heartbeats throw, as an unreachable Redis does. */
class FlakyStore extends MemoryBudgetStore {
  down = false;
  override heartbeat(r: HeartbeatRequest): HeartbeatReply {
    if (this.down) throw new Error('ECONNREFUSED');
    return super.heartbeat(r);
  }
}

function failClosedBudget(store: MemoryBudgetStore, clock: ManualClock): SharedBudget {
  const budget = createSharedBudget({
    name: 'refusal',
    store,
    clock,
    initialUnitsPerMinute: 60,
    heartbeatInterval: 250,
    failClosed: true,
  });
  budgets.push(budget);
  return budget;
}

const budgets: SharedBudget[] = [];
afterEach(async () => {
  for (const b of budgets.splice(0)) await b.close();
});

describe('a retry a fail-closed shared budget refuses', () => {
  it("Redis going away while a throttled call's retry waits: the caller gets the SDK's 429 error, fn not run again", async () => {
    const clock = new ManualClock();
    const store = new FlakyStore({ clock });
    const budget = failClosedBudget(store, clock);
    await budget.ready();
    const sdkError = Object.assign(new Error('429 Too Many Requests'), { status: 429, retryAfterMs: 5_000 });
    let runs = 0;
    const call = wrap(budget, async () => {
      runs++;
      throw sdkError;
    });
    let settled: unknown = 'pending';
    call().then(
      () => (settled = 'resolved'),
      (e: unknown) => (settled = e),
    );
    for (let i = 0; i < 5 && runs === 0; i++) {
      await flush();
      clock.advance(100);
    }
    expect(runs).toBe(1);
    // The retry now waits for the 5 s pause; Redis goes away meanwhile.
    store.down = true;
    for (let i = 0; i < 200 && settled === 'pending'; i++) {
      await flush();
      clock.advance(250);
    }
    expect(runs).toBe(1);
    expect(settled).toBe(sdkError);
  });

  it('through the interceptor, Redis going away while the retry of a 429 waits: the caller gets the 429 response', async () => {
    const clock = new ManualClock();
    const store = new FlakyStore({ clock });
    const budget = failClosedBudget(store, clock);
    await budget.ready();
    const { server } = await throttleThenHold(1); // 429 with Retry-After: 30, then hold
    const rl = limit({ limiters: { api: { origins: [server.origin], limiter: budget } }, default: false });
    let settled: unknown = 'pending';
    get(agentWith(rl), `${server.origin}/a`).then(
      (r) => (settled = r),
      (e: unknown) => (settled = e),
    );
    await server.waitForRequests(1);
    store.down = true; // the retry waits for the 30 s pause
    await advanceUntil(clock, () => settled !== 'pending', 'the request to settle');
    expect(settled).toMatchObject({ status: 429, body: '429 #1' });
    expect(server.requests).toBe(1);
  });
});
