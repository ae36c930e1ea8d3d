import { getEventListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RedisClient } from '../src/redis/client.js';
import { createSharedBudget, MemoryBudgetStore, type SharedBudget } from '../src/redis/index.js';
import { RedisBudgetStore } from '../src/redis/redis-store.js';
import {
  type BudgetStore,
  type ControllerBooks,
  type CutReply,
  type CutRequest,
  demandWeightedShare,
  type HeartbeatReply,
  type HeartbeatRequest,
  type PauseRequest,
} from '../src/redis/store.js';
import { describeRedis, withRedisServer } from './helpers/redis-server.js';
import { heartbeatRequest, sharedMembers } from './helpers/shared-members.js';

const HOUR = 3_600_000;

/** Members of the SharedBudget tests on a manual clock, closed after each test. */
const { member, members } = sharedMembers(
  'memory',
  {
    initialUnitsPerMinute: 600,
    controller: 'aimd', // the cut mechanics, with AIMD's 0.7
    decreaseCooldown: 0,
    heartbeatInterval: 250,
    burst: 'second', // these tests send without moving the manual clock
  },
  [],
);

function beat(id: string, demand: number, more: Partial<HeartbeatRequest> = {}): HeartbeatRequest {
  return heartbeatRequest(id, { demand, memberTimeout: HOUR, ...more });
}

type From = CutRequest['from'];

/**
 * A cut of request sent in `sentEpoch`, computed from `from` (the generation and version of the
 * books it was computed from), to `rate` from `rateBefore`.
 */
function cut(sentEpoch: number, from: From, more: Partial<CutRequest> = {}): CutRequest {
  return {
    sentEpoch,
    from,
    rate: 420,
    rateBefore: 600,
    measured: undefined,
    record: { rateBefore: 600, acceptedRate: 600, acceptedRateSincePrevious: undefined },
    random: 0.25,
    cooldown: 0,
    minRate: 1,
    maxRate: undefined,
    ttl: HOUR,
    ...more,
  };
}

describe('demandWeightedShare', () => {
  it.each([
    // rate, own, demands, floorFraction, expected share
    [600, 0, [0, 0, 0], 0.05, 200],
    [600, 0, [0, 0], 0, 300],
    [600, 5_000, [5_000, 0], 0.05, (600 * (600 + 15)) / (600 + 15 + 15)],
    [1_000, 100, [100, 900], 0, 100],
  ])('shares a rate of %d with demand %d among %j (floor %d)', (rate, own, demands, floor, expected) => {
    expect(demandWeightedShare(rate, own, demands, floor, demands.length)).toBeCloseTo(expected, 9);
  });

  it('counts a live member without a report as one with no demand: the shares never add up above the rate', () => {
    expect(demandWeightedShare(600, 0, [0, 0], 0.05, 3)).toBeCloseTo(200, 9);
    const busy = demandWeightedShare(600, 5_000, [5_000], 0.05, 3);
    expect(busy).toBeCloseTo((600 * 610) / 630, 9);
  });
});

