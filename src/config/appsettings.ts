import type { z } from 'zod';
import { type ConfigIssue, configPath } from '../errors.js';
import { durationSchema } from './duration.js';
import { isRecord, PROTO_MESSAGE, unknownKeyMessage } from './rules.js';

/** The key of RateLimiting.Adaptive's `appsettings.json` section (matched without regard to case). */
export const APPSETTINGS_SECTION = 'AdaptiveRateLimiting';

/**
 * The config in `json`: its `AdaptiveRateLimiting` section (`prefix` that key) when it has one,
 * else `json` itself. The section given twice in different cases (`"AdaptiveRateLimiting"` and
 * `"adaptiveRateLimiting"`, one key to .NET) is an issue at the later one, not a section dropped.
 */
export function unwrapSection(
  json: unknown,
  issues: ConfigIssue[] = [],
): { section: unknown; prefix: string[] } {
  if (isRecord(json)) {
    const [key, ...more] = Object.keys(json).filter(
      (k) => k.toLowerCase() === APPSETTINGS_SECTION.toLowerCase(),
    );
    for (const other of more) {
      issues.push({ path: other, message: `duplicates key "${key}"`, received: json[other] });
    }
    if (key !== undefined) return { section: json[key], prefix: [key] };
  }
  return { section: json, prefix: [] };
}

/**
 * Whether a config is a .NET `appsettings.json` section: it came in the file's
 * `AdaptiveRateLimiting` key (`prefix` not empty), or one of its top-level keys is written in
 * PascalCase (`"Limiters"`, `"Default"`), as .NET writes them.
 */
export function isDotnetSection(section: unknown, prefix: readonly string[]): boolean {
  if (prefix.length > 0) return true;
  return isRecord(section) && Object.keys(section).some((key) => /^[A-Z]/.test(key));
}

/** The known keys of one object level of the config, and the levels below it. */
export interface Level {
  /** Lower-case key to its canonical (camelCase) spelling. */
  keys: ReadonlyMap<string, string>;
  /**
   * The canonical keys whose value is a number (whole or not), a list of them, a boolean, `false`
   * alone or beside a number or an object, or a duration (see {@link dotnetValue}).
   */
  kinds: ReadonlyMap<string, Kind>;
  /** Keys whose value is an object of this kind. */
  objects?: Readonly<Record<string, Level>>;
  /** Keys whose value maps names (kept as written) to objects of this kind. */
  records?: Readonly<Record<string, Level>>;
}

/**
 * What a key's value is, for the values .NET's binder reads from strings (`whole`: an `int`):
 * `'false'` a field that takes `false` but not `true` (`headers`, `partitionBy`, `default`),
 * `'number-or-false'` / `'whole-or-false'` one that takes a number or `false` (`slowStart`).
 */
type Kind =
  | 'number'
  | 'numbers'
  | 'whole'
  | 'wholes'
  | 'boolean'
  | 'false'
  | 'number-or-false'
  | 'whole-or-false'
  | 'duration';

export function level(schema: { shape: object }, more: Omit<Level, 'keys' | 'kinds'> = {}): Level {
  const kinds = new Map<string, Kind>();
  for (const [key, field] of Object.entries(schema.shape)) {
    const kind = valueKind(field);
    if (kind !== undefined) kinds.set(key, kind);
  }
  return { keys: new Map(Object.keys(schema.shape).map((k) => [k.toLowerCase(), k])), kinds, ...more };
}

/**
 * Whether a field's schema takes a number (`whole` with `.int()`), a list of numbers, a boolean,
 * `false` (among its options: `headers`, `partitionBy`, `default`; beside a number: `slowStart`),
 * or a duration (`durationSchema`), under its wrappers.
 */
function valueKind(field: unknown): Kind | undefined {
  let node = field as z.ZodType | undefined;
  for (let depth = 0; node !== undefined && depth < 8; depth++) {
    if (node === durationSchema) return 'duration';
    const def = node._zod.def as {
      type: string;
      innerType?: z.ZodType;
      in?: z.ZodType;
      out?: z.ZodType;
      element?: z.ZodType;
      options?: z.ZodType[];
      values?: unknown[];
    };
    if (def.type === 'number') return (node as z.ZodNumber).isInt ? 'whole' : 'number';
    if (def.type === 'boolean') return 'boolean';
    if (def.type === 'literal' && def.values?.includes(false)) return 'false';
    // A number or a literal (`maxUnitsPerMinute`: a number, or Infinity): a number; a number or
    // false (`slowStart`: a whole number, or false): both read.
    if (def.type === 'union') {
      const kinds = def.options?.map(valueKind) ?? [];
      const orFalse = kinds.includes('false') || kinds.includes('boolean');
      if (kinds.includes('whole')) return orFalse ? 'whole-or-false' : 'whole';
      if (kinds.includes('number')) return orFalse ? 'number-or-false' : 'number';
      return kinds.includes('boolean') ? 'boolean' : kinds.includes('false') ? 'false' : undefined;
    }
    if (def.type === 'array') {
      const element = valueKind(def.element);
      return element === 'number' ? 'numbers' : element === 'whole' ? 'wholes' : undefined;
    }
    // A preprocess (`headers` in any case): the schema after it.
    node = def.type === 'pipe' && def.in?._zod.def.type === 'transform' ? def.out : (def.innerType ?? def.in);
  }
  return undefined;
}

