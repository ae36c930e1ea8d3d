import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { RateLimiterRegistry } from '../src/registry/index.js';
import { configError } from './helpers/config-error.js';

// Config inputs a hostile but realistic user writes: each bad one is a ConfigError naming the
// field and the value; nothing in a config is dropped in silence.

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'arl-config-attack-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function loadError(name: string, text: string): Promise<ConfigError> {
  const file = join(dir, name);
  await writeFile(file, text);
  const error = await loadConfig(file).catch((e: unknown) => e);
  if (!(error instanceof ConfigError)) throw new Error(`expected a ConfigError, got ${String(error)}`);
  return error;
}

describe('loadConfig: a key given twice in a file', () => {
  it('refuses a limiter given twice, which dropped the first limiter and its origins', async () => {
    const error = await loadError(
      'limiters.json',
      '{\n  "limiters": {\n    "api": { "origins": ["https://a.example.com"] },\n    "api": { "origins": ["https://b.example.com"] }\n  }\n}',
    );
    expect(error.issues).toEqual([
      {
        path: 'limiters.api',
        message: 'key given twice (first at line 3, column 5): JSON keeps only the last, so give it once',
        received: { origins: ['https://b.example.com'] },
      },
    ]);
    expect(error.message).toContain(`rate limit config file ${join(dir, 'limiters.json')}`);
  });

  it('refuses a field given twice, at any depth, and reports it beside the other bad fields', async () => {
    const error = await loadError(
      'fields.json',
      '{ "default": { "maxWait": "1s", "maxWait": "2s", "aimd": { "increaseStep": 1, "increaseStep": 2 } }, "maxAttempts": 0 }',
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['default.maxWait', '2s'],
      ['default.aimd.increaseStep', 2],
      ['maxAttempts', 0],
    ]);
  });

  it('refuses the appsettings section given twice, which dropped the first section', async () => {
    const error = await loadError(
      'appsettings.json',
      '{ "AdaptiveRateLimiting": { "Limiters": { "A": {} } }, "AdaptiveRateLimiting": { "Limiters": { "B": {} } } }',
    );
    expect(error.issues.map((i) => i.path)).toEqual(['AdaptiveRateLimiting']);
  });

  it('still reads a file whose keys are each given once, in nested objects of the same names', async () => {
    const file = join(dir, 'fine.json');
    await writeFile(
      file,
      '{ "limiters": { "a": { "origins": ["https://a.example.com"], "aimd": { "increaseStep": 1 } }, "b": { "aimd": { "increaseStep": 2 } } } }',
    );
    expect(Object.keys((await loadConfig(file)).limiters)).toEqual(['a', 'b']);
  });
});

describe('origins: trailing dots and empty labels', () => {
  it('matches a wildcard written with the DNS root dot, which matched no host at all', () => {
    const config = parseConfig({
      limiters: { api: { origins: ['*.example.com.', 'https://*.example.org.:8443'] } },
    });
    const registry = new RateLimiterRegistry(config);
    const api = registry.get('api');
    expect(api).toBeDefined();
    expect(registry.limiterFor('https://a.example.com')).toBe(api);
    expect(registry.limiterFor('https://a.example.com.')).toBe(api);
    expect(registry.limiterFor('https://a.example.org:8443')).toBe(api);
    expect(registry.limiterFor('https://example.com')).not.toBe(api);
  });

  it('refuses a pattern with an empty label, which named no host', () => {
    const error = configError(() =>
      parseConfig({
        limiters: {
          api: { origins: ['*..', '*.example.com..', 'https://a..example.com', 'https://.example.com'] },
        },
      }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['limiters.api.origins.0', '*..'],
      ['limiters.api.origins.1', '*.example.com..'],
      ['limiters.api.origins.2', 'https://a..example.com'],
      ['limiters.api.origins.3', 'https://.example.com'],
    ]);
    expect(error.issues[0]?.message).toMatch(/^must be an origin such as/);
  });
});

