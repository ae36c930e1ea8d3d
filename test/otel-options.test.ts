import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../src/errors.js';
import { enableMetrics, type MetricsHandle } from '../src/otel/index.js';
import { otelHarness } from './helpers/otel-harness.js';

// enableMetrics' options as a user misspells them: a key it does not know, or a provider of null,
// went to the global MeterProvider (a no-op one until an SDK registers it), so every metric was
// lost without a word.

const handles: MetricsHandle[] = [];
afterEach(() => {
  for (const handle of handles.splice(0)) handle.disable();
});

function thrown(fn: () => unknown): InvalidArgumentError {
  try {
    handles.push(fn() as MetricsHandle);
  } catch (error) {
    if (error instanceof InvalidArgumentError) return error;
    throw error;
  }
  throw new Error('expected an InvalidArgumentError');
}

describe('enableMetrics: its options', () => {
  it('refuses an unknown key (a misspelt meterProvider), naming the key meant', () => {
    const { provider } = otelHarness();
    const error = thrown(() => enableMetrics({ meterprovider: provider } as never));
    expect(error.argument).toBe('meterprovider');
    expect(error.message).toContain('unknown key (did you mean "meterProvider"?');
  });

  it('refuses a meterProvider of null, which recorded through the global provider', () => {
    const error = thrown(() => enableMetrics({ meterProvider: null } as never));
    expect(error.argument).toBe('meterProvider');
    expect(error.message).toBe(
      'enableMetrics(): meterProvider: must be a MeterProvider (an object with getMeter) (received null)',
    );
  });

  it('says a MeterProvider given as the options goes in meterProvider', () => {
    // `enableMetrics(provider)` was told `_sharedState: unknown key (expected one of:
    // meterProvider)`, a field of the SDK's own; before the key check, it recorded through the
    // global provider in silence.
    const { provider } = otelHarness();
    const error = thrown(() => enableMetrics(provider as never));
    expect(error.argument).toBe('options');
    expect(error.message).toMatch(
      /^enableMetrics\(\): options: must be an object of options: pass the provider as \{ meterProvider \} \(received /,
    );
  });

  it('still takes no options, an undefined meterProvider, and a provider', () => {
    const { provider } = otelHarness();
    handles.push(
      enableMetrics(),
      enableMetrics({ meterProvider: undefined }),
      enableMetrics({ meterProvider: provider }),
    );
    expect(handles).toHaveLength(3);
  });
});
