import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { AnnouncedQuota, Permit } from '../src/limiter/types.js';
import { MemoryBudgetStore, type SharedBudget, type SharedBudgetOptions } from '../src/redis/index.js';
import { acquiredWithin } from './helpers/acquired.js';
import { describeRedis, sharedMembers, withRedisServer } from './helpers/redis-server.js';

// Attacks on a shared tokens budget (units = tokens, calls of 500-2,000) after a quiet spell, and
// after a 429 from a window others drained. The single process (rate-book.ts, `RateBook.cut`) was
// fixed for both; the budget's own cut (budget-controller.ts) has its own rule for leaving
// "unlimited" without an accepted rate. Members on a ManualClock: the memory store (every
// heartbeat at its instant) and a real redis-server (heartbeats when the test asks: `refresh`).
//
// Two bugs this attack found, each test failing before its fix:
// - QUIET-MEASURED: leaving "unlimited" with nothing accepted in the 3 s window, the whole cut
//   starts from the members' reported measured rate, which after a quiet hour is the average over
//   that hour (500 tokens / 60 min = 8 tokens/min): the budget goes to 4 tokens/min, the next
//   calls are refused at maxWait. The single-process rule (at least the throttled call over the
//   window after few answers) is applied only when no member reports any measured rate.
// - IDLE-DEMAND: a member that sent nothing for an hour keeps reporting its last measured send
//   rate as its demand (MeasuredRate only moves when a response is recorded), so it keeps ~95 %
//   of a budget at its maximum and the only member sending is refused.

const HOUR = 3_600_000;
const CALL = 500;

type Where = { store: MemoryBudgetStore } | { redis: string };

const { member: budget } = sharedMembers('quiet', { heartbeatInterval: 1_000 }, [
  'degraded',
  'recovered',
  'repaired',
]);

function member(clock: ManualClock, where: Where, options: Partial<SharedBudgetOptions> = {}): SharedBudget {
  return budget({ clock, ...where, ...options });
}

/** Acquires `units` of `b` within 70 s of the clock: the permit, or `undefined` when refused. */
function take(b: SharedBudget, clock: ManualClock, units: number): Promise<Permit | undefined> {
  return acquiredWithin(() => b.acquire(units), clock);
}

/** `calls` calls of `units` by `b`, 10 s apart, each answered a success (with `quota(i)`): how many were refused. */
async function refusedOf(
  b: SharedBudget,
  clock: ManualClock,
  calls: number,
  units = CALL,
  quota?: (i: number) => AnnouncedQuota[],
): Promise<number> {
  let refused = 0;
  for (let i = 0; i < calls; i++) {
    const permit = await take(b, clock, units);
    if (permit === undefined) refused++;
    else {
      clock.advance(200);
      permit.success(undefined, quota?.(i));
    }
    clock.advance(9_800);
  }
  return refused;
}

/** Two members of a budget in memory, neither with an initial rate (unlimited until a 429). */
function pair(options: Partial<SharedBudgetOptions> = {}) {
  const clock = new ManualClock();
  const store = new MemoryBudgetStore({ clock });
  const a = member(clock, { store }, options);
  const b = member(clock, { store }, options);
  return { clock, store, a, b };
}

/**
 * Each member sends `warm` calls of 500 tokens (100 ms apart, answered), then an hour passes with
 * nothing sent (heartbeats go on), then one call of `a` is throttled with `retryAfterMs`.
 */
async function quietThen429(warm: number, retryAfterMs: number, options: Partial<SharedBudgetOptions> = {}) {
  const p = pair(options);
  const { clock, a, b } = p;
  for (let i = 0; i < warm; i++) {
    for (const m of [a, b]) {
      const permit = await take(m, clock, CALL);
      clock.advance(100);
      permit?.success();
    }
  }
  clock.advance(HOUR);
  const permit = await take(a, clock, CALL);
  clock.advance(200);
  permit?.throttled(retryAfterMs);
  await a.flush();
  // A Retry-After of 20 s (3 heartbeats and more) makes the budget's first cut wait for every
  // member's fresh report (coordinator.ts, FIRST_CUT_WAIT): past it, the cut is made.
  clock.advance(Math.min(retryAfterMs, 21_000));
  await a.flush();
  return p;
}

/** The tokens policy of an hourly window of 1,000,000 tokens. */
const hourly = (remaining: number, resetMs: number): AnnouncedQuota[] => [
  { limit: 1_000_000, windowMs: HOUR, remaining, resetMs },
];

