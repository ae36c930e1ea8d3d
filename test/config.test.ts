import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { resolveLimiterOptions } from '../src/limiter/options.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';

const CONTROLLER = "must be 'aimd', 'cubic', 'probe' or an object with onThrottled and onSuccess";

describe('parseConfig', () => {
  it('parses our camelCase shape, turning durations into ms and filling in the defaults', () => {
    const config = parseConfig({
      limiters: {
        github: {
          origins: ['https://api.github.com', '*.githubusercontent.com'],
          controller: 'cubic',
          maxWait: '30s',
          maxUnitsPerMinute: 4_500,
          maxConcurrent: 8,
          aimd: { increaseInterval: '10s', increaseStep: 60 },
        },
      },
    });
    expect(config).toEqual({
      limiters: {
        github: {
          origins: ['https://api.github.com', '*.githubusercontent.com'],
          controller: 'cubic',
          maxWait: 30_000,
          maxUnitsPerMinute: 4_500,
          maxConcurrent: 8,
          aimd: { increaseInterval: 10_000, increaseStep: 60 },
        },
      },
      default: {},
    });
  });

  it.each([
    ['maxWait', 2_500, 2_500],
    ['maxWait', '500ms', 500],
    ['decreaseCooldown', '2m', 120_000],
    ['maxPause', '00:05:00', 300_000],
    ['maxPause', '1.5s', 1_500],
  ])('reads %s %j as %d ms', (field, value, ms) => {
    expect(parseConfig({ default: { [field]: value } }).default).toEqual({ [field]: ms });
  });

  it("takes the probe controller's options (durations too) and the burst, in our shape and in appsettings'", () => {
    const ours = parseConfig({
      default: { controller: 'probe', burst: 'second', probe: { holdTime: '5s', probeStep: 30 } },
    });
    expect(ours.default).toEqual({
      controller: 'probe',
      burst: 'second',
      probe: { holdTime: 5_000, probeStep: 30 },
    });
    const seed = parseConfig({
      AdaptiveRateLimiting: {
        Default: { Controller: 'Probe', Probe: { MaxHold: '00:00:20', CruiseMargin: 0.05 } },
      },
    });
    expect(seed.default).toEqual({ controller: 'probe', probe: { maxHold: 20_000, cruiseMargin: 0.05 } });
    expect(configError(() => parseConfig({ default: { probe: { cruiseMargin: 0.7 } } }))).toMatchObject({
      issues: [{ path: 'default.probe.cruiseMargin', received: 0.7 }],
    });
  });

  it('takes default false, and the top-level options', () => {
    const config = parseConfig({
      default: false,
      maxAttempts: 2,
      throttleStatuses: [429, 503],
      maxReplayBodyBytes: 0,
    });
    expect(config).toEqual({
      limiters: {},
      default: false,
      maxAttempts: 2,
      throttleStatuses: [429, 503],
      maxReplayBodyBytes: 0,
    });
  });

  const appsettings = {
    Logging: { LogLevel: { Default: 'Information' } },
    AdaptiveRateLimiting: {
      Limiters: {
        'orders-api': {
          Origins: ['https://orders.example.com'],
          Controller: 'Cubic',
          InitialUnitsPerMinute: 600,
          MaxWait: '00:00:30',
          Aimd: { IncreaseInterval: '00:00:10' },
        },
        Billing: { Controller: 'AIMD', Cubic: { Beta: 0.8 } },
      },
      Default: { MaxConcurrent: 4 },
      MaxAttempts: 3,
    },
  };
  const expected = {
    limiters: {
      'orders-api': {
        origins: ['https://orders.example.com'],
        controller: 'cubic',
        initialUnitsPerMinute: 600,
        maxWait: 30_000,
        aimd: { increaseInterval: 10_000 },
      },
      Billing: { controller: 'aimd', cubic: { beta: 0.8 } },
    },
    default: { maxConcurrent: 4 },
    maxAttempts: 3,
  };

  it('parses a whole appsettings.json: PascalCase keys, TimeSpans, controller names in any case', () => {
    expect(parseConfig(appsettings)).toEqual(expected);
  });

  it('parses the AdaptiveRateLimiting section on its own', () => {
    expect(parseConfig(appsettings.AdaptiveRateLimiting)).toEqual(expected);
  });

  it("parses the seed's own example", () => {
    const seed = { AdaptiveRateLimiting: { Limiters: { 'orders-api': { Controller: 'Cubic' } } } };
    expect(parseConfig(seed).limiters).toEqual({ 'orders-api': { controller: 'cubic' } });
  });

  it('lists every bad field at once, each with its path and the value received', () => {
    const error = configError(() =>
      parseConfig({
        limiters: {
          github: {
            origins: ['https://api.github.com/v3'],
            controller: 'vegas',
            maxWait: '10 sec',
            queueLimit: -1,
            minUnitsPerMinute: 100,
            maxUnitsPerMinute: 10,
            aimd: { decreaseFactor: 1.5 },
          },
          other: { initialUnitsPerMinute: 0.5 },
        },
        default: { maxConcurrent: 0 },
        maxAttempts: 0,
        throttleStatuses: [429, 200],
      }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['limiters.github.controller', 'vegas'],
      ['limiters.github.maxWait', '10 sec'],
      ['limiters.github.queueLimit', -1],
      ['limiters.github.aimd.decreaseFactor', 1.5],
      ['limiters.github.origins.0', 'https://api.github.com/v3'],
      ['limiters.github.minUnitsPerMinute', 100],
      ['limiters.other.initialUnitsPerMinute', 0.5],
      ['default.maxConcurrent', 0],
      ['maxAttempts', 0],
      ['throttleStatuses.1', 200],
    ]);
    expect(error.message).toContain('limiters.github.maxWait');
    expect(error.message).toContain('(received "10 sec")');
    expect(error.issues.find((i) => i.path === 'limiters.github.minUnitsPerMinute')?.message).toMatch(
      /maxUnitsPerMinute \(10\)/,
    );
  });

  it('checks min <= max whenever the rates are valid, even beside a non-integer field', () => {
    const limiter = { instanceCount: 1.5, minUnitsPerMinute: 100, maxUnitsPerMinute: 10 };
    const error = configError(() => parseConfig({ limiters: { a: limiter }, default: { ...limiter } }));
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['limiters.a.instanceCount', 1.5],
      ['limiters.a.minUnitsPerMinute', 100],
      ['default.instanceCount', 1.5],
      ['default.minUnitsPerMinute', 100],
    ]);
    expect(error.issues[1]?.message).toBe('must not be above maxUnitsPerMinute (10)');
  });

  it('checks initial within min and max beside an unknown key, but not when a rate itself is bad', () => {
    const error = configError(() =>
      parseConfig({
        limiters: {
          a: { queueLimit: 2.5, extra: 1, maxUnitsPerMinute: 10, initialUnitsPerMinute: 50 },
          b: { minUnitsPerMinute: 'x', maxUnitsPerMinute: 10, initialUnitsPerMinute: 50 },
        },
      }),
    );
    expect(error.issues.map((i) => i.path)).toEqual([
      'limiters.a.queueLimit',
      'limiters.a.extra',
      'limiters.a.initialUnitsPerMinute',
      'limiters.b.minUnitsPerMinute',
    ]);
  });

  it('reports an origin listed twice beside a non-integer top-level field', () => {
    const error = configError(() =>
      parseConfig({
        limiters: { a: { origins: ['https://a.test'] }, b: { origins: ['https://a.test'] } },
        maxAttempts: 1.5,
      }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['maxAttempts', 1.5],
      ['limiters.b.origins.0', 'https://a.test'],
    ]);
  });

  it.each(['cubics', 5])('tells a bad controller %j what it expected', (controller) => {
    const error = configError(() =>
      parseConfig({ limiters: { a: { controller } }, default: { controller } }),
    );
    expect(error.issues).toEqual([
      { path: 'limiters.a.controller', message: CONTROLLER, received: controller },
      { path: 'default.controller', message: CONTROLLER, received: controller },
    ]);
  });

  it('names an unknown key by its path, as written, with the keys it could have been', () => {
    const error = configError(() =>
      parseConfig({ limiters: { github: { maxWiat: '30s', aimd: { step: 1 } } } }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['limiters.github.aimd.step', 1],
      ['limiters.github.maxWiat', '30s'],
    ]);
    expect(error.issues[1]?.message).toMatch(/unknown key .*maxWait/);
  });

  it('names paths of an appsettings file in its own spelling', () => {
    const error = configError(() =>
      parseConfig({ AdaptiveRateLimiting: { Limiters: { 'orders-api': { MaxWait: 'soon', Extra: 1 } } } }),
    );
    expect(error.issues.map((i) => i.path)).toEqual([
      'AdaptiveRateLimiting.Limiters.orders-api.MaxWait',
      'AdaptiveRateLimiting.Limiters.orders-api.Extra',
    ]);
  });

  it('refuses an exact origin listed by two limiters', () => {
    const error = configError(() =>
      parseConfig({
        limiters: { a: { origins: ['https://a.test'] }, b: { origins: ['HTTPS://A.TEST:443'] } },
      }),
    );
    expect(error.issues).toEqual([
      {
        path: 'limiters.b.origins.0',
        message: expect.stringContaining('limiter "a"'),
        received: 'HTTPS://A.TEST:443',
      },
    ]);
  });

  it('refuses origins in the default, a default that is neither false nor an object, and a non-object', () => {
    expect(configError(() => parseConfig({ default: { origins: [] } })).issues[0]?.path).toBe(
      'default.origins',
    );
    expect(configError(() => parseConfig({ default: true })).issues[0]).toMatchObject({
      path: 'default',
      received: true,
    });
    expect(configError(() => parseConfig('limiters')).issues[0]?.path).toBe('');
  });

  it('gives a config the registry takes as it is', () => {
    const config = parseConfig({
      limiters: { github: { origins: ['https://api.github.com'], maxWait: '5s' } },
      default: false,
    });
    const registry = new RateLimiterRegistry(config);
    expect(registry.limiterFor('https://api.github.com')?.name).toBe('github');
    expect(registry.limiterFor('https://elsewhere.test')).toBeUndefined();
  });
});

