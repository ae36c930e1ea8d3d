import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimitError, ConfigError, RateLimitRejectedError } from '../src/errors.js';
import { RateLimiterRegistry, type RegistryOptions } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';

function setup(options: RegistryOptions = {}) {
  const clock = new ManualClock();
  const registry = new RateLimiterRegistry({ clock, ...options });
  const events: string[] = [];
  registry.on('added', ({ name }) => events.push(`added ${name}`));
  registry.on('removed', ({ name }) => events.push(`removed ${name}`));
  registry.on('replaced', ({ name }) => events.push(`replaced ${name}`));
  return { clock, registry, events };
}

describe('RateLimiterRegistry: origin to limiter', () => {
  const limiters = {
    github: { origins: ['https://api.github.com'] },
    wide: { origins: ['*.example.com'] },
    narrow: { origins: ['https://*.example.com'] },
    exact: { origins: ['https://api.example.com'] },
  };

  it('gives the named limiter that lists an exact origin', () => {
    const { registry } = setup({ limiters });
    expect(registry.limiterFor('https://api.github.com')?.name).toBe('github');
    expect(registry.limiterFor('https://api.github.com/repos/a/b?page=2')).toBe(registry.get('github'));
  });

  it('normalizes the origin: HTTPS://API.Example.com:443/ and https://api.example.com share a limiter', () => {
    const { registry } = setup({ limiters });
    const limiter = registry.limiterFor('https://api.example.com');
    expect(registry.limiterFor('HTTPS://API.Example.com:443/')).toBe(limiter);
    expect(registry.limiterFor(new URL('https://api.example.com:443/v1'))).toBe(limiter);
  });

  it('normalizes per-origin limiters the same way', () => {
    const { registry } = setup();
    const limiter = registry.limiterFor('HTTPS://API.Other.com:443/');
    expect(limiter?.name).toBe('https://api.other.com');
    expect(registry.limiterFor('https://api.other.com')).toBe(limiter);
  });

  it('lets an exact origin beat a wildcard declared before it', () => {
    const { registry } = setup({ limiters });
    expect(registry.limiterFor('https://api.example.com')?.name).toBe('exact');
  });

  it('gives the closest wildcard among those that match: a named scheme beats any scheme', () => {
    const { registry } = setup({ limiters });
    expect(registry.limiterFor('https://www.example.com')?.name).toBe('narrow');
    expect(registry.limiterFor('http://www.example.com:8080')?.name).toBe('wide');
  });

  it('gives the longest host suffix among matching wildcards, whichever limiter was declared first', () => {
    const { registry } = setup({
      limiters: {
        all: { origins: ['*.example.com'] },
        api: { origins: ['*.api.example.com'] },
        ported: { origins: ['*.example.com:8443'] },
        deep: { origins: ['https://*.v2.api.example.com'] },
      },
    });
    expect(registry.limiterFor('https://eu.api.example.com')?.name).toBe('api');
    expect(registry.limiterFor('https://a.b.api.example.com')?.name).toBe('api');
    expect(registry.limiterFor('https://x.v2.api.example.com')?.name).toBe('deep');
    expect(registry.limiterFor('http://x.v2.api.example.com')?.name).toBe('api');
    expect(registry.limiterFor('https://www.example.com')?.name).toBe('all');
    expect(registry.limiterFor('https://www.example.com:8443')?.name).toBe('ported');
    expect(registry.limiterFor('https://eu.api.example.com:8443')?.name).toBe('api');
  });

  it('ranks a named scheme above a named port, in either order of declaration', () => {
    const pairs: [string, string][] = [
      ['https://*.example.com', '*.example.com:443'],
      ['*.example.com:443', 'https://*.example.com'],
    ];
    for (const [a, b] of pairs) {
      const { registry } = setup({ limiters: { a: { origins: [a] }, b: { origins: [b] } } });
      expect(registry.limiterFor('https://www.example.com')?.name).toBe(a.startsWith('https') ? 'a' : 'b');
    }
  });

  it('makes a limiter per unnamed origin from the default config, named after the origin', () => {
    const { registry, events } = setup({
      limiters,
      default: { initialUnitsPerMinute: 600, maxConcurrent: 4 },
    });
    const a = registry.limiterFor('https://a.test');
    const b = registry.limiterFor('https://b.test');
    expect(a?.name).toBe('https://a.test');
    expect(a?.rate).toBe(600);
    expect(b).not.toBe(a);
    expect(registry.limiterFor('https://a.test/other/path')).toBe(a);
    expect(registry.configFor('https://a.test')?.maxConcurrent).toBe(4);
    expect(registry.get('https://a.test')).toBe(a);
    expect(events).toEqual(['added https://a.test', 'added https://b.test']);
  });

  it('passes unnamed origins through when default is false', () => {
    const { registry } = setup({ limiters, default: false });
    expect(registry.limiterFor('https://unnamed.test')).toBeUndefined();
    expect(registry.limiterFor('https://api.github.com')?.name).toBe('github');
    expect(registry.names()).toEqual(['github', 'wide', 'narrow', 'exact']);
  });

  it('gives each limiter its own config, maxConcurrent included', () => {
    const { registry } = setup({
      limiters: { github: { origins: ['https://api.github.com'], maxConcurrent: 2 } },
    });
    expect(registry.configFor('github')).toMatchObject({
      maxConcurrent: 2,
      origins: ['https://api.github.com'],
    });
    expect(registry.configFor('nothing')).toBeUndefined();
  });

  it('uses the registry clock in every limiter it makes', () => {
    const { clock, registry } = setup({ limiters });
    expect(registry.get('github')?.clock).toBe(clock);
    expect(registry.limiterFor('https://a.test')?.clock).toBe(clock);
  });

  it('throws for an origin that is not an http(s) URL', () => {
    const { registry } = setup();
    expect(() => registry.limiterFor('ftp://files.test')).toThrow(ConfigError);
  });
});

