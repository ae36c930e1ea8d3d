/**
 * Shared budgets for tests, with nothing started at import (no redis-server check): a file's
 * members, closed after each test; a memory store that can go down; a heartbeat request.
 */
import { afterEach } from 'vitest';
import type { ManualClock } from '../../src/clock.js';
import {
  createSharedBudget,
  type HeartbeatRequest,
  MemoryBudgetStore,
  type SharedBudget,
  type SharedBudgetOptions,
} from '../../src/redis/index.js';
import type { BudgetStore, HeartbeatReply } from '../../src/redis/store.js';

/** Events {@link sharedMembers} may listen to with no-ops, so that they raise no process warning. */
type QuietEvent = 'degraded' | 'recovered' | 'repaired';

/** What {@link sharedMembers} gives a test file. */
interface SharedMembers {
  /** `${of}-${pid}-${n}`: n moves on after each test. */
  name: (of?: string) => string;
  /** A member named `name()`, from the file's defaults and `options`. */
  member: (options: Partial<SharedBudgetOptions>) => SharedBudget;
  /** `n` members of one budget on a new MemoryBudgetStore of `clock`, and the store. */
  members: (
    n: number,
    clock: ManualClock,
    options?: Partial<SharedBudgetOptions>,
  ) => { store: MemoryBudgetStore; budgets: SharedBudget[] };
  /** Keeps `made` to be closed after its test, as the members are. */
  closeAfter: <T extends { close(): unknown }>(made: T) => T;
}

/**
 * Shared budgets of a test file: each made by `member` or `members` from `defaults` and the
 * options given, named `name()` (`prefix-pid-n`), listening to `quiet` with no-ops, and closed
 * after its test.
 */
export function sharedMembers(
  prefix: string,
  defaults: Partial<SharedBudgetOptions>,
  quiet: readonly QuietEvent[],
): SharedMembers {
  let n = 0;
  const open: { close(): unknown }[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((b) => b.close()));
    n++;
  });
  const name = (of = prefix) => `${of}-${process.pid}-${n}`;
  const closeAfter = <T extends { close(): unknown }>(made: T): T => {
    open.push(made);
    return made;
  };
  const member = (options: Partial<SharedBudgetOptions>) => {
    const b = createSharedBudget({ name: name(), ...defaults, ...options } as SharedBudgetOptions);
    for (const event of quiet) b.on(event, () => {});
    return closeAfter(b);
  };
  const members = (count: number, clock: ManualClock, options: Partial<SharedBudgetOptions> = {}) => {
    const store = new MemoryBudgetStore({ clock });
    return { store, budgets: Array.from({ length: count }, () => member({ store, clock, ...options })) };
  };
  return { name, member, members, closeAfter };
}

/**
 * `memory` as a store whose every call throws ("the store is down") while `down()` is true;
 * `answer` edits each heartbeat's reply.
 */
export function storeDownWhile(
  memory: MemoryBudgetStore,
  down: () => boolean,
  answer: (reply: HeartbeatReply) => HeartbeatReply = (reply) => reply,
): BudgetStore {
  const guard = <T>(call: () => T): T => {
    if (down()) throw new Error('the store is down');
    return call();
  };
  return {
    roundTrips: 0,
    heartbeat: (r) => guard(() => answer(memory.heartbeat(r))),
    cut: (r) => guard(() => memory.cut(r)),
    pause: (r) => guard(() => memory.pause(r)),
    leave: (id) => guard(() => memory.leave(id)),
  };
}

/**
 * A heartbeat of `id` with no demand and nothing sent: memberTimeout 1.2 s, floor 5 %, initial
 * rate 600 units/min, min 1, no max, ttl 1 h; `more` over these.
 */
export function heartbeatRequest(id: string, more: Partial<HeartbeatRequest> = {}): HeartbeatRequest {
  return {
    id,
    demand: 0,
    accepted: 0,
    measured: 0,
    acceptedUnits: 0,
    waited: false,
    memberTimeout: 1_200,
    floorFraction: 0.05,
    initialRate: 600,
    minRate: 1,
    maxRate: undefined,
    ttl: 3_600_000,
    ...more,
  };
}
