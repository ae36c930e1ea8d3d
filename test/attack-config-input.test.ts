import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { configError } from './helpers/config-error.js';

// Configuration input a realistic user gives: an appsettings.json section (or the environment
// variables .NET maps onto it, every value a string). A bad value is refused naming the field and
// the value with "must be ..."; a good one is read as .NET reads it.

const origins = ['https://api.example.com'];

describe('parseConfig: booleans written as strings in an appsettings.json section', () => {
  it('reads "true" / "False" as .NET\'s binder does, as it reads numbers written as strings', () => {
    // Refused as `must be true or false (received "true")`, a message that contradicts itself.
    const config = parseConfig({
      AdaptiveRateLimiting: {
        Limiters: {
          a: { Origins: origins, Shared: { Redis: 'redis://127.0.0.1:6379', FailClosed: 'true' } },
          b: { Origins: ['https://b.example.com'], Headers: 'False', PartitionBy: ' false ' },
        },
      },
    });
    expect(config.limiters.a?.shared?.failClosed).toBe(true);
    expect(config.limiters.b?.headers).toBe(false);
    expect(config.limiters.b?.partitionBy).toBe(false);
  });

  it('still refuses another string, naming the field and the value', () => {
    const error = configError(() =>
      parseConfig({
        AdaptiveRateLimiting: {
          Limiters: {
            a: { Origins: origins, Shared: { Redis: 'redis://127.0.0.1:6379', FailClosed: 'yes' } },
          },
        },
      }),
    );
    expect(error.issues).toEqual([
      {
        path: 'AdaptiveRateLimiting.Limiters.a.Shared.FailClosed',
        message: 'must be true or false',
        received: 'yes',
      },
    ]);
  });

  it('reads "false" for a field that takes a number or false (SlowStart) and for Default', () => {
    // SlowStart (10, or false: none) was read as a number field only, and `default` (an object,
    // or false) as an object level only: both refused "false" as `must be ... or false (received
    // "false")`, where .NET's binder (and an environment variable) gives every value as a string.
    const config = parseConfig({
      AdaptiveRateLimiting: {
        Default: 'False',
        Limiters: {
          a: { Origins: origins, SlowStart: ' false ' },
          b: { Origins: ['https://b.example.com'], SlowStart: '5' },
        },
      },
    });
    expect(config.default).toBe(false);
    expect(config.limiters.a?.slowStart).toBe(false);
    expect(config.limiters.b?.slowStart).toBe(5);
  });

  it('tells "true" for a field that takes false alone as it was written, not as the boolean true', () => {
    // `Headers: "True"` was told `(received true)`: the string read as a boolean, then refused.
    const error = configError(() =>
      parseConfig({
        AdaptiveRateLimiting: {
          Default: 'true',
          Limiters: { a: { Origins: origins, Headers: 'True', PartitionBy: 'true', SlowStart: 'TRUE' } },
        },
      }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([
      ['AdaptiveRateLimiting.Limiters.a.SlowStart', 'TRUE'],
      ['AdaptiveRateLimiting.Limiters.a.PartitionBy', 'true'],
      ['AdaptiveRateLimiting.Limiters.a.Headers', 'True'],
      ['AdaptiveRateLimiting.Default', 'true'],
    ]);
  });

  it('leaves our own JSON as it was: a boolean there is a boolean, not a string', () => {
    const error = configError(() =>
      parseConfig({
        limiters: { a: { origins, shared: { redis: 'redis://127.0.0.1:6379', failClosed: 'true' } } },
      }),
    );
    expect(error.issues.map((i) => [i.path, i.received])).toEqual([['limiters.a.shared.failClosed', 'true']]);
  });
});

describe('parseConfig: an appsettings.json whose AdaptiveRateLimiting section is missing or misspelt', () => {
  const file = { Logging: { LogLevel: { Default: 'Information' } }, AllowedHosts: '*' };

  it('names the section meant for a misspelt one, not only our own keys', () => {
    // Was `AdaptiveRateLimitting: unknown key (expected one of: limiters, default, maxAttempts, ...)`:
    // no word of the section the file was meant to hold.
    const error = configError(() => parseConfig({ ...file, AdaptiveRateLimitting: { Limiters: {} } }));
    const issue = error.issues.find((i) => i.path === 'AdaptiveRateLimitting');
    expect(issue?.message).toBe(
      'unknown key (did you mean "AdaptiveRateLimiting"? expected one of: limiters, default, maxAttempts, throttleStatuses, maxReplayBodyBytes, rejection, AdaptiveRateLimiting)',
    );
  });

  it('lists the section among the keys expected when the file has none, and not inside the section', () => {
    const error = configError(() => parseConfig(file));
    expect(error.issues.map((i) => i.path)).toEqual(['Logging', 'AllowedHosts']);
    for (const issue of error.issues) expect(issue.message).toContain('AdaptiveRateLimiting)');
    const inside = configError(() => parseConfig({ AdaptiveRateLimiting: { Limitters: {} } }));
    expect(inside.issues[0]?.message).toBe(
      'unknown key (did you mean "limiters"? expected one of: limiters, default, maxAttempts, throttleStatuses, maxReplayBodyBytes, rejection)',
    );
  });
});

describe('loadConfig: a file that is not JSON', () => {
  async function loadError(text: string): Promise<ConfigError> {
    const dir = await mkdtemp(join(tmpdir(), 'arl-config-input-'));
    try {
      const file = join(dir, 'config.json');
      await writeFile(file, text);
      const error = await loadConfig(file).catch((e: unknown) => e);
      if (!(error instanceof ConfigError)) throw new Error(`expected a ConfigError, got ${String(error)}`);
      return error;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  it('says an empty file is empty, not "ValueExpected ... (received undefined)"', async () => {
    for (const text of ['', '  \n', '// to do\n', '\uFEFF']) {
      const error = await loadError(text);
      expect(error.issues).toEqual([
        { path: '', message: 'must be a JSON object (the config), received an empty file', received: '' },
      ]);
    }
  });

  it('names the first syntax error and the text at it, not each error that follows from it', async () => {
    // `{'limiters': {}}` gave three issues (InvalidSymbol, PropertyNameExpected, ValueExpected),
    // each `(received undefined)`.
    const quotes = await loadError("{'limiters': {}}");
    expect(quotes.issues).toEqual([
      { path: '', message: 'must be valid JSON: InvalidSymbol at line 1, column 2', received: "'limiters'" },
    ]);
    const unit = await loadError('{\n  "default": { "maxWait": 10s }\n}');
    expect(unit.issues).toEqual([
      { path: '', message: 'must be valid JSON: InvalidSymbol at line 2, column 29', received: 's' },
    ]);
    const cut = await loadError('{ "default": {}');
    expect(cut.issues).toEqual([
      {
        path: '',
        message: 'must be valid JSON: CloseBraceExpected at line 1, column 16',
        received: 'the end of the file',
      },
    ]);
  });
});

describe('loadConfig: the text at a syntax error, as its message shows it', () => {
  async function received(text: string): Promise<unknown> {
    const dir = await mkdtemp(join(tmpdir(), 'arl-config-secret-'));
    try {
      const file = join(dir, 'appsettings.json');
      await writeFile(file, text);
      const error = await loadConfig(file).catch((e: unknown) => e);
      if (!(error instanceof ConfigError)) throw new Error(`expected a ConfigError, got ${String(error)}`);
      expect(error.issues).toHaveLength(1);
      expect(error.message).not.toContain('hunter2');
      return error.issues[0]?.received;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  it("shows none of a string's text, nor a credential's value: an appsettings.json's other sections hold secrets", async () => {
    // A string not closed was shown to the end of its line (`"Server=db;Password=hunter2;...`),
    // 5,000 characters of a one-line file; an unquoted secret (`"Password": hunter2`) whole.
    const connection =
      '{\n  "ConnectionStrings": { "Db": "Server=db;Password=hunter2;Encrypt=true },\n  "AdaptiveRateLimiting": {}\n}';
    expect(await received(connection)).toBe('"...');
    expect(await received('{ "Smtp": { "Password": hunter2 } }')).toBe('***');
    expect(await received(`{ "Note": "${'x'.repeat(5_000)}`)).toBe('"...');
  });

  it('still shows a word that is no JSON, cut at 40 characters', async () => {
    expect(await received('{ "default": { "maxWait": 10s } }')).toBe('s');
    expect(await received(`{ "default": { "maxWait": ${'y'.repeat(100)} } }`)).toBe(`${'y'.repeat(40)}...`);
  });
});

describe('parseConfig: a budget of a limiter reads its fields as the limiter does', () => {
  const limiter = (budget: Record<string, unknown>) =>
    parseConfig({ limiters: { a: { origins, budgets: { tokens: budget } } } }).limiters.a?.budgets?.tokens;

  it('takes durations as strings, and names in any case, in a budget as at the limiter', () => {
    // Each was refused in a budget and taken at the limiter: `reserve: "1.5s"` (must be a finite
    // number >= 0), `aimd.increaseInterval: "10s"`, `controller: "Cubic"`, `burst: "Announced"`.
    expect(limiter({ reserve: '1.5s' })).toEqual({ reserve: 1_500 });
    expect(limiter({ aimd: { increaseInterval: '10s' } })).toEqual({ aimd: { increaseInterval: 10_000 } });
    expect(limiter({ controller: 'Cubic' })).toEqual({ controller: 'cubic' });
    expect(limiter({ burst: 'Announced' })).toEqual({ burst: 'announced' });
  });

  it('takes burst in any case at the limiter and in an appsettings.json section, as the other names', () => {
    expect(parseConfig({ default: { burst: 'Second' } }).default).toEqual({ burst: 'second' });
    const config = parseConfig({
      AdaptiveRateLimiting: {
        Limiters: {
          a: {
            Origins: origins,
            Burst: 'Announced',
            Budgets: { Tokens: { Reserve: '00:00:01.500', Burst: 'Paced' } },
          },
        },
      },
    });
    expect(config.limiters.a).toMatchObject({
      burst: 'announced',
      budgets: { Tokens: { reserve: 1_500, burst: 'paced' } },
    });
  });

  it("refuses a budget's bare number in a string in an appsettings.json section, as the limiter's", () => {
    // Read as 1,500 ms while a budget took the code's schema; .NET's TimeSpan reads it as 1,500 days.
    const error = configError(() =>
      parseConfig({
        AdaptiveRateLimiting: {
          Limiters: { a: { Origins: origins, Reserve: '1500', Budgets: { Tokens: { Reserve: '1500' } } } },
        },
      }),
    );
    expect(error.issues.map((i) => i.path)).toEqual([
      'AdaptiveRateLimiting.Limiters.a.Reserve',
      'AdaptiveRateLimiting.Limiters.a.Budgets.Tokens.Reserve',
    ]);
  });

  it('still names a bad value in a budget', () => {
    const error = configError(() => limiter({ reserve: '1.5 sec', burst: 'smooth' }));
    expect(error.issues.map((i) => [i.path, i.message, i.received])).toEqual([
      ['limiters.a.budgets.tokens.burst', "must be 'paced', 'second' or 'announced'", 'smooth'],
      [
        'limiters.a.budgets.tokens.reserve',
        'must be a duration such as 500, "500ms", "10s", "2m" or "00:00:10"',
        '1.5 sec',
      ],
    ]);
  });
});
