import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { SharedBudget } from '../src/redis/index.js';
import {
  describeRedis,
  heartbeatRequest,
  type RedisServer,
  sharedMembers,
  withRedisServer,
} from './helpers/redis-server.js';

// The :members key lost alone (allkeys-lru or allkeys-random evict one key; a DEL here) while
// the :reports key holds the live members' reports: the members join again, and nothing is
// reported as broken, as often as it happens. Real redis-server on 127.0.0.1, heartbeats sent by
// the test (refresh) on a ManualClock.

const RATE = 600;
const REPAIRED = 'ARL_SHARED_BUDGET_STATE_REPAIRED';

const { name, member } = sharedMembers(
  'members-evicted',
  { heartbeatInterval: 60_000, controller: 'aimd', initialUnitsPerMinute: RATE },
  ['degraded'],
);

const keys = () => {
  const tag = `arl:{${name()}}`;
  return { state: `${tag}:state`, members: `${tag}:members`, reports: `${tag}:reports` };
};

/** The members' local rates added up (units/min): what they send together. */
const sum = (budgets: readonly SharedBudget[]) => budgets.reduce((s, b) => s + b.limiter.rate, 0);

const warnings: string[] = [];
const onWarning = (w: Error): void => {
  if ((w as Error & { code?: string }).code === REPAIRED) warnings.push(w.message);
};
beforeEach(() => {
  process.on('warning', onWarning);
});
afterEach(() => {
  process.off('warning', onWarning);
  warnings.length = 0;
});

/** Warnings are emitted on the next tick. */
const warned = async (): Promise<string[]> => {
  await new Promise((resolve) => setImmediate(resolve));
  return [...warnings];
};

describeRedis('shared budget: the :members key evicted alone', () => {
  let server: RedisServer;
  let redis: Redis;

  const suite = withRedisServer((started) => ({ server, redis } = started));

  /** Three members of one budget of 600 units/min, each heard twice: 200 each. */
  async function sharing(clock: ManualClock): Promise<SharedBudget[]> {
    const budgets = [0, 1, 2].map(() => member({ redis: server.url, clock }));
    for (const b of [...budgets, ...budgets]) await b.refresh();
    expect(budgets.map((b) => b.state.members)).toEqual([3, 3, 3]);
    expect(sum(budgets)).toBeCloseTo(RATE, 0);
    return budgets;
  }

  /** Deletes the :members key `times` times, each followed by two heartbeats of every member. */
  async function evictMembers(budgets: SharedBudget[], times: number): Promise<number[]> {
    const sums: number[] = [];
    for (let i = 0; i < times; i++) {
      await redis.del(keys().members);
      expect(await redis.hlen(keys().reports)).toBe(3);
      for (const b of [...budgets, ...budgets]) {
        await b.refresh();
        sums.push(sum(budgets));
      }
      expect(budgets.map((b) => b.state.members)).toEqual([3, 3, 3]);
    }
    return sums;
  }

  it('is no broken store: the members join again and no `repaired` event is emitted, at each of 3 evictions', async () => {
    const clock = new ManualClock();
    const budgets = await sharing(clock);
    const repaired: string[] = [];
    for (const b of budgets) b.on('repaired', (e) => repaired.push(...e.repaired));
    const sums = await evictMembers(budgets, 3);
    // Before: each eviction was told as "repaired" for the two reports of the members not heard
    // yet (`arl:{…}:reports <id>`): 6 entries in 3 events.
    expect(repaired).toEqual([]);
    for (const total of sums) expect(total).toBeLessThanOrEqual(RATE * 1.01);
    expect(sum(budgets)).toBeCloseTo(RATE, 0);
  });

  it('with nobody listening to `repaired`, no process warning of a broken store', async () => {
    const clock = new ManualClock();
    const budgets = await sharing(clock);
    await evictMembers(budgets, 2);
    // Before: 2 warnings, "the store held a broken arl:{…}:reports <id>, arl:{…}:reports <id>; repaired".
    expect(await warned()).toEqual([]);
  });

  it('the store answers the reports dropped for want of their members as lost, not as repaired', async () => {
    const store = suite.store(name());
    for (const id of ['a', 'b', 'c']) await store.heartbeat(heartbeatRequest(id));
    await redis.del(keys().members);
    const reply = await store.heartbeat(heartbeatRequest('a'));
    expect(reply.repaired).toBeUndefined();
    expect(reply.membersLost).toBe(2);
    expect(reply.rejoined).toBe(true);
    expect(reply.members).toBe(1);
    // The others join again: nothing more is lost.
    const b = await store.heartbeat(heartbeatRequest('b'));
    expect([b.membersLost, b.rejoined, b.members]).toEqual([0, true, 2]);
  });

  it('a report of a member not among the members while the :members key is there is still repaired (written by hand)', async () => {
    const store = suite.store(name());
    for (const id of ['a', 'b']) await store.heartbeat(heartbeatRequest(id));
    await redis.hset(keys().reports, 'ghost', '100 0 0 1200');
    const reply = await store.heartbeat(heartbeatRequest('a'));
    expect(reply.repaired).toEqual([`${keys().reports} ghost`]);
    expect(reply.membersLost).toBe(0);
  });

  it('is said once per eviction as a debug line (NODE_DEBUG=adaptive-rate-limit), and never as a warning', {
    timeout: 60_000,
  }, async () => {
    const root = fileURLToPath(new URL('..', import.meta.url));
    const { NODE_DEBUG: _, ...env } = process.env;
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', 'test/helpers/members-evicted-run.ts', server.url],
      { cwd: root, timeout: 50_000, env: { ...env, NODE_DEBUG: 'adaptive-rate-limit' } },
    );
    const budget = /done (\S+)/.exec(stdout)?.[1] ?? '';
    expect(budget).toMatch(/^members-evicted-run-\d+$/);
    const lines = stderr.split('\n').filter((l) => l.includes('its members key was gone'));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(
      /^ADAPTIVE-RATE-LIMIT \d+: shared budget "members-evicted-run-\d+": its members key/,
    );
    expect(lines[0]).toContain('2 reports of members not heard since dropped');
    expect(stderr).not.toMatch(/ARL_SHARED_BUDGET_STATE_REPAIRED|held a broken/);
  });
});