describe('MemoryBudgetStore', () => {
  it('drops a member silent for longer than the timeout, on the next heartbeat', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    store.heartbeat(beat('a', 0, { memberTimeout: 1_000 }));
    clock.advance(600);
    expect(store.heartbeat(beat('b', 0, { memberTimeout: 1_000 })).members).toBe(2);
    clock.advance(400);
    expect(store.heartbeat(beat('b', 0, { memberTimeout: 1_000 })).members).toBe(1);
  });

  it('cuts once per epoch, not within the cooldown, and only from the current books', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    const first = at(store.heartbeat(beat('a', 0)));
    const done = store.cut(cut(0, first, { cooldown: 1_000 }));
    expect(done).toMatchObject({ cut: true, stale: false, rate: 420, epoch: 1 });
    expect(done.books).toMatchObject({ version: 1, rateBeforeLastDecrease: 600, sinceLastDecrease: 0 });
    expect(store.cut(cut(0, at(done), { cooldown: 1_000 }))).toMatchObject({ cut: false, stale: false });
    clock.advance(999);
    expect(store.cut(cut(1, at(done), { cooldown: 1_000 })).cut).toBe(false);
    clock.advance(1);
    // Computed from the books before the first cut: stale, answered with the current ones.
    const stale = store.cut(cut(1, first, { cooldown: 1_000, rate: 294 }));
    expect(stale).toMatchObject({ cut: false, stale: true, rate: 420, books: { version: 1 } });
    const again = store.cut(cut(1, at(stale), { cooldown: 1_000, rate: 294, rateBefore: 420 }));
    expect(again).toMatchObject({ cut: true, rate: 294, epoch: 2 });
    expect(store.cuts).toBe(2);
  });

  it('sets a proposal only on the books it was computed from, and sums the reports', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    const one = store.heartbeat(beat('a', 0, { accepted: 100, measured: 120 }));
    const two = store.heartbeat(beat('b', 0, { accepted: 200, measured: 250, waited: true }));
    expect(two).toMatchObject({ accepted: 300, measured: 370, members: 2, books: { waited: true } });
    expect([one.index, two.index]).toEqual([0, 1]);
    clock.advance(10_000);
    const raised = store.heartbeat(beat('a', 0, { proposal: { ...at(two), rate: 720 } }));
    expect(raised).toMatchObject({ rate: 720, proposed: true, books: { version: 1, waited: false } });
    expect(raised.books.sinceLastIncrease).toBe(0);
    expect(raised.books.sinceLastDecrease).toBe(10_000);
    // b computed the same step from the same books: not applied twice.
    const late = store.heartbeat(beat('b', 0, { proposal: { ...at(two), rate: 720 } }));
    expect(late).toMatchObject({ rate: 720, proposed: false, books: { version: 1 } });
    const capped = store.heartbeat(beat('b', 0, { proposal: { ...at(late), rate: 5_000 }, maxRate: 1_000 }));
    expect(capped).toMatchObject({ rate: 1_000, proposed: true });
  });

  it('keeps the last 8 cuts, the draw, and the units accepted since the last cut', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    let last = at(store.heartbeat(beat('a', 0, { acceptedUnits: 40 })));
    expect(store.heartbeat(beat('b', 0, { acceptedUnits: 2 })).books).toMatchObject({
      decreases: [],
      random: undefined,
      acceptedSinceLastDecrease: 42,
    });
    for (let i = 0; i < 10; i++) {
      const record = { rateBefore: 600 - i, acceptedRate: 500 + i, acceptedRateSincePrevious: i };
      const done = store.cut(cut(i, last, { record, random: i / 10 }));
      expect(done.cut).toBe(true);
      last = at(done);
    }
    const reply = store.heartbeat(beat('a', 0, { acceptedUnits: 5 }));
    expect(reply.books.decreases.map((d) => d.acceptedRateSincePrevious)).toEqual([2, 3, 4, 5, 6, 7, 8, 9]);
    expect(reply.books.decreases.at(-1)).toEqual({
      rateBefore: 591,
      acceptedRate: 509,
      acceptedRateSincePrevious: 9,
    });
    expect(reply.books).toMatchObject({ random: 0.9, acceptedSinceLastDecrease: 5 });
  });

  it('counts the shared pause since the last cut, and the increase clock from its end', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    store.heartbeat(beat('a', 0));
    clock.advance(1_000);
    store.pause({ ms: 2_000, ttl: HOUR });
    clock.advance(1_000);
    expect(store.heartbeat(beat('a', 0)).books).toMatchObject({
      sinceLastDecrease: 2_000,
      pauseSinceLastDecrease: 1_000,
      sinceLastIncrease: 0,
    });
    clock.advance(3_000);
    const after = store.heartbeat(beat('a', 0));
    expect(after.books).toMatchObject({ pauseSinceLastDecrease: 2_000, sinceLastIncrease: 2_000 });
    store.pause({ ms: 500, ttl: HOUR });
    clock.advance(1_000);
    const done = store.cut(cut(0, at(after)));
    expect(done.books).toMatchObject({ pauseSinceLastDecrease: 0, sinceLastDecrease: 0 });
  });

  it('keeps the later end of two pauses, and forgets everything after its ttl', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    store.cut(cut(0, at(store.heartbeat(beat('a', 0, { ttl: 10_000 })))));
    expect(store.pause({ ms: 5_000, ttl: 10_000 })).toBe(5_000);
    expect(store.pause({ ms: 1_000, ttl: 10_000 })).toBe(5_000);
    clock.advance(2_000);
    expect(store.heartbeat(beat('a', 0, { ttl: 10_000 })).pauseRemaining).toBe(3_000);
    clock.advance(10_000);
    expect(store.rate).toBeUndefined();
    expect(store.heartbeat(beat('a', 0, { ttl: 10_000 }))).toMatchObject({ rate: 600, epoch: 0, members: 1 });
  });

  it('starts a new generation when its state is lost, and counts a request of another one as sent at its start', () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    const beat0 = store.heartbeat(beat('a', 0, { ttl: 10_000 }));
    const first = beat0.generation;
    expect(first).toEqual(expect.any(String));
    const one = store.cut(cut(0, at(beat0), { generation: first, ttl: 10_000 }));
    expect(one).toMatchObject({ cut: true, epoch: 1 });
    const two = store.cut(cut(1, at(one), { generation: first, ttl: 10_000 }));
    expect(two).toMatchObject({ cut: true, epoch: 2 });
    expect(store.heartbeat(beat('a', 0, { ttl: 10_000 })).generation).toBe(first);

    clock.advance(10_000); // the state expires: epoch 0 again, in a new generation
    const reset = store.heartbeat(beat('a', 0, { ttl: 10_000 }));
    expect(reset).toMatchObject({ rate: 600, epoch: 0, books: { version: 0 } });
    expect(reset.generation).not.toBe(first);
    // A cut computed from the lost books is stale, even at the same version.
    expect(store.cut(cut(2, { generation: first, version: 0 }, { generation: first }))).toMatchObject({
      cut: false,
      stale: true,
    });
    // A throttle of a request sent in the lost generation (at its epoch 2) cuts the new one once.
    expect(store.cut(cut(2, at(reset), { generation: first }))).toMatchObject({
      cut: true,
      stale: false,
      rate: 420,
      epoch: 1,
      generation: reset.generation,
    });
    const now = at(store.heartbeat(beat('a', 0, { ttl: 10_000 })));
    expect(store.cut(cut(2, now, { generation: first })).cut).toBe(false);
    expect(store.cut(cut(1, now, { generation: reset.generation })).cut).toBe(true);
    expect(store.cuts).toBe(2);

    // Lost again, and made again by a pause, with no rate: a cut computed from the lost books has
    // nothing to be stale against; it sets the rate (stale, the 429 cut nothing shared).
    clock.advance(HOUR); // the cuts above kept it an hour
    store.pause({ ms: 1_000, ttl: 10_000 });
    expect(store.cut(cut(2, now, { generation: reset.generation, ttl: 10_000 }))).toMatchObject({
      cut: true,
      stale: false,
      rate: 420,
      epoch: 1,
    });
  });
});

