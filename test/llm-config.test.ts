import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { rateLimitedFetch } from '../src/http/fetch.js';

describe('api and budgets in config', () => {
  it('parses api (in any case), budgets and a reserve duration from JSON', () => {
    const config = parseConfig({
      limiters: {
        openai: { origins: ['https://api.openai.com'], api: 'OpenAI', reserve: '2s' },
        other: {
          origins: ['https://api.example.com'],
          budgets: { requests: { initialUnitsPerMinute: 60 }, tokens: { burst: 'announced' } },
        },
      },
    });
    expect(config.limiters.openai).toMatchObject({ api: 'openai', reserve: 2_000 });
    expect(config.limiters.other?.budgets).toEqual({
      requests: { initialUnitsPerMinute: 60 },
      tokens: { burst: 'announced' },
    });
  });

  it('names a bad api, a bad budget field and an empty budgets object', () => {
    const error = (() => {
      try {
        parseConfig({
          limiters: {
            a: { origins: ['https://a.example.com'], api: 'gemini' },
            b: { origins: ['https://b.example.com'], budgets: { tokens: { initialUnitsPerMinute: -1 } } },
            c: { origins: ['https://c.example.com'], budgets: {} },
          },
        });
      } catch (e) {
        return e;
      }
    })() as ConfigError;
    expect(error).toBeInstanceOf(ConfigError);
    const paths = error.issues.map((i) => i.path);
    expect(paths).toEqual(
      expect.arrayContaining([
        'limiters.a.api',
        'limiters.b.budgets.tokens.initialUnitsPerMinute',
        'limiters.c.budgets',
      ]),
    );
  });

  // Regression: `budgets` replaced the API's budgets whole. Naming only `requests` dropped the
  // token budgets (calls went unmetered); naming `tokens` for Anthropic made every call fail
  // with acquire()'s "costs.input_tokens: no such budget".
  it("sets fields of the API's budgets with budgets, by name, and names a budget the API has not", () => {
    const f = rateLimitedFetch({
      limiters: {
        anthropic: {
          origins: ['https://api.anthropic.com'],
          api: 'anthropic',
          budgets: { output_tokens: { maxUnitsPerMinute: 8_000 }, requests: { initialUnitsPerMinute: 50 } },
        },
      },
    });
    const snapshot = f.registry.get('anthropic')?.snapshot();
    expect(snapshot?.budget).toBe('requests');
    expect(snapshot?.rate).toBe(50);
    expect(Object.keys(snapshot?.budgets ?? {})).toEqual(['requests', 'input_tokens', 'output_tokens']);
    expect(snapshot?.budgets?.output_tokens?.maxRate).toBe(8_000);
    f.close();
    const json = { origins: ['https://api.anthropic.com'], api: 'anthropic', budgets: { tokens: {} } };
    for (const make of [
      () => rateLimitedFetch({ limiters: { anthropic: json as never } }),
      () => rateLimitedFetch(parseConfig({ limiters: { anthropic: json } })),
    ]) {
      expect(make).toThrow(
        /limiters\.anthropic\.budgets\.tokens: not a budget of api 'anthropic' \(its budgets: requests, input_tokens, output_tokens\)/,
      );
    }
  });

  // Regression: appsettings.json's Budgets were unknown keys ("expected one of: ", nothing listed).
  it("reads appsettings.json's Budgets, their fields and names in any case, and lists a budget's keys", () => {
    const config = parseConfig({
      AdaptiveRateLimiting: {
        Limiters: {
          OpenAI: {
            Origins: ['https://api.openai.com'],
            Api: 'OpenAI',
            Budgets: { Tokens: { MaxUnitsPerMinute: 30_000, Probe: { ProbeStep: 50 } } },
          },
        },
      },
    });
    expect(config.limiters.OpenAI?.budgets).toEqual({
      Tokens: { maxUnitsPerMinute: 30_000, probe: { probeStep: 50 } },
    });
    const f = rateLimitedFetch(config);
    expect(f.registry.get('OpenAI')?.snapshot().budgets?.tokens?.maxRate).toBe(30_000);
    f.close();
    expect(() =>
      parseConfig({
        AdaptiveRateLimiting: { Limiters: { a: { Budgets: { Tokens: { MaxUnitsPerMin: 1 } } } } },
      }),
    ).toThrow(/Budgets\.Tokens\.MaxUnitsPerMin: unknown key \(.*maxUnitsPerMinute/);
  });

  // Regression: "in any case" held for `Tokens` only: appsettings.json's `InputTokens` (its
  // PascalCase of input_tokens) was "not a budget of api 'anthropic'"; and two spellings of one
  // budget (`tokens`, `Tokens`) kept one and dropped the other in silence.
  it("reads Anthropic's budgets as appsettings.json writes them (InputTokens), and names a budget given twice", () => {
    const config = parseConfig({
      AdaptiveRateLimiting: {
        Limiters: {
          Claude: {
            Origins: ['https://api.anthropic.com'],
            Api: 'Anthropic',
            Budgets: {
              InputTokens: { MaxUnitsPerMinute: 20_000 },
              OutputTokens: { MaxUnitsPerMinute: 4_000 },
            },
          },
        },
      },
    });
    const f = rateLimitedFetch(config);
    const budgets = f.registry.get('Claude')?.snapshot().budgets;
    expect(budgets?.input_tokens?.maxRate).toBe(20_000);
    expect(budgets?.output_tokens?.maxRate).toBe(4_000);
    f.close();
    expect(() =>
      rateLimitedFetch({
        limiters: {
          o: {
            origins: ['https://api.openai.com'],
            api: 'openai',
            budgets: { tokens: { maxUnitsPerMinute: 1_000 }, Tokens: { maxUnitsPerMinute: 2_000 } },
          },
        },
      }),
    ).toThrow(/limiters\.o\.budgets\.Tokens: budget 'tokens' given twice \(as tokens and Tokens\)/);
  });

  // Regression: parseConfig (which "throws one ConfigError listing every bad field") passed a
  // budget the API has not and `api` next to `shared`; only the adapter refused them, later.
  it('parseConfig names a budget the API has not, and api next to shared, as the adapters do', () => {
    const issuesOf = (json: unknown) => {
      try {
        parseConfig(json);
      } catch (e) {
        return (e as ConfigError).issues.map((i) => `${i.path}: ${i.message}`);
      }
      return [];
    };
    expect(
      issuesOf({
        limiters: {
          a: { origins: ['https://api.anthropic.com'], api: 'anthropic', budgets: { tokens: {} } },
          o: {
            origins: ['https://api.openai.com'],
            api: 'openai',
            shared: { redis: 'redis://127.0.0.1:6379' },
          },
        },
      }),
    ).toEqual([
      expect.stringMatching(/^limiters\.a\.budgets\.tokens: not a budget of api 'anthropic'/),
      expect.stringMatching(/^limiters\.o\.api: not with `shared`/),
    ]);
    expect(
      issuesOf({
        AdaptiveRateLimiting: {
          Limiters: {
            A: { Origins: ['https://api.openai.com'], Api: 'OpenAI', Budgets: { Input_Tokens: {} } },
          },
        },
      }),
    ).toEqual([
      expect.stringMatching(
        /^AdaptiveRateLimiting\.Limiters\.A\.Budgets\.Input_Tokens: not a budget of api 'openai'/,
      ),
    ]);
  });

  it('builds the api preset in code, and names a bad api', () => {
    const f = rateLimitedFetch({
      limiters: { openai: { origins: ['https://api.openai.com'], api: 'openai' } },
    });
    const snapshot = f.registry.get('openai')?.snapshot();
    expect(snapshot?.budget).toBe('requests');
    expect(Object.keys(snapshot?.budgets ?? {})).toEqual(['requests', 'tokens']);
    f.close();
    expect(() =>
      rateLimitedFetch({ limiters: { x: { origins: ['https://x.example.com'], api: 'gemini' as never } } }),
    ).toThrow(/limiters\.x\.api: must be 'openai' or 'anthropic'/);
  });
});
