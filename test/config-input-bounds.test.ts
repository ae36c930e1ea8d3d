import { describe, expect, it } from 'vitest';
import { parseDuration } from '../src/config/duration.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { createSharedBudget } from '../src/redis/index.js';

/** The message of the ConfigError `make` throws. */
function refusal(make: () => unknown): string {
  try {
    make();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error('accepted');
}

describe('shared.heartbeatInterval', () => {
  const shared = (heartbeatInterval: number) => () =>
    createSharedBudget({ redis: 'redis://127.0.0.1:1', name: 'x', lazy: true, heartbeatInterval });

  it('refuses a heartbeat under 10 ms (0.0001 ms was a Redis call about every ms)', async () => {
    expect(refusal(shared(0.0001))).toMatch(/heartbeatInterval: must be at least 10 ms.*received 0\.0001/);
    expect(
      refusal(() =>
        parseConfig({ limiters: { a: { shared: { redis: 'redis://h', heartbeatInterval: '5ms' } } } }),
      ),
    ).toMatch(/limiters\.a\.shared\.heartbeatInterval: must be at least 10 ms/);
    await (shared(10)() as { close(): Promise<void> }).close();
  });
});

describe('durations', () => {
  it('refuses a nonzero duration under a microsecond, which read as 0', () => {
    for (const text of ['0.0000001s', '0.0004ms', '00:00:00.0000001']) {
      expect(() => parseDuration(text, 'maxWait')).toThrow(/maxWait: must be 0 or at least 0\.001 ms/);
    }
    expect(refusal(() => parseConfig({ default: { maxWait: '0.0000001s' } }))).toMatch(
      /default\.maxWait: must be 0 or at least 0\.001 ms.*received "0\.0000001s"/,
    );
    expect(parseDuration('0s', 'maxWait')).toBe(0);
    expect(parseDuration('00:00:00.0000000', 'maxWait')).toBe(0);
    expect(parseDuration('0.000001s', 'maxWait')).toBe(0.001);
    expect(parseDuration('0.0005ms', 'maxWait')).toBe(0.001);
  });
});

describe('appsettings.json whole numbers', () => {
  const section = (limiter: Record<string, unknown>) => () =>
    parseConfig({ AdaptiveRateLimiting: { Limiters: { api: limiter } } });

  it('refuses "5.0" and "1e3" in a whole-number field, as .NET binds an int', () => {
    expect(refusal(section({ QueueLimit: '5.0' }))).toMatch(
      /AdaptiveRateLimiting\.Limiters\.api\.QueueLimit: must be a whole number written in digits.*received "5\.0"/,
    );
    expect(refusal(section({ InstanceCount: '1e3' }))).toContain('received "1e3"');
    expect(refusal(() => parseConfig({ AdaptiveRateLimiting: { ThrottleStatuses: ['429.0'] } }))).toContain(
      'AdaptiveRateLimiting.ThrottleStatuses.0: must be a whole number written in digits',
    );
    // Digits with a sign and spaces are an int to .NET; a fractional field takes any number.
    const config = parseConfig({
      AdaptiveRateLimiting: { Limiters: { api: { QueueLimit: ' +5 ', MaxUnitsPerMinute: '1e3' } } },
    });
    expect(config.limiters.api).toMatchObject({ queueLimit: 5, maxUnitsPerMinute: 1000 });
  });
});