/** Where a cut or a proposal computed from `reply`'s books comes from. */
function at(reply: HeartbeatReply | CutReply): { generation: string; version: number } {
  return { generation: reply.generation, version: reply.books.version };
}

/** A store whose state can be lost at once, as a Redis restart or a FLUSHDB loses it. */
class LosableStore implements BudgetStore {
  readonly roundTrips = 0;
  inner: MemoryBudgetStore;

  constructor(readonly clock: ManualClock) {
    this.inner = new MemoryBudgetStore({ clock });
  }

  lose(): void {
    this.inner = new MemoryBudgetStore({ clock: this.clock });
  }

  heartbeat(r: HeartbeatRequest) {
    return this.inner.heartbeat(r);
  }
  cut(r: CutRequest) {
    return this.inner.cut(r);
  }
  pause(r: PauseRequest) {
    return this.inner.pause(r);
  }
  leave(id: string) {
    return this.inner.leave(id);
  }
}

describe('SharedBudget after its shared state is lost', () => {
  const losable = (n: number, store: BudgetStore, clock: ManualClock) =>
    Array.from({ length: n }, () => member({ store, clock }));

  async function throttle(b: SharedBudget): Promise<void> {
    (await b.acquire()).throttled();
  }

  it('adopts the new state and cuts it again', async () => {
    const clock = new ManualClock();
    const store = new LosableStore(clock);
    const budgets = losable(3, store, clock);
    const [a, b, c] = budgets as [SharedBudget, SharedBudget, SharedBudget];
    clock.advance(250);
    for (let i = 0; i < 3; i++) await throttle(a);
    expect(store.inner.cuts).toBe(3);
    const lost = a.state.generation;
    const inFlight = await b.acquire(); // sent before the loss, throttled after it

    store.lose(); // epoch 0 again: the members still know epoch 3
    clock.advance(250); // a heartbeat each: the state comes back at the initial rate
    for (const m of budgets) {
      expect(m.state).toMatchObject({ epoch: 0, rate: 600 });
      expect(m.state.generation).not.toBe(lost);
    }
    // A request sent in the lost state cuts the new one (no cut in it yet), once.
    inFlight.throttled();
    expect(store.inner.cuts).toBe(1);
    expect(store.inner.rate).toBeCloseTo(420);
    clock.advance(250); // every member hears of that cut
    await throttle(c);
    await throttle(c);
    expect(store.inner.cuts).toBe(3);
    expect(store.inner.rate).toBeCloseTo(600 * 0.7 ** 3);
    clock.advance(250);
    for (const m of budgets) expect(m.state).toMatchObject({ epoch: 3, rate: store.inner.rate });
  });

  it('cuts the new state when the first to hear of the loss is a cut', async () => {
    const clock = new ManualClock();
    const store = new LosableStore(clock);
    const budgets = losable(2, store, clock);
    const a = budgets[0]!;
    clock.advance(250);
    await throttle(a);
    await throttle(a);
    expect(store.inner.cuts).toBe(2);

    store.lose();
    await throttle(a); // its permit's epoch is 2, of the lost state: it cuts the new one
    expect(store.inner.cuts).toBe(1);
    expect(a.state.epoch).toBe(1);
    await throttle(a);
    expect(store.inner.cuts).toBe(2);
  });
});

