import { inspect } from 'node:util';
import { Agent, request } from 'undici';
// From the package's root, as a user imports it (it loads the NODE_DEBUG log).
import { adaptiveRateLimit, type RateLimiterRegistry, rateLimitedFetch } from '../../src/index.js';
import { RateLimitedServer } from './rate-limited-server.js';

// Secrets planted where a user puts them (URLs, headers, config), and a record of everything the
// library printed or emitted meanwhile. No vitest import: the NODE_DEBUG check runs these plants
// in a child process too.

/** Every planted secret contains this mark; nothing the library prints may. */
export const MARK = 'ZQXsecret';

/** A secret for one place, such as `secret('origin')` -> `ZQXsecret-origin-7f3a`. */
export function secret(place: string): string {
  return `${MARK}-${place}-7f3a`;
}

/** Everything the library printed or emitted, as text, with where it came from. */
export class Printed {
  readonly items: { where: string; text: string }[] = [];

  add(where: string, value: unknown): void {
    const text =
      typeof value === 'string'
        ? value
        : `${inspect(value, { depth: 10, showHidden: false })}\n${json(value)}`;
    this.items.push({ where, text });
  }

  /** An error: its message, its inspection (stack, issues, received, cause) and its JSON. */
  error(where: string, error: unknown): void {
    this.add(`${where} (error)`, error instanceof Error ? `${error.message}\n${error.stack}` : error);
    this.add(`${where} (error fields)`, error);
  }

  /** Runs `fn`, which must throw (or reject); records the error. */
  async throws(where: string, fn: () => unknown): Promise<void> {
    try {
      await fn();
    } catch (error) {
      this.error(where, error);
      return;
    }
    throw new Error(`${where}: expected an error, none was thrown`);
  }

  /** The items (from the `from`th on) that carry a planted secret, each as `where: text`. */
  leaks(from = 0): string[] {
    return this.items
      .slice(from)
      .filter((i) => i.text.includes(MARK))
      .map((i) => `${i.where}: ${i.text.slice(0, 400)}`);
  }

  count(prefix: string): number {
    return this.items.filter((i) => i.where.startsWith(prefix)).length;
  }
}

function json(value: unknown): string {
  try {
    return JSON.stringify(value) ?? '';
  } catch {
    return '';
  }
}

/** The headers a request carries its credentials in, each with its own secret. */
function credentialHeaders(): Record<string, string> {
  return {
    authorization: `Bearer ${secret('authorization')}`,
    'proxy-authorization': `Basic ${secret('proxy-authorization')}`,
    cookie: `session=${secret('cookie')}`,
    'x-api-key': secret('x-api-key'),
    'api-key': secret('api-key'),
  };
}

/** A path with a secret in its query. */
export const SECRET_PATH = `/v1/items?key=${secret('query')}&page=2`;

function snapshots(printed: Printed, where: string, registry: RateLimiterRegistry, origin: string): void {
  const limiter = registry.limiterFor(origin);
  if (limiter !== undefined) printed.add(`${where} snapshot()`, limiter.snapshot());
}

/**
 * Requests with a secret in their query and in each credential header, through the undici
 * interceptor and the fetch wrapper, against a server that lets one through, throttles the next
 * (cut, pause) and so makes the limiter refuse the third (its wait passes `maxWait: 0`), in both
 * rejection modes; then a `units` callback that returns a bad value for such a request. Records
 * errors, refusal answers and snapshots; returns what the server saw (each request did carry its
 * secrets).
 */
export async function requestPlants(printed: Printed): Promise<{ sent: string[] }> {
  const sent: string[] = [];
  for (const rejection of ['error', 'response'] as const) {
    const server = await RateLimitedServer.start({ capacity: 1, retryAfter: '1' });
    const url = `${server.origin}${SECRET_PATH}`;
    const headers = credentialHeaders();
    const options = {
      limiters: { api: { origins: [server.origin], maxWait: 0 } },
      maxAttempts: 1,
      rejection,
    };

    // The undici interceptor.
    const interceptor = adaptiveRateLimit(options);
    const agent = new Agent().compose(interceptor);
    for (let i = 0; i < 3; i++) {
      try {
        const res = await request(url, { dispatcher: agent, headers });
        const body = await res.body.text();
        if (res.headers['x-adaptive-rate-limit'] !== undefined) {
          printed.add(`interceptor (${rejection}) refusal`, {
            status: res.statusCode,
            headers: res.headers,
            body,
          });
        }
      } catch (error) {
        printed.error(`interceptor (${rejection}) request ${i + 1}`, error);
      }
    }
    snapshots(printed, `interceptor (${rejection})`, interceptor.registry, server.origin);
    const unitsInterceptor = adaptiveRateLimit({ ...options, units: () => Number.NaN });
    const unitsAgent = new Agent().compose(unitsInterceptor);
    await printed.throws(`interceptor (${rejection}) units`, () =>
      request(url, { dispatcher: unitsAgent, headers }),
    );

    // The fetch wrapper, with Node's own fetch.
    const fetch = rateLimitedFetch(options);
    server.refill(1);
    for (let i = 0; i < 3; i++) {
      try {
        const res = await fetch(i === 0 ? new Request(url, { headers }) : url, { headers });
        const body = await res.text();
        if (res.headers.get('x-adaptive-rate-limit') !== null) {
          printed.add(`fetch (${rejection}) refusal`, {
            status: res.status,
            headers: Object.fromEntries(res.headers),
            body,
          });
        }
      } catch (error) {
        printed.error(`fetch (${rejection}) request ${i + 1}`, error);
      }
    }
    snapshots(printed, `fetch (${rejection})`, fetch.registry, server.origin);
    const unitsFetch = rateLimitedFetch({ ...options, units: () => -1 });
    await printed.throws(`fetch (${rejection}) units`, () => unitsFetch(url, { headers }));

    sent.push(...server.received.map((r) => `${r.path} ${JSON.stringify(r.headers)}`));
    unitsFetch.close();
    fetch.close();
    await unitsAgent.close();
    await agent.close();
    unitsInterceptor.close();
    interceptor.close();
    await server.close();
  }
  return { sent };
}
