import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { credentialParts, partitionId } from '../src/http/partition.js';
import { kHoldOrigin, kPartitionForOrigin } from '../src/internal.js';
import type { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { limiterOrigins, limiterPartition } from '../src/limiter/watch.js';
import { OVERFLOW, partitionKey, RateLimiterRegistry, type RegistryOptions } from '../src/registry/index.js';

// The registry's side of partitions: a limiter per (origin or named limiter, partition), bounded
// as per-origin limiters are, and never named by the key.

const ORIGIN = 'https://api.test';

/**
 * A registry whose origin (or named limiter) is used by a first partition already: that one meters
 * through the origin's own limiter, so the partitions the tests make are further ones.
 */
function setup(options: RegistryOptions = {}) {
  const clock = new ManualClock();
  const registry = new RateLimiterRegistry({ clock, ...options });
  registry.limiterFor(ORIGIN);
  registry[kPartitionForOrigin](ORIGIN, { id: 'first' });
  return { clock, registry };
}

const part = (id: string, name?: string) => ({ id, name: name === undefined ? undefined : () => name });

/** As the HTTP adapters look a partition up: the origin's route first, then the partition's. */
function via(registry: RateLimiterRegistry, id: string, origin = ORIGIN) {
  const base = registry.limiterFor(origin);
  return registry[kPartitionForOrigin](origin, part(id)) ?? { key: origin, limiter: base };
}

describe('RateLimiterRegistry: partitions', () => {
  it("meters the first partition through the origin's own limiter, and the next ones through their own", () => {
    const registry = new RateLimiterRegistry({ clock: new ManualClock() });
    const origin = registry.limiterFor(ORIGIN);
    expect(registry[kPartitionForOrigin](ORIGIN, part('idA'))).toBeUndefined();
    expect(registry[kPartitionForOrigin](ORIGIN, part('idA'))).toBeUndefined();
    const b = registry[kPartitionForOrigin](ORIGIN, part('idB'));
    expect(b?.limiter).not.toBe(origin);
    expect(registry.names()).toEqual([ORIGIN, `${ORIGIN}#idB`]);
  });

  it('makes a limiter per partition of an origin, named by the origin and the short id', () => {
    const { registry } = setup();
    const a = registry[kPartitionForOrigin](ORIGIN, part('idA'));
    const b = registry[kPartitionForOrigin](ORIGIN, part('idB'));

    expect(a?.key).toBe(`${ORIGIN}#idA`);
    expect(a?.limiter).not.toBe(b?.limiter);
    expect(registry[kPartitionForOrigin](ORIGIN, part('idA'))?.limiter).toBe(a?.limiter);
    expect(registry.names()).toEqual([ORIGIN, `${ORIGIN}#idB`, `${ORIGIN}#idA`]);
    expect(registry.get(`${ORIGIN}#idA`)).toBe(a?.limiter);
    expect(a?.limiter?.snapshot().name).toBe(`${ORIGIN}#idA`);
    expect(a && limiterPartition(a.limiter as AdaptiveRateLimiter)).toBe('idA');
    expect(a && limiterOrigins(a.limiter as AdaptiveRateLimiter)).toEqual([ORIGIN]);
    expect(limiterPartition(registry.limiterFor(ORIGIN) as AdaptiveRateLimiter)).toBeUndefined();
  });

  it("names a partition's limiter by partitionName, asked once, when it is made", () => {
    const { registry } = setup();
    let asked = 0;
    const named = {
      id: 'idA',
      name: () => {
        asked++;
        return 'customer-42';
      },
    };
    const first = registry[kPartitionForOrigin](ORIGIN, named);
    registry[kPartitionForOrigin](ORIGIN, named);

    expect(asked).toBe(1);
    expect(first?.limiter?.snapshot().name).toBe(`${ORIGIN}#customer-42`);
    expect(registry.names()).toEqual([ORIGIN, `${ORIGIN}#idA`]);
  });

  it('counts partitions against maxOriginLimiters, then shares the overflow limiter', async () => {
    const { registry } = setup({ maxOriginLimiters: 3, maxPausedOrigins: 0 });
    for (const id of ['first', 'p1', 'p2']) {
      const limiter = via(registry, id).limiter;
      (await limiter?.acquire())?.throttled(60_000);
    }

    const third = via(registry, 'p3');

    expect(third?.limiter).toBe(registry.get(OVERFLOW));
    expect(registry.names().sort()).toEqual([ORIGIN, `${ORIGIN}#p1`, `${ORIGIN}#p2`, OVERFLOW].sort());
  });

  it("keeps a dropped partition's pause as a record, and its next limiter starts paused", async () => {
    const { clock, registry } = setup({ maxOriginLimiters: 2 });
    const a = via(registry, 'pA').limiter;
    (await a?.acquire())?.throttled(60_000);
    clock.advance(10_000);

    via(registry, 'pB');
    expect(registry.names()).toEqual([ORIGIN, `${ORIGIN}#pB`]);

    const again = via(registry, 'pA').limiter;
    expect(again).not.toBe(a);
    expect(again?.snapshot().pausedUntil).toBe(60_000);
  });

  it("gives a partition's recorded pause that finds no room its own limiter; the overflow other credentials share stays unpaused", async () => {
    const { registry } = setup({ maxOriginLimiters: 2, maxPausedOrigins: 1 });
    const releases = [registry[kHoldOrigin](ORIGIN, registry.get(ORIGIN)!)];
    const a = via(registry, 'pA').limiter;
    (await a?.acquire())?.throttled(60_000);
    const b = via(registry, 'pB'); // pA's pause becomes a record
    releases.push(registry[kHoldOrigin](b.key, b.limiter!));
    const c = via(registry, 'pC').limiter; // no room: the overflow limiter
    expect(c).toBe(registry.get(OVERFLOW));

    const again = via(registry, 'pA').limiter;

    expect(again).not.toBe(c);
    expect(again?.snapshot().pausedUntil).toBe(60_000);
    // Before, pA went through the overflow limiter and paused it: pC waited out pA's Retry-After.
    expect(c?.snapshot().pausedUntil).toBeUndefined();
    for (const release of releases) release();
  });

  it("gives a named limiter's partition with a recorded pause its own limiter; the named limiter stays unpaused", async () => {
    const { registry } = setup({
      limiters: { api: { origins: [ORIGIN], maxWait: 5_000 } },
      maxOriginLimiters: 1,
      maxPausedOrigins: 1,
    });
    const p1 = registry[kPartitionForOrigin](ORIGIN, part('p1'));
    (await p1?.limiter?.acquire())?.throttled(60_000);
    const p2 = registry[kPartitionForOrigin](ORIGIN, part('p2')); // p1's pause becomes a record
    const release = registry[kHoldOrigin](p2!.key, p2!.limiter!);
    expect(registry[kPartitionForOrigin](ORIGIN, part('p3'))?.limiter).toBe(registry.get('api#(overflow)'));

    const again = registry[kPartitionForOrigin](ORIGIN, part('p1'));

    expect(again?.limiter).not.toBe(registry.get('api'));
    expect(again?.limiter?.snapshot().pausedUntil).toBe(60_000);
    expect(registry.get('api')?.snapshot().pausedUntil).toBeUndefined();
    release();
  });

  it('drops idle partitions after idleTimeout, as per-origin limiters', () => {
    const { clock, registry } = setup({ idleTimeout: 1_000 });
    via(registry, 'pA');
    clock.advance(500);
    via(registry, 'first'); // the origin's own limiter stays in use
    clock.advance(500);
    via(registry, 'pB');

    expect(registry.names()).toEqual([ORIGIN, `${ORIGIN}#pB`]);
  });

  it("partitions a named limiter by its config, overflowing into the named limiter's overflow limiter, not the first partition's", async () => {
    const { registry } = setup({
      limiters: { api: { origins: [ORIGIN], maxWait: 5_000 } },
      maxOriginLimiters: 1,
      maxPausedOrigins: 0,
    });
    const p1 = registry[kPartitionForOrigin](ORIGIN, part('p1'));
    (await p1?.limiter?.acquire())?.throttled(60_000);
    const p2 = registry[kPartitionForOrigin](ORIGIN, part('p2'));

    expect(p1?.key).toBe(partitionKey('api', 'p1'));
    expect(p1 && limiterOrigins(p1.limiter as AdaptiveRateLimiter)).toEqual([ORIGIN]);
    expect(registry.configFor('api#p1')).toBe(registry.configFor('api'));
    const overflow = registry.get('api#(overflow)');
    expect(p2?.limiter).toBe(overflow);
    expect(p2?.limiter).not.toBe(registry.get('api'));
    expect(registry.configFor('api#(overflow)')).toBe(registry.configFor('api'));
    expect(overflow && limiterOrigins(overflow)).toEqual([ORIGIN]);
    expect(registry.names()).toContain('api#(overflow)');
    // It goes with its named limiter.
    registry.remove('api');
    expect(overflow?.snapshot().closed).toBe(true);
    expect(registry.names()).not.toContain('api#(overflow)');
  });

  it('leaves a limiter instance unpartitioned, and with default: false passes partitions through', () => {
    const { registry } = setup({ default: false });
    expect(registry[kPartitionForOrigin](ORIGIN, part('p1'))).toBeUndefined();
  });

  it("closes a named limiter's partitions with it, and a replace drops them", () => {
    const { registry } = setup({ limiters: { api: { origins: [ORIGIN] } } });
    const p1 = registry[kPartitionForOrigin](ORIGIN, part('p1'))?.limiter;
    registry.replace('api', { origins: [ORIGIN] });
    expect(registry.names()).toEqual(['api']);
    expect(p1?.snapshot().closed).toBe(false);

    // The replaced limiter is claimed afresh by the first partition seen.
    expect(registry[kPartitionForOrigin](ORIGIN, part('p1'))).toBeUndefined();
    const p2 = registry[kPartitionForOrigin](ORIGIN, part('p2'))?.limiter;
    expect(p2).toBeDefined();
    registry.remove('api');
    expect(p2?.snapshot().closed).toBe(true);
    expect(registry.names()).toEqual([]);
  });

  it("drops an origin's partitions when a named limiter comes to cover the origin", () => {
    const { registry } = setup();
    registry[kPartitionForOrigin](ORIGIN, part('p1'));
    registry.add('api', { origins: [ORIGIN] });
    expect(registry.names()).toEqual(['api']);
  });

  it('tells added and removed events with the partition id', () => {
    const { clock, registry } = setup({ idleTimeout: 1_000 });
    const events: unknown[] = [];
    registry.on('added', ({ name, partition }) => events.push(['added', name, partition]));
    registry.on('removed', ({ name, partition }) => events.push(['removed', name, partition]));
    via(registry, 'pA');
    clock.advance(500);
    via(registry, 'first'); // the origin's own limiter stays in use
    clock.advance(500);
    via(registry, 'pB');

    expect(events).toEqual([
      ['added', `${ORIGIN}#pA`, 'pA'],
      ['removed', `${ORIGIN}#pA`, 'pA'],
      ['added', `${ORIGIN}#pB`, 'pB'],
    ]);
  });
});

describe('partition keys', () => {
  it('hashes a key into a stable 12-character id that does not contain it', () => {
    const id = partitionId(['authorization', 'Bearer sk-1']);
    expect(id).toMatch(/^[A-Za-z0-9_-]{12}$/);
    expect(partitionId(['authorization', 'Bearer sk-1'])).toBe(id);
    expect(partitionId(['authorization', 'Bearer sk-2'])).not.toBe(id);
    expect(partitionId(['ab', 'c'])).not.toBe(partitionId(['a', 'bc']));
  });

  it('reads the credential headers from every header shape, names with values', () => {
    const names = ['authorization', 'x-api-key'];
    const expected = ['authorization', 't'];
    expect(credentialParts({ Authorization: 't' }, names)).toEqual(expected);
    expect(credentialParts(['authorization', 't', 'accept', '*/*'], names)).toEqual(expected);
    expect(credentialParts(new Headers({ authorization: 't' }), names)).toEqual(expected);
    expect(credentialParts(new Map([['AUTHORIZATION', 't']]), names)).toEqual(expected);
    // fetch's HeadersInit as an array of pairs.
    expect(credentialParts([['Authorization', 't']], names)).toEqual(expected);
    expect(credentialParts({ 'X-Api-Key': 'k', authorization: 't' }, names)).toEqual([
      'authorization',
      't',
      'x-api-key',
      'k',
    ]);
    expect(credentialParts({ accept: '*/*' }, names)).toBeUndefined();
  });

  it('keys a signed authorization by who signs, not by the signature of each request', () => {
    const names = ['authorization'];
    const sigv4 = (sig: string) =>
      `AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=${sig}`;
    expect(credentialParts({ authorization: sigv4('aa') }, names)).toEqual(
      credentialParts({ authorization: sigv4('bb') }, names),
    );
    expect(credentialParts({ authorization: sigv4('aa') }, names)).toEqual([
      'authorization',
      'aws4-hmac-sha256 credential=AKIDEXAMPLE',
    ]);
    const oauth = (nonce: string) =>
      `OAuth oauth_consumer_key="ck", oauth_token="tk", oauth_nonce="${nonce}", oauth_signature="${nonce}"`;
    expect(credentialParts({ authorization: oauth('1') }, names)).toEqual(
      credentialParts({ authorization: oauth('2') }, names),
    );
    expect(credentialParts({ authorization: 'SharedKey acct:sig1' }, names)).toEqual(
      credentialParts({ authorization: 'SharedKey acct:sig2' }, names),
    );
    expect(credentialParts({ authorization: 'Bearer a' }, names)).not.toEqual(
      credentialParts({ authorization: 'Bearer b' }, names),
    );
    expect(credentialParts(undefined, names)).toBeUndefined();
  });
});

describe('partition config', () => {
  it('parses partitionBy and maxConcurrentPer in JSON, in limiters and default', () => {
    const config = parseConfig({
      limiters: { api: { origins: [ORIGIN], partitionBy: ['X-Tenant'], maxConcurrentPer: 'Origin' } },
      default: { partitionBy: false },
    });
    expect(config.limiters.api?.partitionBy).toEqual(['X-Tenant']);
    expect(config.limiters.api?.maxConcurrentPer).toBe('origin');
    expect(config.default).toEqual({ partitionBy: false });
  });

  it('names a bad partitionBy and maxConcurrentPer with the value received', () => {
    const error = (() => {
      try {
        parseConfig({ default: { partitionBy: ['bad header'], maxConcurrentPer: 'host' } });
      } catch (e) {
        return e as ConfigError;
      }
    })();
    expect(error).toBeInstanceOf(ConfigError);
    expect(error?.issues.map((i) => i.path).sort()).toEqual([
      'default.maxConcurrentPer',
      'default.partitionBy.0',
    ]);
  });
});