describe('SharedBudget after its shared state is lost, on the memory store as on Redis', () => {
  it('a member without an initial rate heard first keeps its share; a pause lost is shared again', async () => {
    const clock = new ManualClock();
    const store = new LosableStore(clock);
    const a = member({ store, clock, initialUnitsPerMinute: undefined }); // beats first
    const [b, c] = [member({ store, clock }), member({ store, clock })] as [SharedBudget, SharedBudget];
    clock.advance(250);
    clock.advance(250);
    expect([a, b, c].map((m) => m.limiter.rate)).toEqual([200, 200, 200]);

    (await b.acquire()).throttled(30_000); // every member pauses for 30 s
    store.lose(); // before a and c heard of the pause
    clock.advance(250); // a heartbeat each, in the order a, b, c
    const paused = c.snapshot().pausedUntil;
    expect({
      rates: [a, b, c].map((m) => m.limiter.rate),
      stored: store.inner.rate,
      cPausedFor: paused === undefined ? 0 : Math.round((paused - clock.now()) / 1_000),
    }).toEqual({ rates: [200, 140, 200], stored: 600, cPausedFor: 30 }); // b: its local cut, held
  });
});

describe('SharedBudget with failClosed, before its first heartbeat', () => {
  /** A store whose first heartbeat is answered only when the test says so. */
  function slowStore() {
    let answer = (): void => {};
    const memory = new MemoryBudgetStore();
    const store: BudgetStore = {
      roundTrips: 0,
      heartbeat: (r) =>
        new Promise<HeartbeatReply>((resolve) => {
          answer = () => resolve(memory.heartbeat(r));
        }),
      cut: (r) => memory.cut(r),
      pause: (r) => memory.pause(r),
      leave: (id) => memory.leave(id),
    };
    return { store, answerHeartbeat: () => answer() };
  }

  it('rejects an aborted acquire at once with the reason, and leaves no listener on the signal', async () => {
    const { store, answerHeartbeat } = slowStore();
    const b = createSharedBudget({ name: 'closed', store, failClosed: true, initialUnitsPerMinute: 600 });
    try {
      const reason = new Error('gave up');
      const aborted = new AbortController();
      const pending = b.acquire(1, { signal: aborted.signal });
      const settled = vi.fn();
      pending.then(settled, settled);
      await new Promise((resolve) => setImmediate(resolve));
      expect(settled).not.toHaveBeenCalled(); // waiting for the first heartbeat
      aborted.abort(reason);
      await new Promise((resolve) => setImmediate(resolve));
      expect(settled).toHaveBeenCalledWith(reason); // at once, not at the heartbeat's answer
      await expect(pending).rejects.toBe(reason);

      const already = AbortSignal.abort(reason);
      await expect(b.acquire(1, { signal: already })).rejects.toBe(reason);

      const kept = new AbortController();
      const waiting = b.acquire(1, { signal: kept.signal });
      expect(getEventListeners(kept.signal, 'abort').length).toBeLessThanOrEqual(1);
      answerHeartbeat();
      const permit = await waiting;
      permit.success();
      expect(getEventListeners(kept.signal, 'abort')).toHaveLength(0);
    } finally {
      answerHeartbeat();
      await b.close();
    }
  });
});

describe('SharedBudget on a MemoryBudgetStore and a manual clock', () => {
  it('takes a store or a Redis, not both', () => {
    const store = new MemoryBudgetStore();
    expect(() => createSharedBudget({ name: 'x', store, redis: 'redis://127.0.0.1:1' })).toThrow(
      /store: give either redis or store, not both/,
    );
    expect(() => createSharedBudget({ name: 'x', store: {} as MemoryBudgetStore })).toThrow(
      /store: must be a BudgetStore/,
    );
  });

  it('heartbeats on the clock and applies each answer at once', () => {
    const clock = new ManualClock();
    const { store, budgets } = members(3, clock);
    expect(budgets[0]!.state.members).toBe(1); // its first heartbeat, alone
    clock.advance(250);
    for (const b of budgets) {
      expect(b.state.members).toBe(3);
      expect(b.limiter.rate).toBeCloseTo(200);
    }
    expect(store.members).toBe(3);
    expect(budgets[0]!.state.roundTrips).toBe(0);
    // Distinct places (phases) while the membership holds; the store's clock is this one.
    expect(budgets.map((b) => b.state.index).sort()).toEqual([0, 1, 2]);
    for (const b of budgets) expect(b.state.serverOffset).toBe(0);
  });

  it('cuts the whole rate once for a burst of 429s seen by several members', async () => {
    const clock = new ManualClock();
    const { store, budgets } = members(3, clock);
    clock.advance(250);
    const burst = await Promise.all(budgets.map((b) => b.acquire()));
    for (const permit of burst) permit.throttled();
    expect(store.cuts).toBe(1);
    expect(store.rate).toBeCloseTo(420);
    // The refused local cuts are undone at once: each has its share of the cut budget.
    for (const b of budgets) expect(b.limiter.rate).toBeCloseTo(140);
    const later = await budgets[1]!.acquire();
    later.throttled();
    expect(store.cuts).toBe(2);
    expect(store.rate).toBeCloseTo(294);
  });

  it('pauses the others at their next heartbeat', async () => {
    const clock = new ManualClock();
    const { budgets } = members(2, clock);
    clock.advance(250);
    const [a, b] = budgets as [SharedBudget, SharedBudget];
    (await a.acquire()).throttled(30_000);
    expect(a.snapshot().pausedUntil).toBe(30_250);
    expect(b.snapshot().pausedUntil).toBeUndefined();
    clock.advance(250);
    expect(b.snapshot().pausedUntil).toBe(30_250);
  });

  it('gives a busy member most of the rate and an idle one a floor', () => {
    const clock = new ManualClock();
    const { budgets } = members(2, clock);
    const [busy, idle] = budgets as [SharedBudget, SharedBudget];
    const waiting = Array.from({ length: 30 }, () => busy.acquire().catch(() => undefined));
    clock.advance(250);
    clock.advance(250);
    expect(busy.state.share! + idle.state.share!).toBeCloseTo(600);
    expect(busy.state.share!).toBeGreaterThan(15 * idle.state.share!);
    busy.limiter.close();
    return Promise.all(waiting);
  });
});

