import { describe, expect, it } from 'vitest';
import { type AttemptPlan, runAttempts } from '../src/attempt-loop.js';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { advanceUntil } from './helpers/interceptor-fixtures.js';

// The attempt loop and a throttled answer it holds while the retry goes: dropped before the
// retry is sent when it holds a connection, kept until the retry is answered when it holds
// nothing, and given to the caller when the retry's transport was closed meanwhile.

const closed = Object.assign(new Error('The client is destroyed'), { code: 'UND_ERR_DESTROYED' });

/** A plan whose attempt 1 is throttled (answer '429') and attempt 2 does `second`; every step logged. */
function plan(keepable: boolean, second: () => Promise<string>, clock = new ManualClock()) {
  const limiter = new AdaptiveRateLimiter({
    clock,
    slowStart: false,
    initialUnitsPerMinute: 6_000_000,
  });
  const log: string[] = [];
  const p: AttemptPlan<string> = {
    limiter,
    units: 1,
    maxAttempts: 2,
    send: async (attempt) => {
      log.push(`send ${attempt}`);
      return attempt === 1 ? '429' : second();
    },
    classify: (r) => (r === '429' ? { kind: 'throttled' } : { kind: 'success' }),
    keepable: () => keepable,
    transportClosed: (error) => error === closed,
    discard: (r) => log.push(`discard ${r}`),
  };
  return { limiter, log, plan: p };
}

describe('runAttempts: the held answer while its retry goes', () => {
  it('holding a connection: dropped before the retry is sent', async () => {
    const { log, plan: p } = plan(false, async () => 'ok');
    expect(await runAttempts(p)).toBe('ok');
    expect(log).toEqual(['send 1', 'discard 429', 'send 2']);
  });

  it('holding nothing: kept until the retry is answered, then dropped', async () => {
    const { log, plan: p } = plan(true, async () => 'ok');
    expect(await runAttempts(p)).toBe('ok');
    expect(log).toEqual(['send 1', 'send 2', 'discard 429']);
  });

  it("the retry's transport closed: the caller gets the held answer", async () => {
    const { limiter, log, plan: p } = plan(true, () => Promise.reject(closed));
    expect(await runAttempts(p)).toBe('429');
    expect(log).toEqual(['send 1', 'send 2']);
    expect(limiter.snapshot()).toMatchObject({ queued: 0, throttles: 1 });
  });

  it('another error of the retry: it goes to the caller, the held answer dropped', async () => {
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    const { log, plan: p } = plan(true, () => Promise.reject(reset));
    await expect(runAttempts(p)).rejects.toBe(reset);
    expect(log).toEqual(['send 1', 'send 2', 'discard 429']);
  });

  it('a held answer that holds a connection is not kept, even when the transport closes', async () => {
    const { log, plan: p } = plan(false, () => Promise.reject(closed));
    await expect(runAttempts(p)).rejects.toBe(closed);
    expect(log).toEqual(['send 1', 'discard 429', 'send 2']);
  });
});

describe('runAttempts: a retry waits for its transport before it goes', () => {
  /** `plan` whose throttled answer asks `retryAfterMs`, with `beforeRetry` logged. */
  function planWithBeforeRetry(retryAfterMs: number) {
    const clock = new ManualClock();
    const made = plan(false, async () => 'ok', clock);
    made.plan.classify = (r) => (r === '429' ? { kind: 'throttled', retryAfterMs } : { kind: 'success' });
    made.plan.beforeRetry = async () => {
      made.log.push('before retry');
    };
    return { ...made, clock };
  }

  it('granted at once (Retry-After: 0): beforeRetry runs before the drop and the send', async () => {
    const { log, plan: p } = planWithBeforeRetry(0);
    expect(await runAttempts(p)).toBe('ok');
    expect(log).toEqual(['send 1', 'before retry', 'discard 429', 'send 2']);
  });

  // A retry granted by the line (its permit waited) may be granted in the turn another answer
  // ended; it waits for its transport as one granted at once does.
  it('granted after a wait in the line: beforeRetry runs too', async () => {
    const { clock, log, limiter, plan: p } = planWithBeforeRetry(1_000);
    const waited: number[] = [];
    limiter.on('acquired', (event) => waited.push(event.waited));
    const run = runAttempts(p);
    await advanceUntil(clock, () => log.includes('send 2'), 'the retry sent');
    expect(await run).toBe('ok');
    expect(waited).toEqual([0, 1_000]);
    expect(log).toEqual(['send 1', 'before retry', 'discard 429', 'send 2']);
  });
});