describe('a shared tokens budget after a quiet hour (memory store)', () => {
  it.each([
    { warm: 0, retry: 1_000 },
    { warm: 1, retry: 1_000 },
    { warm: 5, retry: 1_000 },
    { warm: 0, retry: 20_000 },
    { warm: 5, retry: 20_000 },
  ])(
    'a first 429 (warm-up $warm calls each, Retry-After $retry ms): cut from what was sent, not the minimum; the next call is served',
    async ({ warm, retry }) => {
      const { clock, store, a } = await quietThen429(warm, retry);
      // 500-token calls: thousands of tokens a minute, not the 1 of the minimum.
      expect(store.rate).toBeGreaterThan(1_000);
      expect(await refusedOf(a, clock, 3)).toBe(0);
    },
  );

  // QUIET-MEASURED (budget-controller.ts `cut`, the unlimited branch): with Retry-After 20 s the
  // first cut waits for fresh reports; a's report then carries its measured rate, which the
  // throttled response closed over the quiet hour: 500 tokens / 60 min = 8.3 tokens/min. With
  // nothing accepted in the window the cut starts from that sum: 8.3 -> 4.2 tokens/min.
  it('QUIET-MEASURED: one call each, a quiet hour, a 429 with Retry-After 20 s: the budget is not cut to 4 tokens/min', async () => {
    const { clock, store, a } = await quietThen429(1, 20_000);
    expect(store.rate).toBeGreaterThan(1_000); // before the fix: 4.17
    expect(await refusedOf(a, clock, 3)).toBe(0);
  });

  /**
   * a: one call, an hour with nothing sent, one more call (its success closes the measured
   * rate's bucket over the hour: 8.3 tokens/min, reported by the next heartbeats), then 10 s
   * later (the accepted window empty) a call throttled with Retry-After 1 s.
   */
  async function successAfterQuietThen429(controller: 'probe' | 'aimd' | 'cubic') {
    const p = pair({ controller });
    const { clock, a } = p;
    (await take(a, clock, CALL))?.success();
    clock.advance(HOUR);
    (await take(a, clock, CALL))?.success();
    clock.advance(10_000);
    const permit = await take(a, clock, CALL);
    clock.advance(200);
    permit?.throttled(1_000);
    await a.flush();
    return p;
  }

  // QUIET-MEASURED without the first-cut wait: the cut at the throttle reads the measured sum of
  // the last heartbeat (8.3 tokens/min), though the local book's own base (the single-process
  // rule: the 500-token call over 3 s, 10,000/min) is at hand (`localBase`) and ignored.
  it.each(['probe', 'aimd', 'cubic'] as const)(
    'QUIET-MEASURED (%s): a success after a quiet hour, then a 429 10 s later: the budget is not cut to 4-6 tokens/min',
    async (controller) => {
      const { store } = await successAfterQuietThen429(controller);
      expect(store.rate).toBeGreaterThan(1_000); // before the fix: 4.17 (probe), 5.83 (aimd, cubic)
    },
  );

  it('after that cut the budget recovers: refusals count as waits, and the heartbeat proposes the rise', async () => {
    // Unlike the single process before its fix (no success, no rise), the budget's controller is
    // asked at each heartbeat with `waited` set by the refused acquire: the probe climbs back
    // within two calls. (AIMD with 5,000-token calls took 21 refusals, some 4 minutes.)
    const { clock, store, a } = await successAfterQuietThen429('probe');
    expect(await refusedOf(a, clock, 30)).toBeLessThanOrEqual(2);
    expect(store.rate).toBeGreaterThan(3_000); // what a sends: 500 tokens every 10 s
  });

  // IDLE-DEMAND (coordinator.ts `#sendHeartbeat`: demand = snapshot().measuredRate): b sent
  // 13,333 tokens/min an hour ago and nothing since; its report still says 13,333, so the
  // demand-weighted share gives b 19,302 of 20,000 and a (nothing measured: demand 0) 698. a's
  // 2,000-token calls wait 2.9 min: refused at maxWait, never queued (no backlog to report).
  it('IDLE-DEMAND: a member idle for an hour does not keep 95 % of the budget; the one member sending is served', async () => {
    const { clock, a, b } = pair({ initialUnitsPerMinute: 20_000, maxUnitsPerMinute: 20_000 });
    for (let i = 0; i < 40; i++) {
      const permit = await take(b, clock, CALL);
      clock.advance(100);
      permit?.success();
      clock.advance(1_400);
    }
    clock.advance(HOUR);
    // b is idle; a alone sends: its part is at least half of the budget.
    expect(a.state.share).toBeGreaterThanOrEqual(10_000); // before the fix: 698
    expect(await refusedOf(a, clock, 5, 2_000)).toBe(0); // before the fix: 4 of 5
  });
});