describeRedis('the Redis store and the memory store follow the same rules', () => {
  let names = 0;
  const suite = withRedisServer();

  function redisStore(): RedisBudgetStore {
    return suite.store(`parity-${process.pid}-${names++}`, 'arl-test:');
  }

  it.each([
    { rate: 600, demands: [0, 0, 0], floorFraction: 0.05 },
    { rate: 600, demands: [0, 0], floorFraction: 0 },
    { rate: 3_000, demands: [3_800, 200], floorFraction: 0.05 },
    { rate: 1_234.5, demands: [17.25, 5_000, 640, 0.5], floorFraction: 0.2 },
    { rate: 90, demands: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], floorFraction: 1 },
  ])('the Lua heartbeat shares $rate units/min by demand $demands as demandWeightedShare does', async (c) => {
    const store = redisStore();
    const request = (i: number) =>
      beat(`m${i}`, c.demands[i]!, { initialRate: c.rate, floorFraction: c.floorFraction });
    for (let i = 0; i < c.demands.length; i++) await store.heartbeat(request(i));
    for (let i = 0; i < c.demands.length; i++) {
      const reply = await store.heartbeat(request(i));
      const expected = demandWeightedShare(
        c.rate,
        c.demands[i]!,
        c.demands,
        c.floorFraction,
        c.demands.length,
      );
      expect(reply.members).toBe(c.demands.length);
      expect(reply.rate).toBe(c.rate);
      expect(reply.share! / expected).toBeCloseTo(1, 12);
    }
  });

  type Answer = HeartbeatReply | CutReply | number;
  /**
   * A call to a store; `gen(i)`: the i-th generation that store answered so far; `last`: the
   * books of its last answer (a cut or a proposal computed from them is current).
   */
  type Step = (store: BudgetStore, gen: (i: number) => string, last: From) => Answer | Promise<Answer>;

  /**
   * Runs `steps` on a Redis store and a memory store and expects the same answers; a number
   * instead of a step waits that many ms (real time for Redis, `clock` for the memory store).
   * Generations are random: each store's must change at the same steps.
   */
  async function expectSameRules(steps: ([string, Step] | number)[], clock?: ManualClock): Promise<void> {
    const redis = redisStore();
    const memory = new MemoryBudgetStore({ clock });
    const seen = [[], []] as [string[], string[]];
    const last: [From, From] = [undefined, undefined];
    const ordinal = (store: 0 | 1, answer: Answer): number | undefined => {
      if (typeof answer === 'number') return undefined;
      const gens = seen[store];
      if (!gens.includes(answer.generation)) gens.push(answer.generation);
      return gens.indexOf(answer.generation);
    };
    for (const step of steps) {
      if (typeof step === 'number') {
        await sleep(step);
        clock?.advance(step);
        continue;
      }
      const [what, call] = step;
      const fromRedis = await call(redis, (i) => seen[0][i]!, last[0]);
      const fromMemory = await call(memory, (i) => seen[1][i]!, last[1]);
      if (typeof fromRedis !== 'number') last[0] = at(fromRedis);
      if (typeof fromMemory !== 'number') last[1] = at(fromMemory);
      expectSameAnswer(what, fromRedis, fromMemory);
      expect(ordinal(0, fromRedis), `${what}: generation`).toBe(ordinal(1, fromMemory));
    }
  }

  it('answers a sequence of heartbeats, cuts, pauses and leaves as the memory store does', async () => {
    const report = { accepted: 150.5, measured: 200.25 };
    await expectSameRules([
      ['a joins', (s) => s.heartbeat(beat('a', 100, report))],
      ['b joins', (s) => s.heartbeat(beat('b', 500, { ...report, waited: true }))],
      ['c joins', (s) => s.heartbeat(beat('c', 0))],
      ['a cut', (s, _, last) => s.cut(cut(0, last, { measured: 351 }))],
      ['a cut for the same burst', (s, _, last) => s.cut(cut(0, last))],
      ['a cut within the cooldown', (s, _, last) => s.cut(cut(1, last, { cooldown: HOUR }))],
      ['a stale cut', (s) => s.cut(cut(1, undefined))],
      [
        'a proposal',
        (s, _, last) => s.heartbeat(beat('a', 100, { proposal: last && { ...last, rate: 450 } })),
      ],
      [
        'a proposal past the maximum',
        (s, _, last) =>
          s.heartbeat(beat('b', 500, { proposal: last && { ...last, rate: 5_000 }, maxRate: 1_000 })),
      ],
      [
        'a stale proposal',
        (s, _, last) => s.heartbeat(beat('b', 500, { proposal: last && { ...last, version: 0, rate: 2 } })),
      ],
      ['a pause', (s) => s.pause({ ms: 30_000, ttl: HOUR })],
      ['a shorter pause', (s) => s.pause({ ms: 1_000, ttl: HOUR })],
      ['a cut below the minimum', (s, _, last) => s.cut(cut(1, last, { rate: 1e-6, minRate: 12 }))],
      ['b hears of the pause', (s) => s.heartbeat(beat('b', 500))],
      ['c leaves', (s) => s.leave('c')],
      ['a after c left', (s) => s.heartbeat(beat('a', 100))],
    ]);

    await expectSameRules([
      ['joins without a rate', (s) => s.heartbeat(beat('a', 100, { initialRate: undefined }))],
      ['the first cut sets the rate', (s, _, last) => s.cut(cut(0, last, { rate: 900, rateBefore: 1_300 }))],
      ['then shares it', (s) => s.heartbeat(beat('a', 100, { initialRate: undefined }))],
    ]);

    // A state made again at a stale rate: the lowest offered until a proposal or a member heard
    // again (scripts.ts, SEEDED).
    await expectSameRules([
      ['made again at a stale rate', (s) => s.heartbeat(beat('a', 100, { initialRate: 6_000 }))],
      ['a lower rate offered is kept', (s) => s.heartbeat(beat('b', 100, { initialRate: 1_441 }))],
      ['a higher one is not', (s) => s.heartbeat(beat('c', 100, { initialRate: 6_000 }))],
      [
        'a cut from the higher rate cuts the lowest',
        (s, _, last) => s.cut(cut(0, last, { rate: 4_200, rateBefore: 6_000 })),
      ],
      [
        'a proposal ends the seeding',
        (s, _, last) =>
          s.heartbeat(beat('d', 100, { initialRate: undefined, proposal: last && { ...last, rate: 1_100 } })),
      ],
      ['a lower rate offered after it is not kept', (s) => s.heartbeat(beat('e', 100, { initialRate: 500 }))],
    ]);
    await expectSameRules([
      ['made again at a stale rate', (s) => s.heartbeat(beat('a', 100, { initialRate: 6_000 }))],
      ['a lower rate offered is kept', (s) => s.heartbeat(beat('b', 100, { initialRate: 1_441 }))],
      ['a member heard again ends the seeding', (s) => s.heartbeat(beat('a', 100, { initialRate: 500 }))],
      ['a lower rate offered after it is not kept', (s) => s.heartbeat(beat('c', 100, { initialRate: 60 }))],
    ]);

    // The probe controller's books: the last 8 cuts, the draw, the units accepted since the cut.
    const cuts: [string, Step][] = Array.from({ length: 10 }, (_, i) => [
      `cut ${i}`,
      (s, _, last) =>
        s.cut(
          cut(i, last, {
            rate: 1_000 - i,
            rateBefore: 1_100.5 - i,
            record: {
              rateBefore: 1_100.5 - i,
              acceptedRate: 950.25 + i,
              acceptedRateSincePrevious: i % 3 === 0 ? undefined : 900 + i / 8,
            },
            random: i / 10 + 0.0123,
          }),
        ),
    ]);
    await expectSameRules([
      ['no cut yet', (s) => s.heartbeat(beat('a', 100, { acceptedUnits: 12.5 }))],
      ['b reports', (s) => s.heartbeat(beat('b', 100, { acceptedUnits: 30 }))],
      ...cuts.slice(0, 1),
      ['after the first cut', (s) => s.heartbeat(beat('a', 100, { acceptedUnits: 7.25 }))],
      ['b again', (s) => s.heartbeat(beat('b', 100, { acceptedUnits: 3 }))],
      ...cuts.slice(1),
      ['the books keep 8', (s) => s.heartbeat(beat('a', 100, { acceptedUnits: 1 }))],
    ]);
  });

  it('starts a new generation after the state is lost, as the memory store does', async () => {
    const ttl = 300;
    await expectSameRules(
      [
        ['a joins', (s) => s.heartbeat(beat('a', 100, { ttl }))],
        ['b joins', (s) => s.heartbeat(beat('b', 500, { ttl }))],
        ['a cut', (s, gen, last) => s.cut(cut(0, last, { generation: gen(0), ttl }))],
        ['a second cut', (s, gen, last) => s.cut(cut(1, last, { generation: gen(0), ttl }))],
        ['b hears of them', (s) => s.heartbeat(beat('b', 500, { ttl }))],
        ttl + 100, // the state and the members expire
        ['a after the loss: epoch 0, the initial rate', (s) => s.heartbeat(beat('a', 100, { ttl }))],
        [
          'a request of the lost generation cuts',
          (s, gen, last) => s.cut(cut(2, last, { generation: gen(0), ttl })),
        ],
        ['another one does not', (s, gen, last) => s.cut(cut(2, last, { generation: gen(0), ttl }))],
        ['a request of the new one cuts', (s, gen, last) => s.cut(cut(1, last, { generation: gen(1), ttl }))],
        ['a request of no known generation cuts in its epoch', (s, _, last) => s.cut(cut(2, last, { ttl }))],
        ttl + 100,
        ['a pause makes a new state, with no rate', (s) => s.pause({ ms: 1_000, ttl })],
        [
          'a cut of the lost generation sets its rate: no books to be stale against',
          (s, gen) => s.cut(cut(3, { generation: gen(1), version: 7 }, { generation: gen(1), ttl })),
        ],
        [
          'another one of the lost generation does not',
          (s, gen, last) => s.cut(cut(3, last, { generation: gen(1), ttl })),
        ],
        [
          'a cut of the lost books into a state with a rate is stale',
          (s, gen) => s.cut(cut(1, { generation: gen(1), version: 1 }, { generation: gen(2), ttl })),
        ],
        ['a heartbeat shares it', (s) => s.heartbeat(beat('b', 500, { ttl }))],
      ],
      new ManualClock(),
    );
  });
});