describe('limiter options', () => {
  it.each([
    ['a misspelt name', 'cubics'],
    ['an empty object', {}],
    ['an object without onSuccess', { onThrottled: () => 1 }],
  ])('tell a bad controller (%s) what it expected', (_, controller) => {
    const options = { controller } as unknown as Parameters<typeof resolveLimiterOptions>[0];
    for (const fn of [() => resolveLimiterOptions(options), () => new AdaptiveRateLimiter(options)]) {
      expect(configError(fn).issues).toEqual([
        { path: 'controller', message: CONTROLLER, received: controller },
      ]);
    }
  });

  it('check min <= max and initial within them whenever the rates are valid, beside other bad fields', () => {
    const error = configError(() =>
      resolveLimiterOptions({
        instanceCount: 1.5,
        minUnitsPerMinute: 100,
        maxUnitsPerMinute: 10,
        initialUnitsPerMinute: 5,
      }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['instanceCount', 1.5],
      ['minUnitsPerMinute', 100],
      ['initialUnitsPerMinute', 5],
    ]);
    const limiter = new AdaptiveRateLimiter({ maxUnitsPerMinute: 50 });
    expect(configError(() => limiter.update({ queueLimit: -1, minUnitsPerMinute: 60 })).issues).toEqual([
      expect.objectContaining({ path: 'queueLimit', received: -1 }),
      expect.objectContaining({ path: 'minUnitsPerMinute', received: 60 }),
    ]);
    expect(
      configError(() => resolveLimiterOptions({ minUnitsPerMinute: -1, maxUnitsPerMinute: 10 })).issues,
    ).toEqual([expect.objectContaining({ path: 'minUnitsPerMinute', received: -1 })]);
  });
});

