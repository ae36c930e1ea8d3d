import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { adaptiveRateLimit } from '../src/http/interceptor.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';

// Keys named after members of Object.prototype, and misspelled keys: each is an ordinary name or
// a ConfigError naming its path; never a TypeError, never a key dropped in silence.

/** JSON.parse makes "__proto__" an own key, as a config file does. */
const json = (text: string) => JSON.parse(text) as Record<string, unknown>;
const paths = (error: ConfigError) => error.issues.map((i) => i.path);

describe('config keys named after built-in object members', () => {
  it.each([
    ['at the top', '{"%s": {"maxWait": 5}}', '%s'],
    ['in default', '{"default": {"%s": {"maxWait": 5}}}', 'default.%s'],
    [
      'in the appsettings section',
      '{"AdaptiveRateLimiting": {"%s": {"maxWait": 5}}}',
      'AdaptiveRateLimiting.%s',
    ],
    ['in aimd', '{"default": {"aimd": {"%s": {"x": 1}}}}', 'default.aimd.%s'],
    [
      'in a limiter',
      '{"limiters": {"a": {"origins": ["https://a.test"], "%s": {"maxWait": 5}}}}',
      'limiters.a.%s',
    ],
  ])(
    'reports hasOwnProperty, constructor and __proto__ %s as a ConfigError at its path',
    (_where, text, path) => {
      for (const key of ['hasOwnProperty', 'constructor', '__proto__', 'toString']) {
        const error = configError(() => parseConfig(json(text.replace('%s', key))));
        expect(paths(error)).toEqual([path.replace('%s', key)]);
      }
    },
  );

  it('rejects a limiter named __proto__ through parseConfig, loadConfig and the adapters', async () => {
    const text = '{"limiters": {"__proto__": {"origins": ["https://a.test"]}}}';
    expect(paths(configError(() => parseConfig(json(text))))).toEqual(['limiters.__proto__']);

    const dir = await mkdtemp(join(tmpdir(), 'arl-keys-'));
    try {
      await writeFile(join(dir, 'config.json'), text);
      const error = await loadConfig(join(dir, 'config.json')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConfigError);
      expect(paths(error as ConfigError)).toEqual(['limiters.__proto__']);
    } finally {
      await rm(dir, { recursive: true });
    }

    const limiters = json(text).limiters as Record<string, { origins: string[] }>;
    expect(paths(configError(() => adaptiveRateLimit({ limiters })))).toEqual(['limiters.__proto__']);
    expect(paths(configError(() => rateLimitedFetch({ limiters })))).toEqual(['limiters.__proto__']);
    expect(paths(configError(() => new RateLimiterRegistry({ limiters })))).toEqual(['limiters.__proto__']);
  });

  it('rejects a limiter named "" once, with the same words, through parseConfig, the registry and the adapters', () => {
    const limiters = { '': { origins: ['https://a.test'] } };
    // The empty key is written as JSON writes it (`""`), not as a trailing dot (`limiters.`).
    const said = (error: ConfigError) => error.issues.map((i) => [i.path, i.message, i.received]);
    const once = [['limiters.""', 'a limiter name must be a non-empty string, not white space alone', '']];
    expect(said(configError(() => parseConfig({ limiters })))).toEqual(once);
    expect(said(configError(() => new RateLimiterRegistry({ limiters })))).toEqual(once);
    expect(said(configError(() => new RateLimiterRegistry().add('', {})))).toEqual(once);
    expect(said(configError(() => adaptiveRateLimit({ limiters })))).toEqual(once);
    expect(said(configError(() => rateLimitedFetch({ limiters })))).toEqual(once);
  });

  it('rejects a limiter named with white space alone, which named logs and metrics " "', () => {
    const limiters = { ' \t': { origins: ['https://a.test'] } };
    const said = (error: ConfigError) => error.issues.map((i) => [i.path, i.message]);
    const once = [['limiters." \\t"', 'a limiter name must be a non-empty string, not white space alone']];
    expect(said(configError(() => parseConfig({ limiters })))).toEqual(once);
    expect(said(configError(() => new RateLimiterRegistry({ limiters })))).toEqual(once);
    expect(said(configError(() => new RateLimiterRegistry().add(' \t', {})))).toEqual(once);
    expect(said(configError(() => adaptiveRateLimit({ limiters })))).toEqual(once);
    expect(said(configError(() => rateLimitedFetch({ limiters })))).toEqual(once);
  });

  it('writes an empty key in a path as ""', () => {
    expect(paths(configError(() => parseConfig({ default: { '': 1 } })))).toEqual(['default.""']);
    expect(paths(configError(() => parseConfig({ '': 1 })))).toEqual(['""']);
  });

  it('quotes a key with a dot or white space, so that a limiter "a.b" is not read as a limiter "a"', () => {
    const limiters = { 'a.b': { origins: ['https://a.test', 'https://b.test/x'], maxWait: -1 } };
    const expected = ['limiters."a.b".maxWait', 'limiters."a.b".origins.1'];
    expect(paths(configError(() => parseConfig({ limiters }))).sort()).toEqual(expected);
    expect(paths(configError(() => new RateLimiterRegistry({ limiters }))).sort()).toEqual(expected);
    expect(paths(configError(() => adaptiveRateLimit({ limiters }))).sort()).toEqual(expected);
    expect(paths(configError(() => rateLimitedFetch({ limiters }))).sort()).toEqual(expected);
    expect(paths(configError(() => parseConfig({ default: { 'max wait': 1 } })))).toEqual([
      'default."max wait"',
    ]);
    const registry = new RateLimiterRegistry({ limiters: { 'x.y': { origins: ['https://a.test'] } } });
    expect(paths(configError(() => registry.add('p.q', { origins: ['https://a.test'] })))).toEqual([
      'limiters."p.q".origins.0',
    ]);
    expect(paths(configError(() => registry.replace('no.such', {})))).toEqual(['limiters."no.such"']);
    registry.close();
  });

  it.each(['constructor', 'toString', 'hasOwnProperty'])(
    'takes a limiter named %s as an ordinary name',
    (name) => {
      const config = parseConfig(json(`{"limiters": {"${name}": {"origins": ["https://a.test"]}}}`));
      const registry = new RateLimiterRegistry(config);

      expect(registry.names()).toEqual([name]);
      expect(registry.limiterFor('https://a.test')).toBe(registry.get(name));
      registry.close();
    },
  );
});

