import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { MemoryBudgetStore } from '../src/redis/index.js';
import { sharedMembers, storeDownWhile } from './helpers/shared-members.js';

const { member: budget } = sharedMembers('degraded', { heartbeatInterval: 250 }, []);

describe('a shared budget member while the store is down (ManualClock, the default probe)', () => {
  it('holds and probes at its ceiling as a single limiter does: its 429s pause only itself', () => {
    const clock = new ManualClock();
    const options = {
      clock,
      initialUnitsPerMinute: 6_000,
      decreaseCooldown: 0,
      burst: 'second' as const,
      random: () => 0,
    };
    let down = false;
    // Once the store is down it answers no heartbeat and no cut: the member is degraded.
    const member = budget({
      ...options,
      store: storeDownWhile(new MemoryBudgetStore({ clock }), () => down),
    });
    let degraded = 0;
    member.on('degraded', () => degraded++);
    down = true; // from the next heartbeat on
    const single = new AdaptiveRateLimiter(options);
    const limiters = [member, single];
    /** Every 50 ms for `ms`: 10 units asked of each (12,000/min, more than either lets through: both wait). */
    const send = (ms: number) => {
      for (let t = 0; t < ms; t += 50) {
        for (const l of limiters) for (let i = 0; i < 10; i++) l.tryAcquire()?.success();
        clock.advance(50);
      }
    };
    send(3_000);
    expect(degraded).toBe(1);
    expect(member.state.degraded).toBe(true);
    for (const l of limiters) l.tryAcquire()!.throttled(); // the first cut: an estimate, climbed at once
    send(4_000);
    for (const l of limiters) l.tryAcquire()!.throttled(); // an overshoot of that climb: a ceiling
    expect(member.limiter.rate).toBe(single.rate);
    send(5_000);
    const cruise = single.rate; // drained, then cruising 3 % below the ceiling
    expect(member.limiter.rate).toBe(cruise);
    // The hold (4 x 4 s, doubled: the ceiling found again; 32 s, past maxHold's 30 s, as at the
    // highest ceiling found the cap is 4 times it) holds both past 31 s after the cut ...
    send(26_500);
    expect(single.rate).toBe(cruise);
    expect(member.limiter.rate).toBe(cruise);
    // ... and then is over: both probe, in step. The member does not wait for the budget's next
    // cut from the others.
    send(2_500);
    expect(single.rate).toBeGreaterThan(cruise);
    expect(member.limiter.rate).toBe(single.rate);
  });
});
