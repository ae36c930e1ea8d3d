import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import type { RateController } from '../src/controllers/types.js';
import { ConfigError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { OVERFLOW } from '../src/registry/index.js';
import { manualRegistry } from './helpers/manual-registry.js';

// A review of a change: each test but the control is a bug the change brought in (or a claim it
// made and did not keep), failing before its mend; each comment says what was wrong and the mend
// suggested, which is the one made.

const setup = manualRegistry;

describe("registry: a limiter 'in debt' (src/registry/origin-pool.ts #stateOf)", () => {
  // The pacer (`burst: 'paced'`, the default) reads `tokens` < 0 whenever its next slot is ahead
  // (Pacer.tokens: "negative: the time until the next slot"), i.e. after any ordinary 1-unit
  // request at a rate below 6,000/min. #stateOf reads that as debt: every limiter used within
  // its last gap is now 'busy' and cannot give way, where a `burst: 'second'` limiter after the
  // same request (tokens 0) is idle. At 60/min a single request pins its limiter for a second; at
  // the floor (1/min, after throttles) for a minute: new origins/customers go to the overflow
  // limiter. Fix: count as debt only what exceeds one slot/the bucket (e.g. tokens < -capacity
  // for the pacer, or a `debt` read from the gate, `RateGate.owed`, that is 0 for normal pacing).
  it('one ordinary 1-unit request through the default paced limiter does not keep it from giving way', async () => {
    const { clock, registry } = setup({ maxOriginLimiters: 1, default: { initialUnitsPerMinute: 60 } });
    const a = registry.limiterFor('https://a.test') as AdaptiveRateLimiter;
    (await a.acquire(1)).success();
    clock.advance(100);
    // burst 'second' at the same rate: tokens 0 after the draw, idle, gives way (checked below).
    expect(a.snapshot().tokens).toBeLessThan(0); // the pacer's slot, not a debt
    expect(registry.limiterFor('https://b.test')?.name).toBe('https://b.test');
  });

  it('control: the same request with burst second leaves an idle limiter that gives way', async () => {
    const { clock, registry } = setup({
      maxOriginLimiters: 1,
      default: { initialUnitsPerMinute: 60, burst: 'second' },
    });
    const a = registry.limiterFor('https://a.test') as AdaptiveRateLimiter;
    (await a.acquire(1)).success();
    clock.advance(100);
    expect(registry.limiterFor('https://b.test')?.name).toBe('https://b.test');
  });

  // A TokenBucket that turns free (rate or ceiling Infinity: setRate(Infinity), a shared
  // budget's state lost, an announced ceiling that expired on an unlimited limiter) no longer
  // refills (`refill` skips a free bucket) and keeps the negative `tokens` it had: #stateOf reads
  // a debt for ever, so the limiter is never swept at idleTimeout nor gives way to make room,
  // though it grants everything at once. Fix: a free gate owes nothing (TokenBucket.resize sets
  // tokens to capacity when it turns free, or #stateOf ignores debt when the gate is free).
  it('a limiter in debt whose bucket turns unlimited is swept at idleTimeout', async () => {
    const { clock, registry } = setup({
      maxOriginLimiters: 1,
      idleTimeout: 60_000,
      default: { initialUnitsPerMinute: 60, burst: 'second' },
    });
    const a = registry.limiterFor('https://a.test') as AdaptiveRateLimiter;
    (await a.acquire(30)).success(); // 29 units owed
    a.setRate(Number.POSITIVE_INFINITY); // an operator lifts the limit
    clock.advance(3_600_000); // an hour: far past the debt's 29 s and idleTimeout
    expect((await a.acquire(1_000)).success).toBeTypeOf('function'); // unlimited: grants at once
    clock.advance(3_600_000);
    // a.snapshot().tokens still reads -29 here: a free TokenBucket never refills.
    expect(registry.limiterFor('https://b.test')?.name).not.toBe(OVERFLOW);
  });
});

describe('update() of a limiter with several budgets (src/limiter/adaptive.ts, src/limiter/options.ts)', () => {
  // f79f92d accepts `update({ ...options, maxWait })` (the options the limiter was made with) as
  // the same, but `next` is resolved from the limiter-level fields over #opts, whose rates are
  // the FIRST budget's (its entry overrode the limiter's in the constructor). The limiter-level
  // minUnitsPerMinute / maxUnitsPerMinute (and initialUnitsPerMinute) given again now replace the
  // first budget's own: here the `requests` budget's cap of 60/min silently becomes 100,000/min
  // and the probe may raise it past what the API allows. Before, the same call threw (burst), so
  // nothing changed. Fix: resolve the first budget's own entry again over `next`
  // (`next = resolveLimiterOptions(firstOwn, next)`, as the constructor does), or refuse/ignore
  // limiter-level rate fields equal to the as-made ones, as done for burst and reserve.
  it("update({ ...options, maxWait }) keeps the first budget's own maxUnitsPerMinute", () => {
    const options = {
      clock: new ManualClock(),
      minUnitsPerMinute: 1,
      maxUnitsPerMinute: 100_000,
      burst: 'paced' as const,
      budgets: {
        requests: { initialUnitsPerMinute: 60, maxUnitsPerMinute: 60, burst: 'second' as const },
        tokens: { initialUnitsPerMinute: 6_000 },
      },
    };
    const limiter = new AdaptiveRateLimiter(options);
    expect(limiter.snapshot().maxRate).toBe(60);
    // Either refused as before or accepted as the same; never a changed cap.
    try {
      limiter.update({ ...options, maxWait: 5_000 });
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
    }
    expect(limiter.snapshot().maxRate).toBe(60);
  });

  // 7584dd6 says another custom controller object for a budget is now refused, its methods
  // compared by identity; sameValue compares only own enumerable keys, so a controller whose
  // methods live on its class's prototype reads as {} again, and a different controller (another
  // class) is accepted and ignored, as the JSON comparison did. Fix: compare a budget's
  // `controller` by identity when it is an object (it is z.custom: the parse keeps the instance),
  // not field by field.
  it('update() refuses a budget controller of another class (methods on the prototype)', () => {
    class Halver {
      onThrottled(rate: number) {
        return rate / 2;
      }
      onSuccess(rate: number) {
        return rate;
      }
    }
    class Keeper {
      onThrottled(rate: number) {
        return rate;
      }
      onSuccess(rate: number) {
        return rate;
      }
    }
    const budgets = (controller: object) => ({
      requests: {},
      tokens: { initialUnitsPerMinute: 6_000, controller: controller as RateController },
    });
    const limiter = new AdaptiveRateLimiter({
      clock: new ManualClock(),
      initialUnitsPerMinute: 600,
      budgets: budgets(new Halver()),
    });
    expect(() => limiter.update({ budgets: budgets(new Keeper()) })).toThrow(ConfigError);
  });
});