describe('a shared tokens budget cut while others drained the window (memory store)', () => {
  it('unlimited until a 429 next to an answer of 1,000 tokens left for 40 min: after the reset every call is served', async () => {
    // As attack-rate-pathologies.test.ts for one process: 500-token calls 10 s apart, two in
    // flight, the first answered "1,000 left, reset in 40 min", the second a 429 (Retry-After 1 s).
    const { clock, store, a } = pair();
    await refusedOf(a, clock, 10, CALL, (i) => hourly(900_000 - 500 * i, HOUR - clock.now()));
    const first = await take(a, clock, CALL);
    const second = await take(a, clock, CALL);
    clock.advance(200);
    first?.success(undefined, hourly(1_000, 2_400_000));
    second?.throttled(1_000);
    await a.flush();
    // From what got through (the budget's accepted sum), not 1,000 tokens over 40 min (25/min).
    expect(store.rate).toBeGreaterThan(1_000);
    clock.advance(2_400_000);
    expect(await refusedOf(a, clock, 60, CALL, (i) => hourly(990_000 - 500 * i, HOUR - 10_000 * i))).toBe(0);
  });

  it('with a rate, a 429 announcing 1,000 tokens left for 40 min: the cut is the controller’s, and after the reset both members are served', async () => {
    const { clock, store, a, b } = pair({ initialUnitsPerMinute: 20_000 });
    for (let i = 0; i < 10; i++) {
      for (const m of [a, b]) {
        const permit = await take(m, clock, CALL);
        clock.advance(200);
        permit?.success(undefined, hourly(900_000 - 500 * i, HOUR - clock.now()));
      }
      clock.advance(9_600);
    }
    const throttled = await take(a, clock, 2_000);
    clock.advance(200);
    throttled?.throttled(undefined, hourly(1_000, 2_400_000));
    await a.flush();
    expect(store.rate).toBeGreaterThanOrEqual(10_000); // the probe's cut of 20,000, not 25/min
    clock.advance(2_400_000);
    let refused = 0;
    for (let i = 0; i < 30; i++) {
      for (const m of [a, b]) {
        const permit = await take(m, clock, CALL);
        if (permit === undefined) refused++;
        else {
          clock.advance(200);
          permit.success(undefined, hourly(990_000 - 500 * i, HOUR - 10_000 * i));
        }
      }
      clock.advance(9_600);
    }
    expect(refused).toBe(0);
    expect(store.rate).toBeGreaterThanOrEqual(10_000);
  });
});

describeRedis('a shared tokens budget after a quiet hour (redis-server)', () => {
  let url = '';
  withRedisServer(({ server }) => {
    url = server.url;
  });

  /** Two members on Redis, heartbeats only when the test asks (`refresh`). */
  async function redisPair(options: Partial<SharedBudgetOptions> = {}) {
    const clock = new ManualClock();
    const a = member(clock, { redis: url }, { heartbeatInterval: 60_000, ...options });
    const b = member(clock, { redis: url }, { heartbeatInterval: 60_000, ...options });
    for (const m of [a, b]) await m.refresh();
    return { clock, a, b };
  }

  it('warm members, a quiet hour, a 429: the budget is cut from what they sent', async () => {
    const { clock, a, b } = await redisPair();
    for (let i = 0; i < 5; i++) {
      for (const m of [a, b]) {
        const permit = await take(m, clock, CALL);
        clock.advance(100);
        permit?.success();
      }
    }
    for (const m of [a, b]) await m.refresh();
    clock.advance(HOUR);
    for (const m of [a, b]) await m.refresh();
    const permit = await take(a, clock, CALL);
    clock.advance(200);
    permit?.throttled(1_000);
    await a.flush();
    expect(a.state.rate).toBeGreaterThan(1_000);
    await b.refresh();
    expect(b.state.rate).toBeCloseTo(a.state.rate ?? 0);
  });

  // QUIET-MEASURED on Redis: the same cut, computed by the member from the sums the heartbeat
  // script answered (the Lua store keeps what the member computed).
  it('QUIET-MEASURED: a success after a quiet hour, then a 429 10 s later (redis): the budget is not cut to 4 tokens/min', async () => {
    const { clock, a, b } = await redisPair();
    (await take(a, clock, CALL))?.success();
    clock.advance(HOUR);
    (await take(a, clock, CALL))?.success();
    for (const m of [a, b]) await m.refresh(); // a reports its measured rate: 8.3 tokens/min
    clock.advance(10_000);
    const permit = await take(a, clock, CALL);
    clock.advance(200);
    permit?.throttled(1_000);
    await a.flush();
    expect(a.state.rate).toBeGreaterThan(1_000); // before the fix: 4.17
  });
});