describe('a misspelled field names itself, in code as in JSON', () => {
  it('reports adaptiveRateLimit({ maxAttemps }) at maxAttemps, with the key meant', () => {
    for (const make of [adaptiveRateLimit, rateLimitedFetch]) {
      const error = configError(() => make({ maxAttemps: 3 } as never));
      expect(error.issues).toEqual([
        { path: 'maxAttemps', message: expect.stringContaining('did you mean "maxAttempts"'), received: 3 },
      ]);
    }
  });

  it('reports { maxAttemps } in JSON at maxAttemps, with the key meant', () => {
    const error = configError(() => parseConfig({ maxAttemps: 3 }));
    expect(error.issues).toEqual([
      { path: 'maxAttemps', message: expect.stringContaining('did you mean "maxAttempts"'), received: 3 },
    ]);
  });
});

describe('a plain-object config in code is checked as JSON is', () => {
  it('rejects `origin` (singular) in a limiter, which covers no origin then', () => {
    const error = configError(() =>
      adaptiveRateLimit({ limiters: { x: { origin: 'https://a.test' } as never } }),
    );

    expect(error.issues).toEqual([
      {
        path: 'limiters.x.origin',
        message: expect.stringContaining('did you mean "origins"'),
        received: 'https://a.test',
      },
      {
        path: 'limiters.x.origins',
        message: expect.stringContaining('covers no origin'),
        received: undefined,
      },
    ]);
  });

  it('rejects a limiter of the adapters that covers no origin, with `origins: []` or none', () => {
    for (const config of [{}, { origins: [] }, { maxWait: 1_000 }]) {
      expect(paths(configError(() => rateLimitedFetch({ limiters: { x: config } })))).toEqual([
        'limiters.x.origins',
      ]);
    }
  });

  it('rejects unknown keys in a limiter, in default and in their aimd and cubic objects', () => {
    const error = configError(
      () =>
        new RateLimiterRegistry({
          limiters: { x: { origins: ['https://a.test'], maxWiat: 5, cubic: { bta: 0.5 } } as never },
          default: { aimd: { step: 1 } } as never,
        }),
    );

    expect(paths(error).sort()).toEqual(['default.aimd.step', 'limiters.x.cubic.bta', 'limiters.x.maxWiat']);
    expect(error.issues.find((i) => i.path === 'limiters.x.maxWiat')?.message).toContain(
      'did you mean "maxWait"',
    );
  });

  it('rejects an unknown key of probe in code as in JSON, named once, with its near miss', () => {
    const config = { limiters: { x: { origins: ['https://a.test'], probe: { holdTme: 5_000 } } } } as never;
    for (const make of [
      () => new RateLimiterRegistry(config),
      () => adaptiveRateLimit(config),
      () => rateLimitedFetch(config),
      () => parseConfig(config),
    ]) {
      const error = configError(make);
      expect(paths(error)).toEqual(['limiters.x.probe.holdTme']);
      expect(error.issues[0]?.message).toContain('did you mean "holdTime"');
    }
  });

  it('rejects an unknown key of AdaptiveRateLimiter and of its update(), at any level', () => {
    expect(paths(configError(() => new AdaptiveRateLimiter({ maxWiat: 5 } as never)))).toEqual(['maxWiat']);
    for (const options of [
      { probe: { holdTme: 1 } },
      { aimd: { step: 1 } },
      { cubic: { bta: 0.5 } },
      { budgets: { requests: { probe: { holdTme: 1 } } } },
    ]) {
      const [path] = Object.keys(options);
      expect(paths(configError(() => new AdaptiveRateLimiter(options as never)))[0]).toMatch(
        new RegExp(`^${path}\\.`),
      );
    }
    const limiter = new AdaptiveRateLimiter();
    expect(paths(configError(() => limiter.update({ maxWiat: 5 } as never)))).toEqual(['maxWiat']);
    expect(paths(configError(() => limiter.update({ probe: { holdTme: 1 } } as never)))).toEqual([
      'probe.holdTme',
    ]);
    limiter.close();
  });

  it('still lets the registry hold a named limiter without origins (reached by get(name), e.g. for wrap)', () => {
    const registry = new RateLimiterRegistry({ limiters: { sdk: { maxUnitsPerMinute: 60 } } });
    expect(registry.get('sdk')).toBeDefined();
    registry.close();
  });
});

