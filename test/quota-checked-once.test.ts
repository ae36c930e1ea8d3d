import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import type { AnnouncedQuota } from '../src/limiter/types.js';
import { agentWith, cleanups, get, limit, NEVER_BINDS, serve } from './helpers/interceptor-fixtures.js';

// Regression: the quotas an answer announced were checked twice on their way to the limiter: where
// the route's reader read them (a profile's without the numbers no quota has, `quotaFromHeaders`'
// refused by name), and again by the permit they settled, every field of every quota (about
// 0.1 µs an answer for two quotas). They are checked once, where they are read. The count: a
// quota whose fields count their reads, returned by `quotaFromHeaders`; each field is read once by
// the check and once by the limiter that learns from it (3 times before).

/** A quota whose numeric fields count their reads in `reads`. */
function countedQuota(reads: Record<string, number>, budget?: string): AnnouncedQuota {
  const values: Record<string, unknown> = {
    policy: 'minute',
    remaining: 5_000,
    resetMs: 30_000,
    limit: 10_000,
    windowMs: 60_000,
    ...(budget !== undefined && { budget }),
  };
  const quota = {};
  for (const [field, value] of Object.entries(values)) {
    Object.defineProperty(quota, field, {
      enumerable: true,
      get: () => {
        reads[field] = (reads[field] ?? 0) + 1;
        return value;
      },
    });
  }
  return quota as AnnouncedQuota;
}

const NUMBERS = ['remaining', 'resetMs', 'limit', 'windowMs'] as const;

/** Reads of each numeric field. */
const readsOf = (reads: Record<string, number>) => NUMBERS.map((field) => reads[field] ?? 0);

describe("an answer's announced quotas are checked once", () => {
  it('interceptor: each field of a quotaFromHeaders quota is read twice an answer (the check, the limiter), not 3 times', async () => {
    const server = await serve({ capacity: 1_000 });
    const reads: Record<string, number> = {};
    const rl = limit({
      clock: new ManualClock(),
      default: { ...NEVER_BINDS, headers: false, quotaFromHeaders: () => countedQuota(reads) },
    });
    const agent = agentWith(rl);

    for (let i = 0; i < 2; i++) {
      for (const field of Object.keys(reads)) delete reads[field];
      expect((await get(agent, `${server.origin}/${i}`)).status).toBe(200);
      expect(readsOf(reads)).toEqual([2, 2, 2, 2]);
    }
  });

  it('fetch wrapper: the same', async () => {
    const server = await serve({ capacity: 1_000 });
    const reads: Record<string, number> = {};
    const f = rateLimitedFetch({
      clock: new ManualClock(),
      default: { ...NEVER_BINDS, headers: false, quotaFromHeaders: () => countedQuota(reads) },
    });
    cleanups.push(() => f.close());

    for (let i = 0; i < 2; i++) {
      for (const field of Object.keys(reads)) delete reads[field];
      const response = await f(`${server.origin}/${i}`);
      await response.text();
      expect(response.status).toBe(200);
      expect(readsOf(reads)).toEqual([2, 2, 2, 2]);
    }
  });

  it("an LLM API's limiter (a permit per budget): checked once, not 3 times (the reader, the call's permit, its budget's)", async () => {
    const server = await serve({ capacity: 1_000 });
    const reads: Record<string, number> = {};
    const rl = limit({
      clock: new ManualClock(),
      default: { ...NEVER_BINDS, api: 'openai', headers: false, quotaFromHeaders: () => countedQuota(reads) },
    });
    const agent = agentWith(rl);

    for (let i = 0; i < 2; i++) {
      for (const field of Object.keys(reads)) delete reads[field];
      const answer = await get(agent, `${server.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(answer.status).toBe(200);
      // One read each by the check; the rest by the limiter's uses (`remaining` and `limit` more
      // than once: the token budget reads them too). [6, 4, 7, 4] before.
      expect(readsOf(reads)).toEqual([4, 2, 5, 2]);
    }
  });

  it('a quotaFromHeaders quota that breaks the contract is still refused by name', async () => {
    const server = await serve({ capacity: 1_000 });
    const rl = limit({
      clock: new ManualClock(),
      default: {
        ...NEVER_BINDS,
        headers: false,
        quotaFromHeaders: () => ({ policy: 'minute', remaining: -1 }) as AnnouncedQuota,
      },
    });

    const error = await get(agentWith(rl), `${server.origin}/`).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'ERR_INVALID_CALLBACK_VALUE',
      message: expect.stringContaining('remaining -1 is not a finite number >= 0'),
    });
  });
});
