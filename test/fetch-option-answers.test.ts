import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { InvalidCallbackValueError } from '../src/errors.js';
import { type RateLimitedFetch, rateLimitedFetch } from '../src/http/fetch.js';

// The `fetch` option is the caller's: one that returns something else than a response failed the
// call with a TypeError from inside the wrapper ("Cannot destructure property 'status'", "send(...)
// .catch is not a function"), or answered a pass-through call with that value. A polyfill's
// response whose body is a Node stream (node-fetch) failed a throttled call with "getReader is
// not a function".

const API = 'https://api.example.com';
const NEVER_BINDS = { initialUnitsPerMinute: 6_000_000, minUnitsPerMinute: 6_000_000 };

const made: RateLimitedFetch[] = [];
afterEach(() => {
  for (const f of made.splice(0)) f.close();
});

function wrapper(fetch: unknown): RateLimitedFetch {
  const f = rateLimitedFetch({
    fetch: fetch as typeof globalThis.fetch,
    clock: new ManualClock(),
    default: NEVER_BINDS,
  });
  made.push(f);
  return f;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

describe('rateLimitedFetch: what the fetch option returns', () => {
  const returns: [string, () => unknown, string][] = [
    ['undefined', () => undefined, 'undefined'],
    ['a promise of undefined', async () => undefined, 'undefined'],
    ['null', async () => null, 'null'],
    ['a string', async () => 'ok', 'string'],
    ['an object without status and headers', () => ({ ok: true }), 'an object that is not a Response'],
  ];
  for (const url of [`${API}/items`, 'data:,hello']) {
    it.each(returns)(
      `${url.slice(0, 5)}: a fetch that returns %s fails the call, naming fetch`,
      async (_, fetch, what) => {
        const f = wrapper(fetch);
        const error = await rejection(f(url));
        expect(error).toBeInstanceOf(InvalidCallbackValueError);
        expect(error).toMatchObject({ callback: 'fetch', code: 'ERR_INVALID_CALLBACK_VALUE' });
        expect((error as Error).message).toBe(
          `the fetch option returned ${what}; it must return a Response or a promise of one`,
        );
      },
    );
  }

  it('a fetch that throws at once: its error, as a rejection', async () => {
    const boom = new Error('boom');
    const f = wrapper(() => {
      throw boom;
    });
    await expect(f(`${API}/items`)).rejects.toBe(boom);
  });

  it("a polyfill's response with a Node stream body is retried after a 429", async () => {
    const bodies: Readable[] = [];
    const answers = [429, 200];
    const f = wrapper(async () => {
      const body = Readable.from([Buffer.from('answer')]);
      bodies.push(body);
      const status = answers.shift() ?? 200;
      return {
        status,
        ok: status < 300,
        headers: new Headers({ 'retry-after': '0' }),
        body,
        url: `${API}/items`,
      };
    });

    const response = await f(`${API}/items`);

    expect(response.status).toBe(200);
    expect(bodies).toHaveLength(2);
    expect(bodies[0]?.destroyed).toBe(true);
    expect(f.registry.limiterFor(API)?.snapshot().throttles).toBe(1);
  });
});