// Regression: a field that is `false` or a value of another kind read "must be false or an
// object" in JSON whatever the field (that is `default`'s message), and `partitionBy` read
// "Invalid input" in code: neither said what the field takes.
describe('a field that takes false or a value says which value, in code as in JSON', () => {
  const messages = (make: () => unknown) =>
    configError(make).issues.map((issue) => `${issue.path}: ${issue.message}`);

  it.each([
    ['partitionBy', 'x-key', 'limiters.a.partitionBy: must be false or a list of header names'],
    [
      'headers',
      'nope',
      "limiters.a.headers: must be 'standard', 'github', 'openai', 'anthropic', 'shopify' or false",
    ],
  ])('%s: %s', (field, value, message) => {
    const limiter = { origins: ['https://a.example.com'], [field]: value };
    expect(messages(() => parseConfig({ limiters: { a: limiter } }))).toEqual([message]);
    expect(messages(() => rateLimitedFetch({ limiters: { a: limiter } }))).toEqual([message]);
  });

  it('default: 5 still says it must be false or an object', () => {
    expect(messages(() => parseConfig({ default: 5 }))).toEqual(['default: must be false or an object']);
  });
});

describe('numbers and durations as a .NET appsettings.json writes them', () => {
  const section = (limiter: Record<string, unknown>) => ({
    AdaptiveRateLimiting: { Limiters: { orders: { Origins: ['https://orders.test'], ...limiter } } },
  });

  it('reads a number written as a string, as .NET binds it', () => {
    const config = parseConfig(
      section({
        InitialUnitsPerMinute: '2700',
        MaxUnitsPerMinute: ' 6000 ',
        QueueLimit: '50',
        Aimd: { DecreaseFactor: '0.5' },
      }),
    );
    const orders = config.limiters.orders;
    expect(orders?.initialUnitsPerMinute).toBe(2700);
    expect(orders?.maxUnitsPerMinute).toBe(6000);
    expect(orders?.queueLimit).toBe(50);
    expect(orders?.aimd?.decreaseFactor).toBe(0.5);
  });

  it('a number string that is not a number is still refused, naming the field', () => {
    const error = configError(() => parseConfig(section({ QueueLimit: '50 requests' })));
    expect(paths(error)).toEqual(['AdaptiveRateLimiting.Limiters.orders.QueueLimit']);
  });

  it('refuses a duration written as a bare number in a string (.NET: days), naming the field and the forms', () => {
    const error = configError(() => parseConfig(section({ MaxWait: '30' })));
    expect(paths(error)).toEqual(['AdaptiveRateLimiting.Limiters.orders.MaxWait']);
    expect(error.issues[0]?.message).toContain('days');
    expect(error.issues[0]?.message).toContain('"00:00:30"');
    expect(error.issues[0]?.received).toBe('30');
    // Its unambiguous forms are read.
    expect(parseConfig(section({ MaxWait: '00:00:30' })).limiters.orders?.maxWait).toBe(30_000);
    expect(parseConfig(section({ MaxWait: '30s' })).limiters.orders?.maxWait).toBe(30_000);
    expect(parseConfig(section({ MaxWait: 30 })).limiters.orders?.maxWait).toBe(30);
  });

  it('the section alone with PascalCase keys reads the same; our own camelCase JSON keeps "30" as 30 ms and refuses "2700"', () => {
    const alone = { Limiters: { orders: { Origins: ['https://orders.test'], MaxWait: '30' } } };
    expect(paths(configError(() => parseConfig(alone)))).toEqual(['Limiters.orders.MaxWait']);
    const ours = { limiters: { orders: { origins: ['https://orders.test'], maxWait: '30' } } };
    expect(parseConfig(ours).limiters.orders?.maxWait).toBe(30);
    const number = { limiters: { orders: { origins: ['https://orders.test'], queueLimit: '50' } } };
    expect(paths(configError(() => parseConfig(number)))).toEqual(['limiters.orders.queueLimit']);
  });
});
