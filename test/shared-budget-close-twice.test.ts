import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { createSharedBudget, MemoryBudgetStore } from '../src/redis/index.js';
import { settled } from './helpers/settled.js';

// A shared budget's close() is idempotent. A second call while the first is still closing (it
// leaves the budget, then closes the store: the Redis client) must resolve only once the store is
// closed, as the first does: an application that awaits it before it exits, or before it opens a
// new budget of the same name, must not go on with the old one still open.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("a shared budget's close() called twice", () => {
  it('the second call resolves when the first does, once the store is closed', async () => {
    const clock = new ManualClock();
    const store = new MemoryBudgetStore({ clock });
    let storeClosed = false;
    let finishClose: (() => void) | undefined;
    // The memory store opens nothing; this one's close ends when the test says.
    (store as MemoryBudgetStore & { close(): Promise<void> }).close = () =>
      new Promise<void>((resolve) => {
        finishClose = () => {
          storeClosed = true;
          resolve();
        };
      });
    const budget = createSharedBudget({ name: 'twice', store, clock });
    await budget.ready();
    const first = settled(budget.close());
    const second = settled(budget.close());
    await expect.poll(() => finishClose !== undefined).toBe(true);
    await flush();
    expect([first.done, second.done]).toEqual([false, false]);
    finishClose?.();
    await expect.poll(() => second.done).toBe(true);
    expect(first.done).toBe(true);
    expect(storeClosed).toBe(true);
    // And once closed, a third call resolves at once.
    await budget.close();
  });
});
