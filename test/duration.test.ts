import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { DURATION_MESSAGE, durationSchema, parseDuration } from '../src/config/duration.js';
import { ConfigError } from '../src/errors.js';

const valid: [number | string, number][] = [
  [0, 0],
  [250, 250],
  [1.5, 1.5],
  ['250', 250],
  ['0', 0],
  ['500ms', 500],
  ['10s', 10_000],
  ['1.5s', 1500],
  ['1.1s', 1100],
  ['2m', 120_000],
  ['1.1m', 66_000],
  ['1h', 3_600_000],
  ['10 s', 10_000],
  [' 10s ', 10_000],
  ['00:00:10', 10_000],
  ['00:01:30.500', 90_500],
  ['00:01:30.5', 90_500],
  ['00:00:00.1234567', 123.457],
  ['0:00:01', 1000],
  ['01:00:00', 3_600_000],
  ['23:59:59', 86_399_000],
  ['1.00:00:00', 86_400_000],
];

const invalid: unknown[] = [
  -1,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  '-1',
  '-1s',
  '1e3',
  '0x10',
  'Infinity',
  '',
  '   ',
  'abc',
  'ms',
  '.5s',
  '1.s',
  '10 sec',
  '10S',
  '2M',
  '1d',
  '10s5ms',
  '01:30',
  '24:00:00',
  '00:60:00',
  '00:00:60',
  '00:00:10.12345678',
  '-00:00:10',
  true,
  null,
  undefined,
  { ms: 10 },
];

describe('parseDuration', () => {
  it.each(valid)('reads %j as %d ms', (value, ms) => {
    expect(parseDuration(value, 'maxWait')).toBe(ms);
  });

  it.each(invalid)('refuses %j with a ConfigError naming the field', (value) => {
    let error: unknown;
    try {
      parseDuration(value as string, 'limiters.github.maxWait');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).issues).toEqual([
      { path: 'limiters.github.maxWait', message: DURATION_MESSAGE, received: value },
    ]);
  });

  it('trims spaces around a TimeSpan as around any string', () => {
    expect(parseDuration('00:00:10 ', 'x')).toBe(10_000);
  });

  it('states the field, the expected forms and the value received in the message', () => {
    expect(() => parseDuration('10 sec', 'limiters.github.maxWait')).toThrow(
      /limiters\.github\.maxWait: must be a duration such as 500, "500ms", "10s", "2m" or "00:00:10" \(received "10 sec"\)/,
    );
  });
});

describe('durationSchema', () => {
  it.each(valid)('transforms %j to %d ms', (value, ms) => {
    expect(durationSchema.parse(value)).toBe(ms);
  });

  it.each(invalid)('reports %j as an issue instead of throwing', (value) => {
    const result = durationSchema.safeParse(value);
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.message).toBe(DURATION_MESSAGE);
  });

  it('puts the issue at the field path inside an object and keeps checking the others', () => {
    const schema = z.object({
      maxWait: durationSchema,
      maxPause: durationSchema,
      decreaseCooldown: durationSchema,
    });
    const result = schema.safeParse({ maxWait: '1e3', maxPause: '10m', decreaseCooldown: -5 });
    expect(result.success).toBe(false);
    expect(result.error?.issues.map((i) => [i.path.join('.'), i.message])).toEqual([
      ['maxWait', DURATION_MESSAGE],
      ['decreaseCooldown', DURATION_MESSAGE],
    ]);
  });

  it('types its output as milliseconds and its input as number or string', () => {
    const ms: z.output<typeof durationSchema> = durationSchema.parse('2m');
    const input: z.input<typeof durationSchema> = '2m';
    expect([ms, input]).toEqual([120_000, '2m']);
  });
});
