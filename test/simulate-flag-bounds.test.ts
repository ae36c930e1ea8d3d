import { describe, expect, it } from 'vitest';
import { UsageError } from '../src/simulate/args.js';
import { applyOverrides } from '../src/simulate/overrides.js';
import { baseParams } from '../src/simulate/scenarios.js';

describe('simulator flags', () => {
  const apply = (flags: Record<string, string>) => () => applyOverrides(baseParams(), flags);

  it('refuses --units past Number.MAX_SAFE_INTEGER', () => {
    expect(apply({ units: '1-99999999999999999999' })).toThrow(UsageError);
    expect(apply({ units: '1-99999999999999999999' })).toThrow(
      '--units: must be N or MIN-MAX (whole, from 1 to 9007199254740991), received "1-99999999999999999999"',
    );
    expect(apply({ units: '9007199254740992' })).toThrow(UsageError);
    expect(apply({ units: '1-9007199254740991' })().unitsPerRequest).toMatchObject({ max: 9007199254740991 });
  });

  it('refuses --minutes under a second, the first sample of a run', () => {
    expect(apply({ minutes: '1e-300' })).toThrow(
      '--minutes: must be a number from 0.0167 (a second, the first sample of a run) to 1440 (a virtual day), received "1e-300"',
    );
    expect(apply({ minutes: '0.016' })).toThrow(UsageError);
    expect(apply({ minutes: '0.0167' })().minutes).toBe(0.0167);
  });

  it('refuses --heartbeat-interval under 10 ms, as a shared budget does', () => {
    expect(apply({ 'heartbeat-interval': '5ms' })).toThrow(
      '--heartbeat-interval: must be a duration of at least 10 ms, received "5ms"',
    );
    expect(apply({ 'heartbeat-interval': '10' })().shared.heartbeatInterval).toBe(10);
  });
});
