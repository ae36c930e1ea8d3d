import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import { ConfigError } from '../src/errors.js';

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
