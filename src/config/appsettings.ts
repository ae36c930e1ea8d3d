import type { z } from 'zod';
import type { ConfigIssue } from '../errors.js';
import { isRecord, PROTO_MESSAGE, unknownKeyMessage } from './rules.js';

/** The key of RateLimiting.Adaptive's `appsettings.json` section (matched without regard to case). */
const APPSETTINGS_SECTION = 'AdaptiveRateLimiting';

export function unwrapSection(json: unknown): { section: unknown; prefix: string[] } {
  if (isRecord(json)) {
    const key = Object.keys(json).find((k) => k.toLowerCase() === APPSETTINGS_SECTION.toLowerCase());
    if (key !== undefined) return { section: json[key], prefix: [key] };
  }
  return { section: json, prefix: [] };
}

/** The known keys of one object level of the config, and the levels below it. */
export interface Level {
  /** Lower-case key to its canonical (camelCase) spelling. */
  keys: ReadonlyMap<string, string>;
  /** Keys whose value is an object of this kind. */
  objects?: Readonly<Record<string, Level>>;
  /** Keys whose value maps names (kept as written) to objects of this kind. */
  records?: Readonly<Record<string, Level>>;
}

export function level(schema: { shape: object }, more: Omit<Level, 'keys'> = {}): Level {
  return { keys: new Map(Object.keys(schema.shape).map((k) => [k.toLowerCase(), k])), ...more };
}

/**
 * A copy of `value` with the keys of `lvl` in their canonical spelling. `written` remembers, per
 * copied object, how each key was written, so issues name the path as the user wrote it.
 */
export function canonicalKeys(
  value: unknown,
  lvl: Level,
  written: WeakMap<object, ReadonlyMap<string, string>>,
  issues: ConfigIssue[],
  path: readonly string[] = [],
): unknown {
  if (!isRecord(value)) return value;
  const out: Record<string, unknown> = {};
  const spelled = new Map<string, string>();
  for (const [key, v] of Object.entries(value)) {
    // JSON.parse makes "__proto__" an own key; copied, it would set the copy's prototype.
    if (key === '__proto__') {
      issues.push({ path: [...path, key].join('.'), message: PROTO_MESSAGE, received: v });
      continue;
    }
    const name = lvl.keys.get(key.toLowerCase()) ?? key;
    const other = spelled.get(name);
    if (other !== undefined) {
      issues.push({ path: [...path, key].join('.'), message: `duplicates key "${other}"`, received: v });
      continue;
    }
    spelled.set(name, key);
    // Own keys only: `constructor` or `hasOwnProperty` is an unknown key, not a level.
    const objectLevel = ownValue(lvl.objects, name);
    const recordLevel = ownValue(lvl.records, name);
    if (objectLevel) out[name] = canonicalKeys(v, objectLevel, written, issues, [...path, key]);
    else if (recordLevel && isRecord(v)) {
      const entries = Object.entries(v).flatMap(([k, item]) => {
        if (k !== '__proto__')
          return [[k, canonicalKeys(item, recordLevel, written, issues, [...path, key, k])]];
        issues.push({ path: [...path, key, k].join('.'), message: PROTO_MESSAGE, received: item });
        return [];
      });
      out[name] = Object.fromEntries(entries);
    } else out[name] = v;
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