/**
 * A number as .NET's binder reads one from a string: decimal, invariant culture, an optional
 * exponent (`1500`, `0.5`, `1e3`). `Number()` alone also reads `0x10`, `0b11` and `0o7`, and an
 * empty string as 0; the simulator's flags are read by this too.
 */
export const NUMBER_TEXT = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
/**
 * A whole number as .NET's binder reads an `int` from a string (`int.Parse`, `NumberStyles.Integer`):
 * digits, an optional sign, spaces around. `"5.0"` and `"1e3"` are refused there, so here too.
 */
const WHOLE_TEXT = /^\s*[+-]?\d+\s*$/;
/** A boolean as .NET's `bool.Parse` reads one from a string: `true` or `false` in any case, spaces around. */
const BOOLEAN_TEXT = /^\s*(?:true|false)\s*$/i;
/** `false` as {@link BOOLEAN_TEXT} reads it. */
const FALSE_TEXT = /^\s*false\s*$/i;
/** A duration written as a bare number in a string: .NET's `TimeSpan` reads `"30"` as 30 days. */
const BARE_DURATION = /^\s*\d+(?:\.\d+)?\s*$/;

/**
 * The value of a key of kind `kind` as read from a .NET `appsettings.json` (see
 * {@link canonicalKeys}): a number written as a string (`"2700"`) is that number, and a boolean
 * (`"true"`, `"False"`) that boolean, as .NET's configuration binder reads them; a duration written as a bare number in a string is an issue,
 * because .NET reads `"30"` as 30 days where this library's own JSON reads it as 30 ms.
 */
function dotnetValue(
  value: unknown,
  kind: Kind | undefined,
  path: readonly string[],
  issues: ConfigIssue[],
): unknown {
  // A list of numbers (`"ThrottleStatuses": ["429", "503"]`): each as a number field.
  if ((kind === 'numbers' || kind === 'wholes') && Array.isArray(value)) {
    const each = kind === 'numbers' ? 'number' : 'whole';
    return value.map((item, i) => dotnetValue(item, each, [...path, String(i)], issues));
  }
  if (typeof value !== 'string') return value;
  const number = kind === 'number' || kind === 'number-or-false';
  const whole = kind === 'whole' || kind === 'whole-or-false';
  if (number && NUMBER_TEXT.test(value.trim())) return Number(value.trim());
  if (whole && WHOLE_TEXT.test(value)) return Number(value.trim());
  if (whole && NUMBER_TEXT.test(value.trim())) {
    issues.push({
      path: configPath(path),
      message: `must be a whole number written in digits, as .NET's binder reads an int: it refuses a decimal point or an exponent`,
      received: value,
    });
  }
  // `"FailClosed": "true"` (an environment variable's value is always a string): refused as
  // `must be true or false (received "true")`, where .NET's binder reads it as true.
  if (kind === 'boolean' && BOOLEAN_TEXT.test(value)) return value.trim().toLowerCase() === 'true';
  // A field that takes false but not true (`"SlowStart": "false"`, `"Default": "false"`): only
  // "false" is read; "True" stays the string it was, refused as written (not as `true`).
  if ((kind === 'false' || kind === 'number-or-false' || kind === 'whole-or-false') && FALSE_TEXT.test(value))
    return false;
  if (kind === 'duration' && BARE_DURATION.test(value)) {
    const n = value.trim();
    issues.push({
      path: configPath(path),
      message: `a bare number in a string is a number of days to .NET's TimeSpan and of ms to this library: write "00:00:${n.padStart(2, '0')}", "${n}s" or "${n}ms" (or the number ${n}, in ms)`,
      received: value,
    });
  }
  return value;
}

/**
 * A copy of `value` with the keys of `lvl` in their canonical spelling. `written` remembers, per
 * copied object, how each key was written, so issues name the path as the user wrote it.
 * `dotnet`: the value is a .NET `appsettings.json` section (see {@link isDotnetSection}): numbers
 * written as strings are read as numbers, and a duration written as a bare number in a string
 * is an issue (see `dotnetValue`).
 */