describe('loadConfig', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'arl-config-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads a JSON file', async () => {
    const file = join(dir, 'limits.json');
    await writeFile(file, JSON.stringify({ limiters: { github: { origins: ['https://api.github.com'] } } }));
    expect((await loadConfig(file)).limiters).toEqual({ github: { origins: ['https://api.github.com'] } });
  });

  it('reads an appsettings.json with a BOM, comments and trailing commas, as .NET does', async () => {
    const file = join(dir, 'appsettings.json');
    const text = `\uFEFF{
  // the limiter section
  "AdaptiveRateLimiting": {
    "Limiters": {
      "orders-api": { "Controller": "Cubic", /* learn fast */ "Origins": ["https://orders.test"], },
    },
  },
  "AllowedHosts": "*"
}`;
    await writeFile(file, text);
    expect((await loadConfig(file)).limiters).toEqual({
      'orders-api': { controller: 'cubic', origins: ['https://orders.test'] },
    });
  });

  it('keeps comment-like text inside strings', async () => {
    const file = join(dir, 'strings.json');
    await writeFile(file, '{ "limiters": { "a//b": { "origins": ["https://a.test"] }, "c,}": {} } }');
    expect(Object.keys((await loadConfig(file)).limiters)).toEqual(['a//b', 'c,}']);
  });

  it('reports a JSON syntax error as a ConfigError naming the file and the line', async () => {
    const file = join(dir, 'broken.json');
    await writeFile(file, '{\n  "limiters": {\n    "a": { "maxWait": 5 }\n    "b": {}\n  }\n}');
    const error = await loadConfig(file).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).message).toContain(file);
    expect((error as ConfigError).message).toMatch(/line 4/);
  });

  it('names the file when a field is bad', async () => {
    const file = join(dir, 'bad.json');
    await writeFile(file, JSON.stringify({ maxAttempts: 'four' }));
    const error = await loadConfig(file).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).message).toContain(file);
    expect((error as ConfigError).issues[0]).toMatchObject({ path: 'maxAttempts', received: 'four' });
  });
});
