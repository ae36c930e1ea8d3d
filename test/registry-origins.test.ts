import { describe, expect, it, vi } from 'vitest';
import { kHoldOrigin } from '../src/internal.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { OVERFLOW, type RateLimiterRegistry } from '../src/registry/index.js';
import { manualRegistry } from './helpers/manual-registry.js';

// Hostile hosts that answer 429 with a long Retry-After must not grow the registry without end,
// nor cost more work per new origin as they pile up; and no pause is ever lost on the way.

const setup = manualRegistry;

/** Makes `origin`'s limiter paused for `ms` by a 429, with nothing queued or in flight after. */
async function pause(registry: RateLimiterRegistry, origin: string, ms = 60_000) {
  const limiter = registry.limiterFor(origin) as AdaptiveRateLimiter;
  (await limiter.acquire()).throttled(ms);
  return limiter;
}

describe('RateLimiterRegistry: paused origins', () => {
  it('drops a paused limiter to make room, keeps its pause as a record, and starts its next limiter paused', async () => {
    const { clock, registry } = setup({ maxOriginLimiters: 1 });
    await pause(registry, 'https://a.test', 60_000);
    clock.advance(10_000);

    registry.limiterFor('https://b.test');
    expect(registry.names()).toEqual(['https://b.test']);

    const again = registry.limiterFor('https://a.test');
    expect(again?.snapshot().pausedUntil).toBe(60_000);
    expect(registry.names()).toEqual(['https://a.test']);
  });

  it('forgets a record whose pause ended: the next limiter starts unpaused', async () => {
    const { clock, registry } = setup({ maxOriginLimiters: 1 });
    await pause(registry, 'https://a.test', 5_000);
    registry.limiterFor('https://b.test');
    clock.advance(5_000);

    expect(registry.limiterFor('https://a.test')?.snapshot().pausedUntil).toBeUndefined();
  });

  it('sends a new origin through the overflow limiter when every limiter looked at must stay', async () => {
    const { registry } = setup({ maxOriginLimiters: 1, maxPausedOrigins: 0 });
    const a = await pause(registry, 'https://a.test', 60_000);

    const b = registry.limiterFor('https://b.test');

    expect(b?.name).toBe(OVERFLOW);
    expect(registry.names()).toEqual(['https://a.test', OVERFLOW]);
    expect(registry.get(OVERFLOW)).toBe(b);
    expect(registry.configFor(OVERFLOW)).toEqual({});
    // a keeps its limiter and its pause.
    expect(registry.limiterFor('https://a.test')).toBe(a);
    expect(a.snapshot().pausedUntil).toBe(60_000);
  });

  it("gives a recorded pause that finds no room a limiter of its own in the record's place; the overflow stays unpaused", async () => {
    const { registry } = setup({ maxOriginLimiters: 1, maxPausedOrigins: 1 });
    await pause(registry, 'https://a.test', 60_000);
    await pause(registry, 'https://b.test', 30_000); // a's pause recorded
    // c finds b paused and the records full: the overflow.
    const c = registry.limiterFor('https://c.test');
    expect(c?.name).toBe(OVERFLOW);
    // b is held by a request in flight: a's pause finds no room.
    const release = registry[kHoldOrigin]('https://b.test', registry.get('https://b.test')!);

    const a = registry.limiterFor('https://a.test');

    expect(a?.name).toBe('https://a.test');
    expect(a?.snapshot().pausedUntil).toBe(60_000);
    // Before, a's requests went through the overflow limiter, paused for a's 60 s: c with them.
    expect(c?.snapshot().pausedUntil).toBeUndefined();
    // The record became the limiter: two limiters and no record, within 1 + 1.
    expect(registry.names().sort()).toEqual(['https://a.test', 'https://b.test', OVERFLOW].sort());
    expect(registry.limiterFor('https://a.test')).toBe(a);
    release();
  });

  it("brings the limiters back under maxOriginLimiters after one was made in a record's place", () => {
    const { registry } = setup({ maxOriginLimiters: 1, maxPausedOrigins: 1 });
    const perOrigin = () => registry.names().filter((n) => n !== OVERFLOW);
    const pauseOf = (origin: string) => registry.limiterFor(origin)?.pauseFor(600_000);
    const holdAll = () => perOrigin().map((k) => registry[kHoldOrigin](k, registry.get(k)!));
    pauseOf('https://a.test');
    pauseOf('https://b.test'); // a's pause recorded
    let releases = holdAll();
    pauseOf('https://a.test'); // no room: a's limiter in its record's place, over the cap
    for (const release of releases) release();
    expect(perOrigin()).toEqual(['https://b.test', 'https://a.test']);

    // c comes: b's pause becomes a record and the pool is still at its cap, so a's pause, with
    // the records full, stays; c shares the overflow limiter. Before: c got a limiter (3 kept in
    // all: a, c and b's record, where 1 + 1 are allowed), and the excess stayed.
    pauseOf('https://c.test');
    expect(perOrigin()).toEqual(['https://a.test']);

    releases = holdAll();
    pauseOf('https://b.test'); // b's record, no room: its limiter in the record's place
    for (const release of releases) release();
    pauseOf('https://d.test');
    expect(perOrigin()).toHaveLength(1);
  });

  it('keeps at most maxOriginLimiters limiters however many origins are paused', async () => {
    const { registry } = setup({ maxOriginLimiters: 100 });
    for (let i = 0; i < 2_000; i++) await pause(registry, `https://host-${i}.test`);

    expect(registry.names()).toHaveLength(100);
    // Every pause is still there: the oldest origin's next limiter starts paused.
    expect(registry.limiterFor('https://host-0.test')?.snapshot().pausedUntil).toBe(60_000);
  });

  it('looks at a bounded number of limiters per new origin, however many are paused', async () => {
    const { registry } = setup({ maxOriginLimiters: 100 });
    for (let i = 0; i < 2_000; i++) await pause(registry, `https://host-${i}.test`);
    const snapshot = vi.spyOn(AdaptiveRateLimiter.prototype, 'snapshot');

    for (let i = 0; i < 100; i++) registry.limiterFor(`https://new-${i}.test`);

    // 16 looked at, at most, per new origin (a paused-only limiter goes at the first look).
    expect(snapshot.mock.calls.length).toBeLessThanOrEqual(100 * 16);
    snapshot.mockRestore();
  });

  it('never drops a limiter held by a request in flight to make room', () => {
    const { registry } = setup({ maxOriginLimiters: 2 });
    const v = registry.limiterFor('https://v.test')!;
    const release = registry[kHoldOrigin]('https://v.test', v);
    for (const host of ['a', 'b', 'c']) registry.limiterFor(`https://${host}.test`);

    expect(registry.limiterFor('https://v.test')).toBe(v);
    release();
  });
});

describe('RateLimiterRegistry: an origin in debt', () => {
  it('keeps a limiter whose bucket is in debt, as a busy one, until the debt is refilled: a new origin shares the overflow limiter', async () => {
    // 60 a minute, one unit a second: a call of 30 units leaves 29 owed, 29 s to refill.
    const { clock, registry } = setup({ maxOriginLimiters: 1, default: { initialUnitsPerMinute: 60 } });
    const a = registry.limiterFor('https://a.test') as AdaptiveRateLimiter;
    (await a.acquire(30)).success();
    expect(a.snapshot().tokens).toBeLessThan(-28);

    // Before: a, with nothing queued or in flight, was dropped as idle, and a's next limiter
    // started with a full bucket, its debt forgotten.
    expect(registry.limiterFor('https://b.test')?.name).toBe(OVERFLOW);
    expect(registry.limiterFor('https://a.test')).toBe(a);

    clock.advance(30_000); // refilled: a is idle and gives way
    expect(registry.limiterFor('https://c.test')?.name).toBe('https://c.test');
    expect(registry.names()).not.toContain('https://a.test');
  });
});
