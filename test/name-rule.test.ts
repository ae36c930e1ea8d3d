import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { parseConfig } from '../src/config/schema.js';
import { ConfigError } from '../src/errors.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';

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

const limiter = (options: ConstructorParameters<typeof AdaptiveRateLimiter>[0]) => () =>
  new AdaptiveRateLimiter({ clock: new ManualClock(), ...options });

describe('names', () => {
  it('refuses a budget named with white space alone, as a limiter name is', () => {
    const inCode = refusal(limiter({ budgets: { ' ': {} } }));
    expect(inCode).toContain('budgets." "');
    expect(inCode).toContain('a budget name must be a non-empty string, not white space alone');
    const inJson = refusal(() => parseConfig({ limiters: { a: { budgets: { '\t': {} } } } }));
    expect(inJson).toContain('limiters.a.budgets."\\t"');
    expect(inJson).toContain('a budget name must be a non-empty string, not white space alone');
    expect(refusal(limiter({ name: '  ' }))).toContain(
      'a limiter name must be a non-empty string, not white space alone',
    );
  });

  it('refuses a control character in a limiter or budget name, naming its code', () => {
    expect(refusal(limiter({ name: 'api\nINFO forged' }))).toMatch(
      /name: a limiter name must be free of control characters \(U\+000A at index 3\).*received "api\\nINFO forged"/,
    );
    expect(refusal(() => parseConfig({ limiters: { 'a\u0000b': {} } }))).toContain(
      'a limiter name must be free of control characters (U+0000 at index 1)',
    );
    expect(refusal(limiter({ budgets: { 'tok\u007fens': {} } }))).toContain(
      'a budget name must be free of control characters (U+007F at index 3)',
    );
    expect(refusal(() => parseConfig({ limiters: { a: { budgets: { 'x\u0085': {} } } } }))).toContain(
      'U+0085 at index 1',
    );
    // Any other character is a name.
    expect(limiter({ name: 'api é 🚀', budgets: { 'tokens/min': {} } })().name).toBe('api é 🚀');
  });
});