describe('RateLimiterRegistry: validation', () => {
  it('lists every bad field of every limiter at once, with its path and value', () => {
    const error = configError(
      () =>
        new RateLimiterRegistry({
          limiters: {
            a: { origins: ['https://a.test'], maxWait: -1, maxConcurrent: 0 },
            b: {
              origins: ['https://a.test:443', 'https://b.test/path'],
              minUnitsPerMinute: 10,
              maxUnitsPerMinute: 5,
            },
          },
          default: { queueLimit: 1.5 },
        }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['default.queueLimit', 1.5],
      ['limiters.a.maxConcurrent', 0],
      ['limiters.a.maxWait', -1],
      ['limiters.b.origins.1', 'https://b.test/path'],
      ['limiters.b.minUnitsPerMinute', 10],
      ['limiters.b.origins.0', 'https://a.test:443'],
    ]);
    expect(error.issues.at(-1)?.message).toContain('already covered by limiter "a"');
  });

  it('refuses origins in the default config and bad registry options', () => {
    expect(
      configError(() => new RateLimiterRegistry({ default: { origins: ['https://a.test'] } as never }))
        .issues[0]?.path,
    ).toBe('default.origins');
    expect(configError(() => new RateLimiterRegistry({ maxOriginLimiters: 0 })).issues[0]?.path).toBe(
      'maxOriginLimiters',
    );
  });
});

