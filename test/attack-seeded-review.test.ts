import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { MemoryBudgetStore } from '../src/redis/index.js';
import type { BudgetStore, HeartbeatRequest } from '../src/redis/store.js';
import { describeRedis, heartbeatRequest, withRedisServer } from './helpers/redis-server.js';

const HOUR = 3_600_000;

function beat(id: string, more: Partial<HeartbeatRequest> = {}): HeartbeatRequest {
  return heartbeatRequest(id, { demand: 100, memberTimeout: HOUR, ...more });
}

/**
 * A brand-new budget whose rate is above the members' demand: the controller proposes nothing,
 * so the state stays seeded for as long as it lives. A member that joins (or restarts) later with
 * a lower `initialUnitsPerMinute` then lowers the rate every member shares.
 */
async function joinLate(store: BudgetStore, advance: (ms: number) => void): Promise<number | undefined> {
  for (let i = 0; i < 10; i++) {
    await store.heartbeat(beat('a', { initialRate: 6_000 }));
    advance(60_000);
  }
  await store.heartbeat(beat('late', { initialRate: 60 }));
  return (await store.heartbeat(beat('a', { initialRate: 6_000 }))).rate;
}

describe('a seeded state that no proposal ends (memory store)', () => {
  it('a member joining ten minutes later with initialUnitsPerMinute 60 does not lower the 6,000 the budget has shared since', async () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    expect(await joinLate(store, (ms) => clock.advance(ms))).toBe(6_000);
  });
});

describeRedis('a seeded state that no proposal ends (Redis store)', () => {
  const suite = withRedisServer();
  let names = 0;
  it('a member joining later with initialUnitsPerMinute 60 does not lower the 6,000 the budget has shared since', async () => {
    const store = suite.store(`seeded-${process.pid}-${names++}`, 'arl-test:');
    // Real time does not move here; the state lives on (no proposal, no cut).
    expect(await joinLate(store, () => {})).toBe(6_000);
  });
});

/** Seeded paths the parity test in the store tests does not walk; the rates and versions answered. */
async function seededPaths(store: BudgetStore): Promise<(number | string | undefined)[]> {
  const out: (number | string | undefined)[] = [];
  const b1 = await store.heartbeat(beat('a', { initialRate: 600 }));
  const b2 = await store.heartbeat(beat('b', { initialRate: 60 }));
  out.push(b1.rate, b1.books?.version, b2.rate, b2.books?.version);
  // A cut from a lower rate than the state's: the member's own cut, the state stays seeded.
  const c1 = await store.cut({
    sentEpoch: 0,
    from: { generation: b2.generation, version: b2.books?.version ?? 0 },
    rate: 20,
    rateBefore: 40,
    measured: undefined,
    record: { rateBefore: 40, acceptedRate: 40, acceptedRateSincePrevious: undefined },
    random: 0.25,
    cooldown: 0,
    minRate: 25,
    maxRate: undefined,
    ttl: HOUR,
  });
  out.push(c1.cut ? 1 : 0, c1.rate, c1.books?.version);
  // Still seeded after the cut: a lower offer lowers it and bumps the version once.
  const b3 = await store.heartbeat(beat('c', { initialRate: 10, minRate: 1 }));
  out.push(b3.rate, b3.books?.version);
  // A proposal at that version ends it; a lower offer after it is not kept.
  const b4 = await store.heartbeat(
    beat('a', {
      initialRate: 600,
      minRate: 1,
      proposal: { generation: b3.generation, version: b3.books?.version ?? 0, rate: 30 },
    }),
  );
  const b5 = await store.heartbeat(beat('c', { initialRate: 10, minRate: 1 }));
  out.push(b4.rate, b4.proposed ? 1 : 0, b4.books?.version, b5.rate, b5.books?.version);
  return out;
}

describeRedis('the seeded paths on Redis as on the memory store', () => {
  const suite = withRedisServer();
  it('lowest of the initial rates, a cut from a lower rate, a clamp, a proposal ending it: same rates and versions', async () => {
    const memory = await seededPaths(new MemoryBudgetStore({ clock: new ManualClock() }));
    const redis = await seededPaths(suite.store(`seeded-paths-${process.pid}`, 'arl-test:'));
    expect(redis).toEqual(memory);
    expect(memory).toEqual([600, 0, 60, 1, 1, 25, 2, 10, 3, 30, 1, 4, 30, 4]);
  });
});