/** Same answer, up to Lua's 14 significant digits and the real time between the two (a loaded machine). */
function expectSameAnswer(
  what: string,
  a: HeartbeatReply | CutReply | number,
  b: HeartbeatReply | CutReply | number,
): void {
  if (typeof a === 'number' || typeof b === 'number') {
    expect(Math.abs(Number(a) - Number(b)), what).toBeLessThan(200);
    return;
  }
  const { rate: rateA, generation: _genA, books: booksA, ...restA } = a as HeartbeatReply;
  const { rate: rateB, generation: _genB, books: booksB, ...restB } = b as HeartbeatReply;
  expectSameBooks(what, booksA, booksB);
  expect(rateA === undefined, what).toBe(rateB === undefined);
  if (rateA !== undefined) expect(rateA / rateB!, what).toBeCloseTo(1, 12);
  if ('share' in restA && 'share' in restB) {
    // The store's clocks differ: Redis's TIME, the memory store's clock.
    const { share: shareA, pauseRemaining: pauseA, now: _nowA, ...heartA } = restA;
    const { share: shareB, pauseRemaining: pauseB, now: _nowB, ...heartB } = restB;
    expect(shareA === undefined, what).toBe(shareB === undefined);
    if (shareA !== undefined) expect(shareA / shareB!, what).toBeCloseTo(1, 12);
    expect(Math.abs(pauseA - pauseB), what).toBeLessThan(200);
    expect(heartA, what).toEqual(heartB);
  } else {
    expect(restA, what).toEqual(restB);
  }
}

