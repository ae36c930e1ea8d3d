import { describe, expect, it } from 'vitest';
import type { SlotBound } from '../src/http/concurrency.js';
import { ConcurrencyGate } from '../src/http/concurrency.js';
import { LazySharedBudget } from '../src/registry/shared.js';
import { settled } from './helpers/settled.js';

// A `shared` limiter's budget is made once its Redis code has loaded (a dynamic import): an
// acquire, and a wait for a `maxConcurrent` slot (whose bound the budget gives), wait for that
// load first. A caller's abort must end that wait at once, with its reason, as it ends a wait in
// the line; an already-aborted signal rejects at once. The load here never ends: nothing but the
// abort can end the wait.

const never = <T>() => new Promise<T>(() => {});
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("an abort while a shared budget's code loads", () => {
  it('acquire: an abort rejects it at once with the reason', async () => {
    let made = 0;
    const lazy = new LazySharedBudget('loading', () => {
      made++;
      return never();
    });
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const waiting = settled(lazy.acquire(1, { signal: controller.signal }));
    await flush();
    expect(waiting.done).toBe(false);
    controller.abort(reason);
    await expect.poll(() => waiting.done).toBe(true);
    expect(waiting.error).toBe(reason);
    expect(lazy.busy).toBe(false);
    expect(made).toBe(1);
  });

  it('acquire: an already-aborted signal rejects at once', async () => {
    const lazy = new LazySharedBudget('loading', () => never());
    const reason = new Error('aborted before');
    const waiting = settled(lazy.acquire(1, { signal: AbortSignal.abort(reason) }));
    await expect.poll(() => waiting.done).toBe(true);
    expect(waiting.error).toBe(reason);
    expect(lazy.busy).toBe(false);
  });

  it("a maxConcurrent slot's wait for the budget's bound: an abort rejects it at once", async () => {
    const gate = new ConcurrencyGate(1);
    expect(gate.tryEnter()).toBe(true); // the one slot is taken: the next waits
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const waiting = settled(gate.enter(controller.signal, never<SlotBound | undefined>()));
    await flush();
    expect(waiting.done).toBe(false);
    controller.abort(reason);
    await expect.poll(() => waiting.done).toBe(true);
    expect(waiting.error).toBe(reason);
    expect(gate.waiting).toBe(0);
    gate.leave();
    expect(gate.inFlight).toBe(0);
  });
});
