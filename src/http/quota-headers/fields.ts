import type { HeaderLookup } from '../retry-after.js';
import { parseHttpDate } from '../retry-after.js';

/** One header's text: repeated field lines joined with ", " (a List's lines make one List). */
export function fieldText(headers: HeaderLookup, name: string): string | undefined {
  const value = headers(name);
  return value === undefined ? undefined : typeof value === 'string' ? value : value.join(', ');
}

/** The first line of a header that is a single value (`x-ratelimit-remaining`). */
export function singleText(headers: HeaderLookup, name: string): string | undefined {
  const value = headers(name);
  return value === undefined ? undefined : typeof value === 'string' ? value : value[0];
}

/**
 * A non-negative decimal integer as written (`0`, `4999`), spaces and tabs around allowed; a sign,
 * a fraction, an exponent, hex or garbage gives `undefined`.
 */
export function nonNegativeInteger(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const trimmed = text.replace(/^[ \t]+|[ \t]+$/g, '');
  if (!/^\d{1,15}$/.test(trimmed)) return undefined;
  return Number(trimmed);
}

/** Whether the response came from a cache (`Age` > 0): its quota fields describe a moment long gone. */
export function fromCache(headers: HeaderLookup): boolean {
  const age = nonNegativeInteger(singleText(headers, 'age'));
  return age !== undefined && age > 0;
}

/**
 * The server's wall-clock time when it answered: its `Date` header, or `nowMs` without a valid
 * one. Epoch resets are counted from it, so a skewed local clock does not move them. `Date` has
 * whole seconds: the answer was made during that second, so its middle is taken (the second's
 * start would read every reset up to a second long, 1.7 % of a one-minute window).
 */
export function serverNow(headers: HeaderLookup, nowMs: number): number {
  const date = singleText(headers, 'date');
  const instant = date === undefined ? undefined : parseHttpDate(date, nowMs);
  return instant === undefined ? nowMs : instant + 500;
}