export function canonicalKeys(
  value: unknown,
  lvl: Level,
  written: WeakMap<object, ReadonlyMap<string, string>>,
  issues: ConfigIssue[],
  path: readonly string[] = [],
  dotnet = false,
): unknown {
  if (!isRecord(value)) return value;
  const out: Record<string, unknown> = {};
  const spelled = new Map<string, string>();
  for (const [key, v] of Object.entries(value)) {
    // JSON.parse makes "__proto__" an own key; copied, it would set the copy's prototype.
    if (key === '__proto__') {
      issues.push({ path: configPath([...path, key]), message: PROTO_MESSAGE, received: v });
      continue;
    }
    const name = lvl.keys.get(key.toLowerCase()) ?? key;
    const other = spelled.get(name);
    if (other !== undefined) {
      issues.push({ path: configPath([...path, key]), message: `duplicates key "${other}"`, received: v });
      continue;
    }
    spelled.set(name, key);
    // Own keys only: `constructor` or `hasOwnProperty` is an unknown key, not a level.
    const objectLevel = ownValue(lvl.objects, name);
    const recordLevel = ownValue(lvl.records, name);
    // An object level given no object (`"Default": "false"`) is read as any other value.
    if (objectLevel && isRecord(v))
      out[name] = canonicalKeys(v, objectLevel, written, issues, [...path, key], dotnet);
    else if (recordLevel && isRecord(v)) {
      // In a .NET section, names (limiters, budgets) are keys that ignore case as every other.
      const names = new Map<string, string>();
      const entries = Object.entries(v).flatMap(([k, item]) => {
        const same = dotnet ? names.get(k.toLowerCase()) : undefined;
        if (same !== undefined) {
          issues.push({
            path: configPath([...path, key, k]),
            message: `duplicates key "${same}": .NET's configuration keys ignore case, so RateLimiting.Adaptive reads the two as one`,
            received: item,
          });
          return [];
        }
        names.set(k.toLowerCase(), k);
        if (k !== '__proto__')
          return [[k, canonicalKeys(item, recordLevel, written, issues, [...path, key, k], dotnet)]];
        issues.push({ path: configPath([...path, key, k]), message: PROTO_MESSAGE, received: item });
        return [];
      });
      out[name] = Object.fromEntries(entries);
    } else out[name] = dotnet ? dotnetValue(v, lvl.kinds.get(name), [...path, key], issues) : v;
  }
  written.set(out, spelled);
  return out;
}

/** The issue path as the user wrote it: each canonical key back in its own spelling. */
export function writtenPath(
  input: unknown,
  path: readonly PropertyKey[],
  written: WeakMap<object, ReadonlyMap<string, string>>,
): string[] {
  const out: string[] = [];
  let node = input;
  for (const key of path) {
    const name = String(key);
    out.push((isRecord(node) ? written.get(node)?.get(name) : undefined) ?? name);
    node = isRecord(node) || Array.isArray(node) ? (node as Record<string, unknown>)[name] : undefined;
  }
  return out;
}

type ZodIssue = z.core.$ZodIssue;

/**
 * One issue per bad field: an unknown key becomes an issue at that key, and a failed union
 * (`default`: `false` or an object) reports the errors of the branch the value was meant for.
 * `root` is the config's top {@link Level}, for the keys an unknown key's issue lists.
 */
export function expandIssues(
  issues: readonly ZodIssue[],
  root: Level,
  base: readonly PropertyKey[] = [],
): ZodIssue[] {
  return issues.flatMap((issue): ZodIssue[] => {
    const path = [...base, ...issue.path];
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({
        code: 'custom',
        path: [...path, key],
        message:
          key.toLowerCase() === 'limiter' && path.length === 2 && path[0] === 'limiters'
            ? 'a limiter instance cannot come from JSON config: set `limiter` in code (RateLimiterRegistry or the HTTP adapters), or declare a budget shared through Redis with `shared`'
            : unknownKeyMessage(key, knownKeys(root, path)),
      }));
    }
    if (issue.code === 'invalid_union') {
      const meant = issue.errors.find(
        (branch) => !branch.some((i) => i.path.length === 0 && isTypeMismatch(i)),
      );
      if (meant) return expandIssues(meant, root, path);
      // The union's own message (`headers`, `partitionBy`, `default`: each says what it takes).
      return [{ ...issue, path }];
    }
    return [{ ...issue, path }];
  });
}

function isTypeMismatch(issue: ZodIssue): boolean {
  return issue.code === 'invalid_type' || issue.code === 'invalid_value';
}

/** The canonical keys of the object at `path` of the config whose top level is `root`. */
function knownKeys(root: Level, path: readonly PropertyKey[]): string[] {
  let lvl: Level | undefined = root;
  for (let i = 0; i < path.length && lvl; i++) {
    const key = String(path[i]);
    const record = ownValue(lvl.records, key);
    if (record) {
      lvl = record;
      i++;
    } else lvl = ownValue(lvl.objects, key);
  }
  return lvl ? [...lvl.keys.values()] : [];
}

/** `levels[key]` when it is an own key of `levels` (never a member of Object.prototype). */
function ownValue(levels: Readonly<Record<string, Level>> | undefined, key: string): Level | undefined {
  return levels !== undefined && Object.hasOwn(levels, key) ? levels[key] : undefined;
}
