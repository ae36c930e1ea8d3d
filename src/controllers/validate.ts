import { ConfigError, type ConfigIssue, LIMITER_SOURCE, unknownKeyMessage } from '../errors.js';

/** The rule of one numeric controller option: what a bad value is told, and the test it passes. */
export type NumberRule = readonly [message: string, ok: (value: number) => boolean];

/**
 * A built-in controller's options (`aimd`, `cubic`, `probe`): each field left out takes its
 * default; every bad field is reported at once in one {@link ConfigError}, at `name.field`, and
 * so is a key it does not know (`decreaseFactr`), with the one meant when it is a near miss.
 * `more` adds the cross-field issues, asked only when every field is valid.
 */
export function validateNumbers<K extends string>(
  name: string,
  options: unknown,
  defaults: Readonly<Record<K, number>>,
  rules: Readonly<Record<K, NumberRule>>,
  more?: (resolved: Record<K, number>) => ConfigIssue[],
): Record<K, number> {
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError([{ path: name, message: 'must be an object', received: options }], LIMITER_SOURCE);
  }
  const given = options as Partial<Record<K, unknown>>;
  const issues: ConfigIssue[] = [];
  const resolved = {} as Record<K, number>;
  const known = Object.keys(rules);
  for (const key of Object.keys(given)) {
    if (!Object.hasOwn(rules, key)) {
      issues.push({
        path: `${name}.${key}`,
        message: unknownKeyMessage(key, known),
        received: given[key as K],
      });
    }
  }
  for (const key of Object.keys(rules) as K[]) {
    const [message, ok] = rules[key];
    const value = given[key];
    if (value === undefined) resolved[key] = defaults[key];
    else if (typeof value === 'number' && ok(value)) resolved[key] = value;
    else {
      issues.push({ path: `${name}.${key}`, message, received: value });
      resolved[key] = defaults[key];
    }
  }
  if (issues.length === 0 && more !== undefined) issues.push(...more(resolved));
  if (issues.length > 0) throw new ConfigError(issues, LIMITER_SOURCE);
  return resolved;
}

/** A finite number > 0. */
export function isPositiveFinite(value: number): boolean {
  return Number.isFinite(value) && value > 0;
}
