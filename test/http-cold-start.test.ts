import { describe, expect, it } from 'vitest';
import { agentWith, cleanups, get, limit } from './helpers/interceptor-fixtures.js';
import { startQuotaServer } from './helpers/quota-server.js';

describe('a cold burst through the interceptor with no options (real server)', () => {
  it('hands no caller a 429: the slow start sends rounds, the first cut starts from what was accepted', async () => {
    // A bucket of 10 and Retry-After in whole seconds, as the quick-start case (200 calls at
    // once against 600/min), at 6,000 requests/min so that it takes a few seconds.
    const server = await startQuotaServer(6_000, 10);
    cleanups.push(() => server.close());
    const agent = agentWith(limit());
    const statuses = await Promise.all(
      Array.from({ length: 200 }, (_, i) => get(agent, `${server.url}${i}`)),
    );
    // Every caller got its answer, none a 429 (each request has 4 attempts).
    expect(statuses.filter((s) => s.status !== 200)).toEqual([]);
    expect(server.accepted).toBe(200);
    // All at once, 190 of the first 200 sends would be refused; the slow start's rounds and a first
    // cut from the accepted rate (not from the burst's send rate) keep it to a few dozen: a count
    // that depends on real time, held on the virtual clock by test/simulate-bounds.test.ts.
    console.log(`cold burst: ${server.throttled} 429s drawn for 200 requests`);
  });
});