/** Same books; their durations within a few ms of real time between the two stores. */
function expectSameBooks(what: string, a: ControllerBooks, b: ControllerBooks): void {
  const { sinceLastDecrease: cutA, pauseSinceLastDecrease: pauseA, sinceLastIncrease: incA, ...restA } = a;
  const { sinceLastDecrease: cutB, pauseSinceLastDecrease: pauseB, sinceLastIncrease: incB, ...restB } = b;
  expect(restA, `${what}: books`).toEqual(restB);
  expect(Math.abs(cutA - cutB), `${what}: sinceLastDecrease`).toBeLessThan(200);
  expect(Math.abs(pauseA - pauseB), `${what}: pauseSinceLastDecrease`).toBeLessThan(200);
  expect(Math.abs(incA - incB), `${what}: sinceLastIncrease`).toBeLessThan(200);
}

describe('SharedBudget warnings', () => {
  it('warns through process.emitWarning with a code when it degrades and nobody listens', async () => {
    const memory = new MemoryBudgetStore();
    const store: BudgetStore = {
      roundTrips: 0,
      heartbeat: () => Promise.reject(new Error('store down')),
      cut: (r) => memory.cut(r),
      pause: (r) => memory.pause(r),
      leave: (id) => memory.leave(id),
    };
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const b = createSharedBudget({ name: 'lonely', store, initialUnitsPerMinute: 600 });
    try {
      await b.ready();
      await vi.waitFor(() => expect(b.state.degraded).toBe(true));
      expect(warn.mock.calls).toEqual([
        [
          expect.stringContaining('shared budget "lonely" degraded (store down)'),
          { code: 'ARL_SHARED_BUDGET_DEGRADED' },
        ],
      ]);
    } finally {
      warn.mockRestore();
      await b.close();
    }
  });
});