describe('RateLimiterRegistry: add, replace, remove, close', () => {
  it('adds a limiter, emits added, and refuses a name that exists', () => {
    const { registry, events } = setup();
    const limiter = registry.add('github', { origins: ['https://api.github.com'] });
    expect(registry.limiterFor('https://api.github.com')).toBe(limiter);
    expect(events).toEqual(['added github']);
    expect(() => registry.add('github', {})).toThrow(/exists/);
  });

  it('refuses to add an exact origin another limiter already lists', () => {
    const { registry } = setup({ limiters: { a: { origins: ['https://a.test'] } } });
    const error = configError(() => registry.add('b', { origins: ['HTTPS://A.TEST'] }));
    expect(error.issues[0]?.path).toBe('limiters.b.origins.0');
    expect(registry.names()).toEqual(['a']);
  });

  it('moves an origin from its per-origin limiter to a named limiter added for it', () => {
    const { registry, events } = setup();
    const before = registry.limiterFor('https://api.github.com');
    const named = registry.add('github', { origins: ['*.github.com'] });
    expect(registry.limiterFor('https://api.github.com')).toBe(named);
    expect(before?.snapshot().closed).toBe(false);
    expect(events).toEqual([
      'added https://api.github.com',
      'removed https://api.github.com',
      'added github',
    ]);
  });

  it('replaces a limiter in place: new requests go to the new one, the old one serves its waiters', async () => {
    const { clock, registry, events } = setup({
      limiters: {
        first: { origins: ['https://first.test'] },
        github: { origins: ['https://api.github.com'], initialUnitsPerMinute: 60 },
        last: { origins: ['https://last.test'] },
      },
    });
    const old = registry.get('github')!;
    (await old.acquire()).success();
    const waiting = old.acquire();

    const limiter = registry.replace('github', {
      origins: ['https://api.github.com'],
      initialUnitsPerMinute: 120,
    });
    expect(limiter).not.toBe(old);
    expect(registry.limiterFor('https://api.github.com')).toBe(limiter);
    expect(registry.names()).toEqual(['first', 'github', 'last']);
    expect(events).toEqual(['replaced github']);

    clock.advance(1_000);
    await expect(waiting).resolves.toBeDefined();
    expect(old.snapshot().closed).toBe(false);
  });

  it('moves origins with a replace: the dropped ones fall to the default', () => {
    const { registry } = setup({ limiters: { a: { origins: ['https://a.test', 'https://b.test'] } } });
    registry.replace('a', { origins: ['https://a.test'] });
    expect(registry.limiterFor('https://b.test')?.name).toBe('https://b.test');
    expect(registry.limiterFor('https://a.test')?.name).toBe('a');
  });

  it('keeps the old limiter when a replace is refused', () => {
    const { registry, events } = setup({ limiters: { a: { origins: ['https://a.test'] } } });
    const old = registry.get('a');
    expect(() => registry.replace('a', { maxWait: -5 })).toThrow(ConfigError);
    expect(() => registry.replace('missing', {})).toThrow(/no limiter/);
    expect(registry.get('a')).toBe(old);
    expect(registry.limiterFor('https://a.test')).toBe(old);
    expect(events).toEqual([]);
  });

  it('closes a removed limiter, rejecting its waiters, and sends its origins to the default', async () => {
    const { registry, events } = setup({
      limiters: { a: { origins: ['https://a.test'], initialUnitsPerMinute: 60 } },
    });
    const limiter = registry.get('a')!;
    await limiter.acquire();
    const waiting = limiter.acquire();
    expect(registry.remove('a')).toBe(true);
    await expect(waiting).rejects.toMatchObject({ reason: 'closed' });
    expect(registry.remove('a')).toBe(false);
    expect(registry.limiterFor('https://a.test')?.name).toBe('https://a.test');
    expect(events).toEqual(['removed a', 'added https://a.test']);
  });

  it('closes every limiter once, then answers with closed limiters and refuses changes', async () => {
    const { registry } = setup({ limiters: { a: { origins: ['https://a.test'] } } });
    const perOrigin = registry.limiterFor('https://b.test')!;
    registry.close();
    registry.close();
    expect(registry.get('a')?.snapshot().closed).toBe(true);
    expect(perOrigin.snapshot().closed).toBe(true);
    await expect(registry.limiterFor('https://a.test')!.acquire()).rejects.toBeInstanceOf(
      RateLimitRejectedError,
    );
    await expect(registry.limiterFor('https://c.test')!.acquire()).rejects.toMatchObject({
      reason: 'closed',
    });
    expect(registry.names()).toEqual(['a', 'https://b.test']);
    expect(() => registry.add('x', {})).toThrow(AdaptiveRateLimitError);
  });
});

