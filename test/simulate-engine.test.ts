import { afterEach, describe, expect, it, vi } from 'vitest';
import { runAttempts } from '../src/attempt-loop.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { MemoryBudgetStore } from '../src/redis/memory-store.js';
import { SharedBudget } from '../src/redis/shared-budget.js';
import { builtInMode, runMode, sharedMode } from '../src/simulate/run.js';
import { cloneParams, findScenario } from '../src/simulate/scenarios.js';

// Watch the library's attempt loop: the simulator must send every request through it.
vi.mock(import('../src/attempt-loop.js'), async (importOriginal) => {
  const original = await importOriginal();
  return { ...original, runAttempts: vi.fn(original.runAttempts) as typeof original.runAttempts };
});

afterEach(() => {
  vi.restoreAllMocks();
  vi.mocked(runAttempts).mockClear();
});

function steady(minutes: number) {
  const params = cloneParams(findScenario('steady')!.params);
  params.minutes = minutes;
  return params;
}

describe('the simulator runs the library, not a model of it', () => {
  it('acquires every attempt from AdaptiveRateLimiter, the class the interceptor uses', async () => {
    const acquire = vi.spyOn(AdaptiveRateLimiter.prototype, 'acquire');
    const result = await runMode('steady', steady(1), builtInMode('cubic'));
    const limiters = new Set(acquire.mock.contexts);
    expect(limiters.size).toBe(2);
    for (const limiter of limiters) expect(limiter).toBeInstanceOf(AdaptiveRateLimiter);
    // One acquire per attempt: every request once, and once more for each 429 retried.
    expect(acquire.mock.calls.length).toBeGreaterThanOrEqual(result.details.requests);
    expect(acquire.mock.calls.length).toBeLessThanOrEqual(result.details.requests + result.throttled);
  });

  it('sends every request through runAttempts with 4 attempts', async () => {
    const result = await runMode('steady', steady(1), builtInMode('aimd'));
    const calls = vi.mocked(runAttempts).mock.calls;
    expect(calls).toHaveLength(result.details.requests);
    for (const [plan] of calls.slice(0, 50)) expect(plan.maxAttempts).toBe(4);
  });

  it('runs a shared mode on SharedBudget (one store) and its AdaptiveRateLimiter, as adaptive-rate-limit/redis', async () => {
    const budgetAcquire = vi.spyOn(SharedBudget.prototype, 'acquire');
    const limiterAcquire = vi.spyOn(AdaptiveRateLimiter.prototype, 'acquire');
    const limiterTake = vi.spyOn(AdaptiveRateLimiter.prototype, 'tryAcquire');
    const heartbeat = vi.spyOn(MemoryBudgetStore.prototype, 'heartbeat');
    const result = await runMode('steady', steady(1), sharedMode(builtInMode('aimd'))!);

    const budgets = new Set(budgetAcquire.mock.contexts);
    expect(budgets.size).toBe(2);
    for (const budget of budgets) expect(budget).toBeInstanceOf(SharedBudget);
    // Every acquire of a budget is its local limiter's: units free now are taken at once
    // (tryAcquire), the others wait in the local limiter's queue (acquire).
    const locals = new Set([...budgets].map((b) => (b as SharedBudget).limiter));
    expect(new Set(limiterTake.mock.contexts)).toEqual(locals);
    expect(new Set(limiterAcquire.mock.contexts)).toEqual(locals);
    expect(limiterTake.mock.calls.length).toBe(budgetAcquire.mock.calls.length);
    const takenAtOnce = limiterTake.mock.results.filter((r) => r.value !== undefined).length;
    expect(limiterAcquire.mock.calls.length).toBe(budgetAcquire.mock.calls.length - takenAtOnce);
    expect(budgetAcquire.mock.calls.length).toBeGreaterThanOrEqual(result.details.requests);
    expect(vi.mocked(runAttempts).mock.calls).toHaveLength(result.details.requests);

    // One store for the budget; each instance heartbeats every 250 ms of virtual time.
    expect(new Set(heartbeat.mock.contexts).size).toBe(1);
    expect(heartbeat.mock.calls.length).toBeGreaterThanOrEqual(2 * 240);
    expect(heartbeat.mock.calls.length).toBeLessThanOrEqual(2 * 241);
    expect(result.shared).toBe(true);
  });

  it('runs the no-limiter mode through the same attempt loop, without AdaptiveRateLimiter', async () => {
    const acquire = vi.spyOn(AdaptiveRateLimiter.prototype, 'acquire');
    const result = await runMode('steady', steady(1), builtInMode('none'));
    expect(acquire).not.toHaveBeenCalled();
    expect(vi.mocked(runAttempts).mock.calls).toHaveLength(result.details.requests);
    expect(result.gaveUp).toBeGreaterThan(0);
  });
});
