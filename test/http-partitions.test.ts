import diagnosticsChannel from 'node:diagnostics_channel';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../src/clock.js';
import { DIAGNOSTICS_CHANNELS } from '../src/diagnostics.js';
import { InvalidCallbackValueError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { credentialPartition } from '../src/http/partition.js';
import { cleanups, installGlobal, keepGlobalDispatcher } from './helpers/interceptor-fixtures.js';
import { RateLimitedServer, until } from './helpers/rate-limited-server.js';

// Limiters per credential: one customer's 429 and Retry-After never stall another's requests.

const TOKEN_A = 'Bearer sk-customer-a-0123456789abcdef';
const TOKEN_B = 'Bearer sk-customer-b-fedcba9876543210';

keepGlobalDispatcher();

/** An API that limits per token: customer A's token is exhausted (429, Retry-After: 20), B's is not. */
async function perTokenApi(exhausted = TOKEN_A): Promise<RateLimitedServer> {
  const server = await RateLimitedServer.start({
    respond: (req: IncomingMessage, res: ServerResponse) => {
      if (req.headers.authorization !== exhausted) return false;
      res.writeHead(429, { 'retry-after': '20' }).end('token exhausted');
      return true;
    },
  });
  cleanups.push(() => server.close());
  return server;
}

/** A's fetch, left waiting; aborted after the test. */
function customerA(url: string): { done: Promise<unknown>; settled: () => boolean } {
  const abort = new AbortController();
  let settled = false;
  const done = fetch(url, { headers: { authorization: TOKEN_A }, signal: abort.signal }).then(
    (r) => {
      settled = true;
      return r;
    },
    (e: unknown) => {
      settled = true;
      return e;
    },
  );
  cleanups.push(async () => {
    abort.abort();
    await done;
  });
  return { done, settled: () => settled };
}

const statusesOf = (server: RateLimitedServer, token: string) =>
  server.received.filter((r) => r.headers.authorization === token).map((r) => r.status);

describe('partitions by credential, through the global dispatcher with no options', () => {
  it("answers B's calls while A's token is paused, and A still waits for its Retry-After", async () => {
    const server = await perTokenApi();
    const rl = installGlobal();

    const a = customerA(`${server.origin}/a`);
    await until(() => statusesOf(server, TOKEN_A).length === 1, "A's first answer");
    await until(
      () => [...rl.registry.names()].some((n) => rl.registry.get(n)?.snapshot().pausedUntil !== undefined),
      "A's pause",
    );

    const b = await Promise.all(
      [1, 2, 3].map((i) => fetch(`${server.origin}/b/${i}`, { headers: { authorization: TOKEN_B } })),
    );

    expect(b.map((r) => r.status)).toEqual([200, 200, 200]);
    // A was sent once, answered 429, and its retry waits for the 20 s pause: not sent, not settled.
    expect(statusesOf(server, TOKEN_A)).toEqual([429]);
    expect(a.settled()).toBe(false);
    // B's calls reached the server after A's 429.
    expect(server.received.map((r) => r.headers.authorization)).toEqual([TOKEN_A, TOKEN_B, TOKEN_B, TOKEN_B]);

    // A, the first credential seen, meters through the origin's own limiter; B through its own.
    const limiterOfA = rl.registry.get(server.origin);
    const pausedFor = (limiterOfA?.snapshot().pausedUntil ?? 0) - systemClock.now();
    expect(pausedFor).toBeGreaterThan(15_000);
    const partitions = rl.registry.names().filter((n) => n.startsWith(`${server.origin}#`));
    expect(partitions).toHaveLength(1);
    expect(rl.registry.get(partitions[0] as string)?.snapshot()).toMatchObject({
      pausedUntil: undefined,
      throttles: 0,
    });
  });

  it("sends A's retry once A's Retry-After has passed, on the clock, while B was never held", async () => {
    const clock = new ManualClock();
    const server = await perTokenApi();
    const rl = installGlobal({ clock });

    const a = customerA(`${server.origin}/a`);
    await until(() => statusesOf(server, TOKEN_A).length === 1, "A's first answer");
    const b = await fetch(`${server.origin}/b`, { headers: { authorization: TOKEN_B } });
    expect(b.status).toBe(200);

    expect(rl.registry.get(server.origin)?.snapshot().pausedUntil).toBe(clock.now() + 20_000);
    clock.advance(19_999);
    await new Promise((resolve) => setImmediate(resolve));
    expect(statusesOf(server, TOKEN_A)).toEqual([429]);
    clock.advance(1);
    await until(() => statusesOf(server, TOKEN_A).length === 2, "A's retry after its pause");
    expect(a.settled()).toBe(false);
  });

  it('keeps one limiter for the origin when the requests carry no credential, as before', async () => {
    const server = await perTokenApi();
    const rl = installGlobal();

    const r = await fetch(`${server.origin}/public`);

    expect(r.status).toBe(200);
    expect(rl.registry.names()).toEqual([server.origin]);
  });

  it('shows partitions by short id or partitionName, never by the credential', async () => {
    const server = await perTokenApi();
    const seen: unknown[] = [];
    const listen = (message: unknown) => seen.push(message);
    for (const channel of Object.values(DIAGNOSTICS_CHANNELS)) diagnosticsChannel.subscribe(channel, listen);
    cleanups.push(() => {
      for (const channel of Object.values(DIAGNOSTICS_CHANNELS))
        diagnosticsChannel.unsubscribe(channel, listen);
    });
    const rl = installGlobal({
      partitionName: (r) => (r.headers.authorization === TOKEN_B ? 'customer-b' : undefined),
    });
    rl.registry.on('added', (e) => seen.push({ added: e.name, partition: e.partition }));

    const a = customerA(`${server.origin}/a`);
    await until(() => statusesOf(server, TOKEN_A).length === 1, "A's first answer");
    await fetch(`${server.origin}/b`, { headers: { authorization: TOKEN_B } });

    const snapshots = rl.registry.names().map((n) => rl.registry.get(n)?.snapshot());
    const shown = JSON.stringify([rl.registry.names(), snapshots, seen]);
    for (const secret of ['customer-a-0123456789abcdef', 'customer-b-fedcba9876543210']) {
      expect(shown).not.toContain(secret);
    }
    const names = snapshots.map((s) => s?.name);
    expect(names).toEqual([server.origin, `${server.origin}#customer-b`]);
    expect(rl.registry.names()[1]).toMatch(/#[A-Za-z0-9_-]{12}$/);
    expect(seen.filter((e) => (e as { partition?: string }).partition !== undefined)).toHaveLength(1);
    expect(a.settled()).toBe(false);
  });
});

describe('partition options', () => {
  it("partitions by a partition function's parts: a limiter per model within a credential", async () => {
    const server = await perTokenApi('none');
    const rl = installGlobal({
      partition: (r) => [...(credentialPartition(r) ?? []), r.path.split('/')[2]],
    });

    for (const path of ['/m/gpt', '/m/gpt', '/m/mini']) {
      await fetch(`${server.origin}${path}`, { headers: { authorization: TOKEN_A } });
    }
    await fetch(`${server.origin}/m/gpt`, { headers: { authorization: TOKEN_B } });

    // The first (A, gpt) meters through the origin's limiter; the others through their own.
    expect(rl.registry.names().filter((n) => n.startsWith(`${server.origin}#`))).toHaveLength(2);
  });

  it('turns the default off with partitionBy: false (an API that limits per account across keys)', async () => {
    const server = await perTokenApi('none');
    const rl = installGlobal({ default: { partitionBy: false } });

    await fetch(`${server.origin}/a`, { headers: { authorization: TOKEN_A } });
    await fetch(`${server.origin}/b`, { headers: { authorization: TOKEN_B } });

    expect(rl.registry.names()).toEqual([server.origin]);
  });

  it('partitions a named limiter by the headers it names, in any case', async () => {
    const server = await perTokenApi('none');
    const rl = installGlobal({
      limiters: { api: { origins: [server.origin], partitionBy: ['X-Tenant'] } },
    });

    for (const tenant of ['t1', 't2', 't1']) {
      await fetch(`${server.origin}/x`, { headers: { 'x-tenant': tenant, authorization: TOKEN_A } });
    }
    await fetch(`${server.origin}/x`);

    expect(rl.registry.names().filter((n) => n.startsWith('api#'))).toHaveLength(1);
    expect(rl.registry.configFor(rl.registry.names().find((n) => n.startsWith('api#')) as string)).toBe(
      rl.registry.configFor('api'),
    );
  });

  it('fails a request whose partition function returns a bad key, without showing it', async () => {
    const server = await perTokenApi('none');
    installGlobal({ partition: () => 42 as unknown as string });

    const error = await fetch(`${server.origin}/x?token=secret`).catch((e: Error) => e.cause);

    expect(error).toBeInstanceOf(InvalidCallbackValueError);
    expect(String((error as Error).message)).not.toContain('secret');
    expect(server.received).toHaveLength(0);
  });

  it('says a partition function that returns a Promise cannot be async', async () => {
    const server = await perTokenApi('none');
    installGlobal({ partition: (async () => 'tenant') as unknown as () => string });

    const error = await fetch(`${server.origin}/x`).catch((e: Error) => e.cause);

    expect(error).toBeInstanceOf(InvalidCallbackValueError);
    expect(String((error as Error).message)).toMatch(
      /returned a Promise \(partition runs as the request is sent: it cannot be async\)/,
    );
    expect(server.received).toHaveLength(0);
  });

  it('caps requests in flight per partition, or per origin with maxConcurrentPer', async () => {
    const held: ServerResponse[] = [];
    const server = await RateLimitedServer.start({
      respond: (_req, res) => {
        held.push(res);
        return true;
      },
    });
    cleanups.push(() => server.close());
    const release = () => {
      for (const res of held.splice(0)) res.writeHead(200).end('ok');
    };
    cleanups.push(release);
    for (const [per, expected] of [
      ['partition', 2],
      ['origin', 1],
    ] as const) {
      const rl = installGlobal({ default: { maxConcurrent: 1, maxConcurrentPer: per } });
      const before = server.received.length;
      const calls = [TOKEN_A, TOKEN_B, TOKEN_A, TOKEN_B].map((token) =>
        fetch(`${server.origin}/${per}`, { headers: { authorization: token } }).then((r) => r.text()),
      );
      await until(() => server.received.length - before >= expected, 'requests in flight');
      await new Promise((resolve) => setImmediate(resolve));
      expect(server.received.length - before).toBe(expected);
      while (server.received.length - before < 4) {
        release();
        await new Promise((resolve) => setImmediate(resolve));
      }
      release();
      await Promise.all(calls);
      rl.close();
    }
  });

  it("with one cap for the origin, A's retry waiting out its pause holds no slot: B is answered", async () => {
    const server = await perTokenApi();
    const rl = installGlobal({ default: { maxConcurrent: 1, maxConcurrentPer: 'origin' } });
    customerA(`${server.origin}/a`);
    await until(() => statusesOf(server, TOKEN_A).length === 1, "A's first answer");
    await until(() => rl.registry.get(server.origin)?.snapshot().pausedUntil !== undefined, "A's pause");

    const b = await fetch(`${server.origin}/b`, { headers: { authorization: TOKEN_B } });

    expect(b.status).toBe(200);
    expect(statusesOf(server, TOKEN_A)).toEqual([429]); // A's retry still waits its pause
  });

  it("the fetch wrapper too: with one cap for the origin, A's paused retry holds no slot", async () => {
    const server = await perTokenApi();
    const wrapped = rateLimitedFetch({ default: { maxConcurrent: 1, maxConcurrentPer: 'origin' } });
    cleanups.push(() => wrapped.close());
    const abort = new AbortController();
    const a = wrapped(`${server.origin}/a`, {
      headers: { authorization: TOKEN_A },
      signal: abort.signal,
    }).catch((e: unknown) => e);
    cleanups.push(async () => {
      abort.abort();
      await a;
    });
    await until(() => wrapped.registry.get(server.origin)?.snapshot().pausedUntil !== undefined, "A's pause");

    const b = await wrapped(`${server.origin}/b`, { headers: { authorization: TOKEN_B } });

    expect(b.status).toBe(200);
    expect(statusesOf(server, TOKEN_A)).toEqual([429]);
  });

  it('partitions the fetch wrapper by credential too', async () => {
    const server = await perTokenApi();
    const wrapped = rateLimitedFetch();
    cleanups.push(() => wrapped.close());
    const abort = new AbortController();
    const a = wrapped(`${server.origin}/a`, {
      headers: new Headers({ Authorization: TOKEN_A }),
      signal: abort.signal,
    }).catch((e: unknown) => e);
    cleanups.push(async () => {
      abort.abort();
      await a;
    });
    await until(() => statusesOf(server, TOKEN_A).length === 1, "A's first answer");

    const b = await wrapped(new Request(`${server.origin}/b`, { headers: { authorization: TOKEN_B } }));

    expect(b.status).toBe(200);
    expect(statusesOf(server, TOKEN_A)).toEqual([429]);
    expect(wrapped.registry.names().filter((n) => n.startsWith(`${server.origin}#`))).toHaveLength(1);
    expect(wrapped.registry.get(server.origin)?.snapshot().throttles).toBe(1);
  });

  it("reads the credential of fetch's headers given as [name, value] pairs", async () => {
    const server = await perTokenApi();
    // maxWait 1 s: a request that landed in A's limiter (paused 20 s) is refused at once.
    const wrapped = rateLimitedFetch({ default: { maxWait: 1_000 } });
    cleanups.push(() => wrapped.close());
    const abort = new AbortController();
    const a = wrapped(`${server.origin}/a`, {
      headers: [['authorization', TOKEN_A]],
      signal: abort.signal,
    }).catch((e: unknown) => e);
    cleanups.push(async () => {
      abort.abort();
      await a;
    });
    // A's 429 judged: the limiter it was sent through is paused for 20 s.
    await until(() => wrapped.registry.get(server.origin)?.snapshot().throttles === 1, "A's 429 judged");

    const b = await wrapped(`${server.origin}/b`, { headers: [['Authorization', TOKEN_B]] });

    expect(b.status).toBe(200);
    expect(wrapped.registry.names().filter((n) => n.startsWith(`${server.origin}#`))).toHaveLength(1);
    expect(wrapped.registry.get(server.origin)?.snapshot().throttles).toBe(1);
  });
});