/** A store on a client of these `evalsha` and `eval` (no Redis), with a timeout of 100 ms. */
function storeOn(evalsha: RedisClient['evalsha'], evalScript: RedisClient['eval']): RedisBudgetStore {
  const client: RedisClient = {
    evalsha,
    eval: evalScript,
    quit: () => Promise.resolve('OK'),
    disconnect: () => {},
  };
  return new RedisBudgetStore({ redis: client, name: 'fake', keyPrefix: 'arl-test:', redisTimeout: 100 });
}

describe('RedisBudgetStore: a script cache miss', () => {
  /** A client whose `evalsha` is answered by the test (`answer`), and whose `eval` calls are kept. */
  function missingScript(evalAnswer: Promise<unknown>) {
    const sent: { evalsha: number; eval: number } = { evalsha: 0, eval: 0 };
    let answer: (error: Error) => void = () => {};
    const store = storeOn(
      () => {
        sent.evalsha++;
        return new Promise((_, reject) => {
          answer = reject;
        });
      },
      () => {
        sent.eval++;
        return evalAnswer;
      },
    );
    return {
      store,
      sent,
      noScript: () => answer(new Error('NOSCRIPT No matching script. Please use EVAL.')),
    };
  }

  it('sends the script itself when the cache miss is answered in time', async () => {
    const { store, sent, noScript } = missingScript(Promise.reject(new Error('ERR from eval')));
    const call = store.heartbeat(beat('a', 10));
    noScript();
    await expect(call).rejects.toThrow('ERR from eval');
    expect(sent).toEqual({ evalsha: 1, eval: 1 });
    expect(store.roundTrips).toBe(2);
  });

  it('does not send the script once its call was told "no answer": a later heartbeat has gone out by then', async () => {
    vi.useFakeTimers();
    try {
      const { store, sent, noScript } = missingScript(new Promise(() => {}));
      const call = store.heartbeat(beat('a', 10));
      const failed = expect(call).rejects.toThrow('no answer from Redis within 100 ms');
      await vi.advanceTimersByTimeAsync(100);
      await failed;
      noScript(); // the cache miss comes back after the timeout
      await vi.advanceTimersByTimeAsync(0);
      expect(sent).toEqual({ evalsha: 1, eval: 0 });
      expect(store.roundTrips).toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('RedisBudgetStore: a pause past its deadline', () => {
  /** A store whose PAUSE answers come from `answers`, in turn; the arguments after the keys kept. */
  function pausing(...answers: unknown[][]) {
    const sent: unknown[][] = [];
    const store = storeOn(
      (_sha, _keys, ...args) => {
        sent.push(args.slice(3));
        return Promise.resolve(answers[Math.min(sent.length, answers.length) - 1]);
      },
      () => Promise.reject(new Error('not cached?')),
    );
    return { store, sent };
  }

  it('refused as late although answered in time: learns the clock from the answer and sends it once more', async () => {
    const { store, sent } = pausing([-1, [], '1796000000000'], [1_000, []]);
    expect(await store.pause({ ms: 1_000, ttl: HOUR })).toBe(1_000);
    // No deadline before the server's clock is known; the second, from the refusal's clock.
    expect(sent.map((args) => args[4])).toEqual(['', expect.any(Number)]);
    const deadline = sent[1]![4] as number;
    expect(deadline).toBeGreaterThan(1_796_000_000_000);
    expect(deadline).toBeLessThan(1_796_000_000_000 + 1_000);
  });

  it('refused twice: the call fails (the member degrades until its next heartbeat), and the clock is forgotten', async () => {
    const { store, sent } = pausing(['-1', [], '1796000000000']); // a client with stringNumbers
    await expect(store.pause({ ms: 1_000, ttl: HOUR })).rejects.toThrow(
      'Redis refused the pause twice as past its deadline (server time 1796000000000)',
    );
    await expect(store.pause({ ms: 1_000, ttl: HOUR })).rejects.toThrow('refused the pause twice');
    // The third call was sent without a deadline: the clock learnt from a refusal was dropped.
    expect(sent.map((args) => args[4])).toEqual(['', expect.any(Number), '', expect.any(Number)]);
  });
});
