import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { credentialParts, partitionId } from '../src/http/partition.js';
import { OVERFLOW, partitionKey, RateLimiterRegistry, type RegistryOptions } from '../src/registry/index.js';

// The registry's side of partitions: a limiter per (origin or named limiter, partition), bounded
// as per-origin limiters are, and never named by the key.

const ORIGIN = 'https://api.test';

function setup(options: RegistryOptions = {}) {
  const clock = new ManualClock();
  const registry = new RateLimiterRegistry({ clock, ...options });
  return { clock, registry };
}

const part = (id: string, name?: string) => ({ id, name: name === undefined ? undefined : () => name });

describe('RateLimiterRegistry: partitions', () => {
  it('makes a limiter per partition of an origin, named by the origin and the short id', () => {
    const { registry } = setup();
    const a = registry._partitionForOrigin(ORIGIN, part('idA'));
    const b = registry._partitionForOrigin(ORIGIN, part('idB'));

    expect(a?.key).toBe(`${ORIGIN}#idA`);
    expect(a?.limiter).not.toBe(b?.limiter);
    expect(registry._partitionForOrigin(ORIGIN, part('idA'))?.limiter).toBe(a?.limiter);
    expect(registry.names()).toEqual([`${ORIGIN}#idB`, `${ORIGIN}#idA`]);
    expect(registry.get(`${ORIGIN}#idA`)).toBe(a?.limiter);
    expect(a?.limiter.snapshot().name).toBe(`${ORIGIN}#idA`);
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
    const first = registry._partitionForOrigin(ORIGIN, named);
    registry._partitionForOrigin(ORIGIN, named);

    expect(asked).toBe(1);
    expect(first?.limiter.snapshot().name).toBe(`${ORIGIN}#customer-42`);
    expect(registry.names()).toEqual([`${ORIGIN}#idA`]);
  });

  it('counts partitions against maxOriginLimiters, then shares the overflow limiter', async () => {
    const { registry } = setup({ maxOriginLimiters: 2, maxPausedOrigins: 0 });
    for (const id of ['p1', 'p2']) {
      const limiter = registry._partitionForOrigin(ORIGIN, part(id))?.limiter;
      (await limiter?.acquire())?.throttled(60_000);
    }

    const third = registry._partitionForOrigin(ORIGIN, part('p3'));

    expect(third?.limiter).toBe(registry.get(OVERFLOW));
    expect(registry.names()).toEqual([`${ORIGIN}#p1`, `${ORIGIN}#p2`, OVERFLOW]);
  });

  it("keeps a dropped partition's pause as a record, and its next limiter starts paused", async () => {
    const { clock, registry } = setup({ maxOriginLimiters: 1 });
    const a = registry._partitionForOrigin(ORIGIN, part('pA'))?.limiter;
    (await a?.acquire())?.throttled(60_000);
    clock.advance(10_000);

    registry._partitionForOrigin(ORIGIN, part('pB'));
    expect(registry.names()).toEqual([`${ORIGIN}#pB`]);

    const again = registry._partitionForOrigin(ORIGIN, part('pA'))?.limiter;
    expect(again?.snapshot().pausedUntil).toBe(60_000);
  });

  it('drops idle partitions after idleTimeout, as per-origin limiters', () => {
    const { clock, registry } = setup({ idleTimeout: 1_000 });
    registry._partitionForOrigin(ORIGIN, part('pA'));
    clock.advance(1_000);
    registry._partitionForOrigin(ORIGIN, part('pB'));

    expect(registry.names()).toEqual([`${ORIGIN}#pB`]);
  });

  it('partitions a named limiter by its config, overflowing into the named limiter itself', async () => {
    const { registry } = setup({
      limiters: { api: { origins: [ORIGIN], maxWait: 5_000 } },
      maxOriginLimiters: 1,
      maxPausedOrigins: 0,
    });
    const p1 = registry._partitionForOrigin(ORIGIN, part('p1'));
    (await p1?.limiter.acquire())?.throttled(60_000);
    const p2 = registry._partitionForOrigin(ORIGIN, part('p2'));

    expect(p1?.key).toBe(partitionKey('api', 'p1'));
    expect(registry.configFor('api#p1')).toBe(registry.configFor('api'));
    expect(p2?.limiter).toBe(registry.get('api'));
  });

  it('leaves a limiter instance unpartitioned, and with default: false passes partitions through', () => {
    const { registry } = setup({ default: false });
    expect(registry._partitionForOrigin(ORIGIN, part('p1'))).toBeUndefined();
  });

  it("closes a named limiter's partitions with it, and a replace drops them", () => {
    const { registry } = setup({ limiters: { api: { origins: [ORIGIN] } } });
    const p1 = registry._partitionForOrigin(ORIGIN, part('p1'))?.limiter;
    registry.replace('api', { origins: [ORIGIN] });
    expect(registry.names()).toEqual(['api']);
    expect(p1?.snapshot().closed).toBe(false);

    const p2 = registry._partitionForOrigin(ORIGIN, part('p2'))?.limiter;
    registry.remove('api');
    expect(p2?.snapshot().closed).toBe(true);
    expect(registry.names()).toEqual([]);
  });

  it("drops an origin's partitions when a named limiter comes to cover the origin", () => {
    const { registry } = setup();
    registry._partitionForOrigin(ORIGIN, part('p1'));
    registry.add('api', { origins: [ORIGIN] });
    expect(registry.names()).toEqual(['api']);
  });

  it('tells added and removed events with the partition id', () => {
    const { clock, registry } = setup({ idleTimeout: 1_000 });
    const events: unknown[] = [];
    registry.on('added', ({ name, partition }) => events.push(['added', name, partition]));
    registry.on('removed', ({ name, partition }) => events.push(['removed', name, partition]));
    registry._partitionForOrigin(ORIGIN, part('pA'));
    clock.advance(1_000);
    registry._partitionForOrigin(ORIGIN, part('pB'));

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
    expect(credentialParts({ 'X-Api-Key': 'k', authorization: 't' }, names)).toEqual([
      'authorization',
      't',
      'x-api-key',
      'k',
    ]);
    expect(credentialParts({ accept: '*/*' }, names)).toBeUndefined();
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

  it('refuses partitionBy in the registry options next to a shared budget', () => {
    expect(
      () =>
        new RateLimiterRegistry({
          limiters: {
            api: {
              origins: [ORIGIN],
              partitionBy: ['authorization'],
              shared: { redis: 'redis://127.0.0.1:1' },
            },
          },
        }),
    ).toThrow(/limiters\.api\.partitionBy/);
  });
});
