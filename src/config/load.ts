import { readFile } from 'node:fs/promises';
import { type ParseError, parse, printParseErrorCode } from 'jsonc-parser';
import { ConfigError } from '../errors.js';
import { parseConfig, type RateLimitConfig } from './schema.js';

/**
 * Reads a rate limit config from a JSON file: our shape, or an `appsettings.json` with an
 * `AdaptiveRateLimiting` section (see {@link parseConfig}). As .NET's configuration reader does,
 * it allows a byte order mark, `//` and `/* *\/` comments and trailing commas (read by
 * Microsoft's `jsonc-parser`, the parser of VS Code's settings files).
 *
 * @throws {ConfigError} naming the file: for a JSON syntax error (with its line and column), or
 * listing every bad field. A file that cannot be read rejects with the `fs` error.
 */
export async function loadConfig(path: string): Promise<RateLimitConfig> {
  const source = `rate limit config file ${path}`;
  const text = (await readFile(path, 'utf8')).replace(/^\uFEFF/, '');
  const errors: ParseError[] = [];
  const json: unknown = parse(text, errors, { allowTrailingComma: true, disallowComments: false });
  if (errors.length > 0) {
    const issues = errors.map((e) => ({
      path: '',
      message: `not valid JSON: ${printParseErrorCode(e.error)} at ${lineAndColumn(text, e.offset)}`,
      received: undefined,
    }));
    throw new ConfigError(issues, source);
  }
  try {
    return parseConfig(json);
  } catch (error) {
    if (error instanceof ConfigError) throw new ConfigError(error.issues, source);
    throw error;
  }
}

function lineAndColumn(text: string, offset: number): string {
  const before = text.slice(0, offset);
  return `line ${before.split('\n').length}, column ${offset - before.lastIndexOf('\n')}`;
}
