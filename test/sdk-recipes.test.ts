import { afterEach, describe, expect, it } from 'vitest';
import { RateLimitRejectedError } from '../src/errors.js';
import { headerLookup } from '../src/headers.js';
import { headersOfError, statusOfError } from '../src/wrap/sdk-errors.js';
import { RateLimitedServer, type RateLimitedServerOptions } from './helpers/rate-limited-server.js';
import { type RecipeClient, recipes } from './helpers/sdk-recipes.js';

// The recipes of docs/sdks.md, each with the real SDK against a local rate-limited node:http
// server. Counts only: requests the server saw, 429s the callers saw, throttles the limiter saw.

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

/** Limits that never bind: these tests count attempts and must not wait in real time. */
const NEVER_BINDS = { initialUnitsPerMinute: 6_000_000, minUnitsPerMinute: 6_000_000 };

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(options: RateLimitedServerOptions, make: (origin: string) => RecipeClient) {
  const server = await RateLimitedServer.start(options);
  cleanups.push(() => server.close());
  const client = make(server.origin);
  cleanups.push(() => client.close());
  return { server, client };
}

const header = (error: unknown, name: string) => {
  const headers = headersOfError(error);
  return headers === undefined ? undefined : headerLookup(headers)(name);
};

describe.each(recipes)('recipe: $name', (recipe) => {
  it(`retries a throttled call in one layer only (${recipe.attemptsPerCall} attempts), and the caller sees the last 429`, async () => {
    // Two tokens, never refilled; every 429 asks for a 1 ms wait.
    const { server, client } = await setup(
      {
        capacity: 2,
        throttleStatus: recipe.throttleStatus,
        retryAfter: '0',
        headers: { 'retry-after-ms': '1' },
      },
      (origin) => recipe.make(origin, { limiter: NEVER_BINDS }),
    );

    const results = await Promise.allSettled([1, 2, 3, 4].map((i) => client.call(`/bucket/key${i}`)));

    const rejected = results.flatMap((r) => (r.status === 'rejected' ? [r.reason] : []));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
    expect(rejected.map(statusOfError)).toEqual([recipe.throttleStatus, recipe.throttleStatus]);
    expect(rejected.map((e) => header(e, 'x-adaptive-rate-limit'))).toEqual([undefined, undefined]);
    expect(server.requests).toBe(2 + 2 * recipe.attemptsPerCall);
    expect(client.registry.get('api')?.snapshot().throttles).toBe(server.throttled);
  });

  it.skipIf(recipe.retries === 'sdk')(
    'hands back the 429 it cannot retry within maxWait, and answers a refused call without sending it',
    async () => {
      const { server, client } = await setup(
        { capacity: 0, throttleStatus: recipe.throttleStatus, retryAfter: '600' },
        (origin) => recipe.make(origin),
      );

      const first = await client.call('/bucket/first').catch((e: unknown) => e);
      const refused = await client.call('/bucket/refused').catch((e: unknown) => e);

      expect(statusOfError(first)).toBe(recipe.throttleStatus);
      expect(header(first, 'x-adaptive-rate-limit')).toBeUndefined();
      if (recipe.name.startsWith('got')) {
        // wrap has no response to make: the typed error.
        expect(refused).toBeInstanceOf(RateLimitRejectedError);
        expect(refused).toMatchObject({ reason: 'max-wait' });
      } else {
        expect(statusOfError(refused)).toBe(429);
        expect(header(refused, 'x-adaptive-rate-limit')).toBe('rejected;reason=max-wait');
        expect(header(refused, 'retry-after')).toBe('600');
      }
      expect(server.requests).toBe(1);
      expect(client.registry.get('api')?.snapshot()).toMatchObject({ throttles: 1, cuts: 1 });
    },
  );
});
