import { describe, expect, it } from 'vitest';
import { LimitFloors } from '../src/limiter/limit-floor.js';
import type { ReadQuota } from '../src/limiter/types.js';

const floor = (remaining: number, policy = 'openai:tokens'): ReadQuota => ({
  policy,
  budget: 'tokens',
  remaining,
  limit: remaining,
  windowMs: 60_000,
  limitIsLowerBound: true,
});

describe('LimitFloors: limits read from remaining alone', () => {
  it('gives each lower-bound quota the highest remaining of its policy so far', () => {
    const floors = new LimitFloors();
    expect(floors.apply([floor(9_000)])[0]?.limit).toBe(9_000);
    expect(floors.apply([floor(2_000)])[0]).toMatchObject({ remaining: 2_000, limit: 9_000 });
    expect(floors.apply([floor(0)])[0]).toMatchObject({ remaining: 0, limit: 9_000 });
    expect(floors.apply([floor(9_500)])[0]?.limit).toBe(9_500);
    // Per policy: the requests budget has a highest of its own.
    expect(floors.apply([floor(10, 'openai:requests'), floor(100)]).map((q) => q.limit)).toEqual([10, 9_500]);
  });

  it('leaves announced limits alone (the same array when none is a lower bound)', () => {
    const floors = new LimitFloors();
    const announced = [{ policy: 'openai:tokens', remaining: 5, limit: 10, windowMs: 60_000 }];
    expect(floors.apply(announced)).toBe(announced);
    floors.apply([floor(9_000)]);
    expect(floors.apply([...announced, floor(1)]).map((q) => q.limit)).toEqual([10, 9_000]);
  });

  it('keeps a limit of 0 when nothing was ever left (the quota is then ignored)', () => {
    expect(new LimitFloors().apply([floor(0)])[0]?.limit).toBe(0);
  });
});
