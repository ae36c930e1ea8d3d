import { readFile } from 'node:fs/promises';
import {
  getLocation,
  type Node,
  type ParseError,
  parseTree,
  printParseErrorCode,
  stripComments,
} from 'jsonc-parser';
import { ConfigError, type ConfigIssue, configPath } from '../errors.js';
import { isCredentialName, MASK } from '../redact.js';
import { parseConfig, type RateLimitConfig } from './schema.js';

/**
 * Reads a rate limit config from a JSON file: our shape, or an `appsettings.json` with an
 * `AdaptiveRateLimiting` section (see {@link parseConfig}). As .NET's configuration reader does,
 * it allows a byte order mark, `//` and `/* *\/` comments and trailing commas (read by
 * Microsoft's `jsonc-parser`, the parser of VS Code's settings files).
 *
 * @throws {ConfigError} naming the file: for an empty file, for the first JSON syntax error (with
 * its line and column and the text at it), or listing every bad field. A file that cannot be read
 * rejects with the `fs` error.
 */
export async function loadConfig(path: string): Promise<RateLimitConfig> {
  const source = `rate limit config file ${path}`;
  const text = (await readFile(path, 'utf8')).replace(/^\uFEFF/, '');
  // An empty file (nothing but spaces or comments) was `not valid JSON: ValueExpected at line 1,
  // column 1 (received undefined)`.
  if (stripComments(text).trim() === '') {
    const issue = {
      path: '',
      message: 'must be a JSON object (the config), received an empty file',
      received: '',
    };
    throw new ConfigError([issue], source);
  }
  const errors: ParseError[] = [];
  const tree = parseTree(text, errors, { allowTrailingComma: true, disallowComments: false });
  // The first syntax error only, with the text at it: those after it follow from it (a key in
  // single quotes gave three, each `(received undefined)`).
  const [first] = errors;
  if (first !== undefined) {
    const issue = {
      path: '',
      message: `must be valid JSON: ${printParseErrorCode(first.error)} at ${lineAndColumn(text, first.offset)}`,
      received: textAt(text, first),
    };
    throw new ConfigError([issue], source);
  }
  const duplicates: ConfigIssue[] = [];
  const value = tree === undefined ? undefined : jsonValue(tree, text, [], duplicates);
  try {
    const config = parseConfig(value);
    if (duplicates.length === 0) return config;
  } catch (error) {
    if (error instanceof ConfigError) throw new ConfigError([...duplicates, ...error.issues], source);
    throw error;
  }
  throw new ConfigError(duplicates, source);
}

/** How long a word at a syntax error is shown (`10s`'s `s`, `'limiters'`), at most. */
const SHOWN_TEXT = 40;

/**
 * The text at a syntax error, as its message shows it: the file may be a whole appsettings.json,
 * whose other sections hold secrets (`"ConnectionStrings": { "Db": "...;Password=..."`), and the
 * redaction of `received` cannot tell them in a bare piece of text. So a string's text is never
 * shown (a string not closed ran to the end of its line: the rest of a one-line file), a value
 * under a credential's name (`"Password": hunter2`) is masked, and any other text is cut at its
 * line's end and {@link SHOWN_TEXT} characters.
 */
function textAt(text: string, error: ParseError): string {
  const at = text.slice(error.offset, error.offset + error.length);
  if (at === '') return 'the end of the file';
  const { path, isAtPropertyKey } = getLocation(text, error.offset);
  if (path.some((key) => typeof key === 'string' && isCredentialName(key))) return MASK;
  if (!isAtPropertyKey && (at.startsWith('"') || at.startsWith("'"))) return `${at[0]}...`;
  const line = at.split(/\r?\n/, 1)[0] ?? '';
  return line.length > SHOWN_TEXT ? `${line.slice(0, SHOWN_TEXT)}...` : line;
}

function lineAndColumn(text: string, offset: number): string {
  const before = text.slice(0, offset);
  return `line ${before.split('\n').length}, column ${offset - before.lastIndexOf('\n')}`;
}

/**
 * The value of a parsed JSON node, with every key an own property, as `JSON.parse` makes them:
 * jsonc-parser's own values assign keys, so a `"__proto__"` key would set an object's prototype
 * and vanish, where `parseConfig` must see it to report it. A key given twice in one object is
 * an issue at its path (`duplicates`): JSON keeps the last one, which dropped the first in
 * silence (a limiter, its origins, a field), and .NET's configuration reader refuses such a file.
 */
function jsonValue(node: Node, text: string, path: readonly string[], duplicates: ConfigIssue[]): unknown {
  if (node.type === 'array')
    return (node.children ?? []).map((child, i) => jsonValue(child, text, [...path, String(i)], duplicates));
  if (node.type !== 'object') return node.value;
  const object: Record<string, unknown> = {};
  const seen = new Map<string, number>();
  for (const property of node.children ?? []) {
    const [key, value] = property.children ?? [];
    if (key === undefined) continue;
    const name = String(key.value);
    const item = value === undefined ? undefined : jsonValue(value, text, [...path, name], duplicates);
    const first = seen.get(name);
    if (first !== undefined) {
      duplicates.push({
        path: configPath([...path, name]),
        message: `key given twice (first at ${lineAndColumn(text, first)}): JSON keeps only the last, so give it once`,
        received: item,
      });
    } else seen.set(name, key.offset);
    Object.defineProperty(object, name, {
      value: item,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return object;
}
