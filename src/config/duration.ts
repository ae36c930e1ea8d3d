import { z } from 'zod';
import { ConfigError } from '../errors.js';

/** What every bad duration is told; the same text for a throw and for a zod issue. */
export const DURATION_MESSAGE = 'must be a duration such as 500, "500ms", "10s", "2m" or "00:00:10"';

/** Milliseconds per unit suffix. Lower case only: `M` could be read as months. */
const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** `250`, `1.5s`, `10 s`, `2m`: a non-negative decimal, then an optional unit (default ms). */
const WITH_UNIT = /^(\d+(?:\.\d+)?) *(ms|s|m|h)?$/;

/**
 * .NET `TimeSpan` constant format, as RateLimiting.Adaptive's appsettings.json writes it:
 * `[d.]hh:mm:ss[.fffffff]` with hours 0-23, minutes and seconds 0-59. The two-part `hh:mm` form
 * that .NET also takes is refused: `"01:30"` reads as 90 minutes there and 90 seconds to most
 * other readers.
 */
const TIME_SPAN = /^(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?$/;

/** The resolution of a duration string (ms): one microsecond, as the rounding below keeps. */
const RESOLUTION_MS = 0.001;

/**
 * What a nonzero duration string under {@link RESOLUTION_MS} is told. Refused, not rounded up: it
 * rounded to 0 in silence, and 0 means something of its own (`maxWait` 0: never wait), while
 * rounding up would make a value no one wrote; a text that far under a millisecond is a typo.
 */
const UNDER_RESOLUTION_MESSAGE = `must be 0 or at least ${RESOLUTION_MS} ms (a microsecond, the resolution of a duration): a shorter one would read as 0`;

/**
 * A duration in milliseconds, or what is wrong with `value` ({@link DURATION_MESSAGE} or
 * {@link UNDER_RESOLUTION_MESSAGE}) as a string. Numbers are milliseconds (finite, >= 0);
 * strings are described at {@link parseDuration}.
 */
function readDuration(value: unknown): number | string {
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? value : DURATION_MESSAGE;
  if (typeof value !== 'string') return DURATION_MESSAGE;
  const text = value.trim();
  let ms: number | undefined;

  const unit = WITH_UNIT.exec(text);
  const span = unit ? null : TIME_SPAN.exec(text);
  if (unit) {
    ms = Number(unit[1]) * (UNIT_MS[unit[2] ?? 'ms'] ?? 1);
  } else if (span) {
    const [, days = '0', hours = '', minutes = '', seconds = '', fraction = ''] = span;
    if (Number(hours) > 23 || Number(minutes) > 59 || Number(seconds) > 59) return DURATION_MESSAGE;
    const wholeSeconds = ((Number(days) * 24 + Number(hours)) * 60 + Number(minutes)) * 60 + Number(seconds);
    ms = wholeSeconds * 1000 + Number(`0.${fraction || '0'}`) * 1000;
  }
  if (ms === undefined || !Number.isFinite(ms)) return DURATION_MESSAGE;
  // Microsecond precision hides binary noise such as 1.1 * 60000 = 66000.00000000001.
  const rounded = Math.round(ms / RESOLUTION_MS) / (1 / RESOLUTION_MS);
  return rounded === 0 && ms > 0 ? UNDER_RESOLUTION_MESSAGE : rounded;
}

/**
 * A duration in milliseconds, or `undefined` when `value` is not one. Numbers are milliseconds
 * (finite, >= 0); strings are described at {@link parseDuration}.
 */
export function tryParseDuration(value: unknown): number | undefined {
  const ms = readDuration(value);
  return typeof ms === 'number' ? ms : undefined;
}

/**
 * Reads a duration from options or a config file, in milliseconds.
 *
 * - a number is milliseconds: finite and >= 0;
 * - `"250"` (milliseconds), `"500ms"`, `"10s"`, `"1.5s"`, `"2m"`, `"1h"`;
 * - a .NET `TimeSpan` as in RateLimiting.Adaptive's appsettings.json: `"00:00:10"`, `"00:01:30.500"`,
 *   `"1.00:00:00"` (one day).
 *
 * @param path where the value came from, for the error, such as `limiters.github.maxWait`.
 * A nonzero string under a microsecond (`"0.0000001s"`) is refused: it would read as 0.
 *
 * @param path where the value came from, for the error, such as `limiters.github.maxWait`.
 * @throws {ConfigError} for anything else (negative, `"1e3"`, `"10 sec"`, `"01:30"`, ...).
 */
export function parseDuration(value: number | string, path: string): number {
  const ms = readDuration(value);
  if (typeof ms === 'string') throw new ConfigError([{ path, message: ms, received: value }]);
  return ms;
}

/**
 * The zod form of {@link parseDuration}: accepts a number or a string and outputs milliseconds;
 * a bad value becomes a zod issue at its path (no throw), so a config reports every bad field at once.
 */
export const durationSchema = z
  .union([z.number(), z.string()], { error: DURATION_MESSAGE })
  .transform((value, ctx) => {
    const ms = readDuration(value);
    if (typeof ms === 'string') {
      ctx.addIssue({ code: 'custom', message: ms, input: value });
      return z.NEVER;
    }
    return ms;
  });