describe('origins: the same wildcard in two limiters', () => {
  it('refuses a wildcard a later limiter lists as an earlier one does, which it never matched', () => {
    const config = {
      limiters: {
        first: { origins: ['*.example.com', 'https://*.example.org'] },
        second: { origins: ['*.EXAMPLE.com.', 'https://*.example.org:443', '*.api.example.com'] },
      },
    };
    for (const error of [
      configError(() => parseConfig(config)),
      configError(() => new RateLimiterRegistry(config)),
    ]) {
      expect(error.issues).toEqual([
        {
          path: 'limiters.second.origins.0',
          message:
            '*.example.com is already covered by limiter "first" (the same wildcard: here it would match nothing)',
          received: '*.EXAMPLE.com.',
        },
        {
          path: 'limiters.second.origins.1',
          message:
            'https://*.example.org is already covered by limiter "first" (the same wildcard: here it would match nothing)',
          received: 'https://*.example.org:443',
        },
      ]);
    }
  });

  it('still takes wildcards that only overlap, and one limiter listing a wildcard twice', () => {
    const registry = new RateLimiterRegistry(
      parseConfig({
        limiters: {
          wide: { origins: ['*.example.com', '*.example.com'] },
          narrow: { origins: ['*.api.example.com', 'https://*.example.com:8443', 'http://*.example.com'] },
        },
      }),
    );
    // The closest wildcard wins, whichever limiter was declared first.
    expect(registry.limiterFor('https://a.api.example.com')).toBe(registry.get('narrow'));
    expect(registry.limiterFor('https://www.example.com:8443')).toBe(registry.get('narrow'));
    expect(registry.limiterFor('http://www.example.com')).toBe(registry.get('narrow'));
    expect(registry.limiterFor('https://www.example.com')).toBe(registry.get('wide'));
  });
});

describe('appsettings.json: keys that ignore case, as .NET reads them', () => {
  it('refuses the section given twice in different cases, which dropped the later one', () => {
    const error = configError(() =>
      parseConfig({
        AdaptiveRateLimiting: { Limiters: { A: { Origins: ['https://a.example.com'] } } },
        adaptiveRateLimiting: { Limiters: { B: { Origins: ['https://b.example.com'] } } },
      }),
    );
    expect(error.issues).toEqual([
      {
        path: 'adaptiveRateLimiting',
        message: 'duplicates key "AdaptiveRateLimiting"',
        received: { Limiters: { B: { Origins: ['https://b.example.com'] } } },
      },
    ]);
  });

  it('refuses limiter and budget names that differ only in case in a .NET section, one key to .NET', () => {
    const error = configError(() =>
      parseConfig({
        AdaptiveRateLimiting: {
          Limiters: { GitHub: { Origins: ['https://api.github.com'] }, github: { MaxWait: '00:00:10' } },
          Default: {
            Budgets: { Tokens: { InitialUnitsPerMinute: 10 }, tokens: { InitialUnitsPerMinute: 20 } },
          },
        },
      }),
    );
    expect(error.issues.map((i) => [i.path, i.message])).toEqual([
      [
        'AdaptiveRateLimiting.Limiters.github',
        'duplicates key "GitHub": .NET\'s configuration keys ignore case, so RateLimiting.Adaptive reads the two as one',
      ],
      [
        'AdaptiveRateLimiting.Default.Budgets.tokens',
        'duplicates key "Tokens": .NET\'s configuration keys ignore case, so RateLimiting.Adaptive reads the two as one',
      ],
    ]);
  });

  it('reads a list of numbers written as strings, as it reads a number field so written', () => {
    const config = parseConfig({
      AdaptiveRateLimiting: { MaxAttempts: '3', ThrottleStatuses: ['429', ' 503 '] },
    });
    expect(config.throttleStatuses).toEqual([429, 503]);
    expect(config.maxAttempts).toBe(3);
    const error = configError(() =>
      parseConfig({ AdaptiveRateLimiting: { ThrottleStatuses: ['429', 'x', '200'] } }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['AdaptiveRateLimiting.ThrottleStatuses.1', 'x'],
      ['AdaptiveRateLimiting.ThrottleStatuses.2', 200],
    ]);
    // Our own shape takes numbers only, as before.
    expect(configError(() => parseConfig({ throttleStatuses: ['429'] })).issues[0]?.path).toBe(
      'throttleStatuses.0',
    );
  });

  it('keeps names that differ in case as two limiters in this library’s own shape', () => {
    const config = parseConfig({ limiters: { GitHub: {}, github: {} } });
    expect(Object.keys(config.limiters)).toEqual(['GitHub', 'github']);
  });
});
