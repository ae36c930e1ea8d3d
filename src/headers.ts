import type { HeaderRecord } from './http/classify.js';

/**
 * Any header shape undici or fetch accepts, as a {@link HeaderRecord}: names in lower case,
 * repeated names as arrays. Takes a plain object, a flat `[name, value, ...]` array (strings or
 * Buffers), an iterable of `[name, value]` pairs (`Map`, WHATWG `Headers`), or nothing.
 */
export function headerRecord(headers: unknown): HeaderRecord {
  const out: Record<string, string | string[]> = {};
  const add = (name: unknown, value: unknown) => {
    if (value === undefined || value === null) return;
    const key = String(name).toLowerCase();
    const values = Array.isArray(value) ? value.map(String) : [String(value)];
    // Own keys only, each defined rather than assigned: a header named `constructor` or
    // `__proto__` (a hostile server's) is a header like any other.
    const had = Object.hasOwn(out, key) ? out[key] : undefined;
    const next =
      had === undefined
        ? values.length === 1
          ? (values[0] as string)
          : values
        : [...(Array.isArray(had) ? had : [had]), ...values];
    Object.defineProperty(out, key, { value: next, enumerable: true, writable: true, configurable: true });
  };
  if (headers == null || typeof headers !== 'object') return out;
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) add(headers[i], headers[i + 1]);
  } else if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    for (const pair of headers as Iterable<unknown>) {
      if (Array.isArray(pair)) add(pair[0], pair[1]);
    }
  } else {
    for (const [name, value] of Object.entries(headers)) add(name, value);
  }
  return out;
}