describe('RateLimiterRegistry: dropping per-origin limiters', () => {
  it('drops a per-origin limiter unused for idleTimeout, at the next lookup', () => {
    const { clock, registry, events } = setup({ idleTimeout: 10_000 });
    const a = registry.limiterFor('https://a.test');
    clock.advance(9_999);
    registry.limiterFor('https://b.test');
    expect(registry.names()).toEqual(['https://a.test', 'https://b.test']);
    clock.advance(1_001);
    registry.limiterFor('https://b.test');
    expect(registry.names()).toEqual(['https://b.test']);
    expect(events).toEqual(['added https://a.test', 'added https://b.test', 'removed https://a.test']);
    expect(registry.limiterFor('https://a.test')).not.toBe(a);
  });

  it('sweeps at most every tenth of idleTimeout, so a limiter may outlive it by that much', () => {
    const { clock, registry } = setup({ idleTimeout: 10_000 });
    registry.limiterFor('https://a.test');
    clock.advance(9_999);
    registry.limiterFor('https://b.test'); // sweeps: a is not due yet
    clock.advance(999);
    registry.limiterFor('https://b.test'); // a is due, but the last sweep was 999 ms ago
    expect(registry.names()).toContain('https://a.test');
    clock.advance(1);
    registry.limiterFor('https://b.test');
    expect(registry.names()).not.toContain('https://a.test');
  });

  it('counts a lookup as a use', () => {
    const { clock, registry } = setup({ idleTimeout: 10_000 });
    registry.limiterFor('https://a.test');
    clock.advance(6_000);
    registry.limiterFor('https://a.test');
    clock.advance(6_000);
    registry.limiterFor('https://b.test');
    expect(registry.names()).toContain('https://a.test');
  });

  it('never drops a limiter with requests queued or a pause running', async () => {
    const { clock, registry } = setup({ idleTimeout: 1_000, default: { initialUnitsPerMinute: 1 } });
    const queued = registry.limiterFor('https://queued.test')!;
    await queued.acquire();
    const waiting = queued.acquire();
    const paused = registry.limiterFor('https://paused.test')!;
    (await paused.acquire()).throttled(30_000);
    registry.limiterFor('https://idle.test');

    clock.advance(2_000);
    registry.limiterFor('https://other.test');
    expect(registry.names()).toEqual(['https://queued.test', 'https://paused.test', 'https://other.test']);
    queued.close();
    await expect(waiting).rejects.toMatchObject({ reason: 'closed' });
  });

  it('drops the least recently used idle limiter when over maxOriginLimiters', () => {
    const { registry, events } = setup({ maxOriginLimiters: 3 });
    for (const host of ['a', 'b', 'c']) registry.limiterFor(`https://${host}.test`);
    registry.limiterFor('https://a.test');
    registry.limiterFor('https://d.test');
    expect(registry.names()).toEqual(['https://c.test', 'https://a.test', 'https://d.test']);
    // Room is made before the new limiter joins.
    expect(events.slice(-2)).toEqual(['removed https://b.test', 'added https://d.test']);
  });

  it('does not count named limiters against maxOriginLimiters', () => {
    const { registry } = setup({ maxOriginLimiters: 1, limiters: { a: { origins: ['https://a.test'] } } });
    registry.limiterFor('https://b.test');
    registry.limiterFor('https://c.test');
    expect(registry.names()).toEqual(['a', 'https://c.test']);
  });

  it("keeps a crawler's 10,000 distinct hostnames bounded", () => {
    const { clock, registry } = setup();
    let removed = 0;
    registry.on('removed', () => removed++);
    for (let i = 0; i < 10_000; i++) {
      registry.limiterFor(`https://host-${i}.crawl.test/page`);
      clock.advance(10);
    }
    expect(registry.names().length).toBeLessThanOrEqual(1_000);
    expect(removed).toBe(10_000 - registry.names().length);
    expect(registry.get('https://host-9999.crawl.test')).toBeDefined();
  });
});

describe('RateLimiterRegistry: its own keys and a config', () => {
  it('refuses a key it does not know, with its near miss (a typo dropped the whole config)', () => {
    const github = { github: { origins: ['https://api.github.com'], maxUnitsPerMinute: 60 } };
    const error = configError(() => new RateLimiterRegistry({ limiter: github } as RegistryOptions));
    expect(error.issues).toMatchObject([
      { path: 'limiter', message: expect.stringContaining('did you mean "limiters"?') },
    ]);
    for (const typo of ['defaults', 'idleTimout', 'maxOriginLimiter']) {
      expect(
        configError(() => new RateLimiterRegistry({ [typo]: 1 } as RegistryOptions)).issues[0]?.path,
      ).toBe(typo);
    }
  });

  it("reads a host's trailing dot (the DNS root) as the same origin: the named limiter caps it", () => {
    const registry = new RateLimiterRegistry({
      limiters: { gh: { origins: ['https://api.github.com'] }, wide: { origins: ['*.example.com'] } },
    });
    expect(registry.limiterFor('https://api.github.com./repos')).toBe(registry.get('gh'));
    expect(registry.limiterFor('https://API.github.com.:443')).toBe(registry.get('gh'));
    expect(registry.limiterFor('https://a.example.com.')).toBe(registry.get('wide'));
    registry.close();
  });

  it('refuses a limiter named (overflow), the name of its own limiter for origins with no room', () => {
    const error = configError(
      () => new RateLimiterRegistry({ limiters: { '(overflow)': { origins: ['https://a.test'] } } }),
    );
    expect(error.issues.map((i) => i.path)).toEqual(['limiters.(overflow)']);
  });

  it("takes a parsed config's adapter fields as they are", () => {
    const registry = new RateLimiterRegistry({
      maxAttempts: 3,
      rejection: 'error',
      default: {},
    } as RegistryOptions);
    expect(registry.limiterFor('https://api.test')).toBeDefined();
    registry.close();
  });
});
