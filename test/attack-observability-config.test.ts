import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { AdaptiveRateLimiter } from '../src/limiter/adaptive.js';
import { ATTRIBUTES, enableMetrics, METRICS } from '../src/otel/index.js';
import { otelHarness, sum } from './helpers/otel-harness.js';

// What a user sees of the limiters (NODE_DEBUG lines, metrics, events) and of the command line,
// attacked where the earlier reviews did not look. Child processes where Node reads something
// once at start (NODE_DEBUG) or where the process itself is the subject (the bin).

const root = fileURLToPath(new URL('..', import.meta.url));
const KILL_AFTER_MS = 30_000;

/** Runs `node --import tsx <script> ...args` in a child; `closeStdout` closes the read end of its stdout at once. */
function child(
  script: string,
  args: string[],
  options: { env?: Record<string, string>; closeStdout?: boolean } = {},
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  const { NODE_DEBUG: _, ...env } = process.env;
  const proc = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: root,
    env: { ...env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: KILL_AFTER_MS,
  });
  let stdout = '';
  let stderr = '';
  // As `| head -0` does: the reader is gone before the command writes its first line.
  if (options.closeStdout === true) proc.stdout.destroy();
  else proc.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  proc.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    proc.on('error', reject);
    proc.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

describe('the bin and the simulator CLI write to a closed pipe (`| head -1`)', () => {
  it.each([
    ['src/bin.ts', ['simulate', '--list']],
    ['src/bin.ts', ['simulate', '--help']],
    ['src/bin.ts', ['--help']],
    ['src/simulate/cli.ts', ['--list']],
  ])('%s %j ends quietly, with no EPIPE stack', { timeout: 60_000 }, async (script, args) => {
    const result = await child(script, args, { closeStdout: true });
    expect(result.signal).toBe(null);
    expect(result.stderr).not.toMatch(/EPIPE|Unhandled 'error' event/);
    expect(result.code).toBe(0);
  });
});

describe('NODE_DEBUG=adaptive-rate-limit', () => {
  it('writes a line for a throttle that cuts at the floor (the rate stays), as the cut it counts', {
    timeout: 60_000,
  }, async () => {
    const result = await child('test/helpers/debug-log-floor-run.ts', [], {
      env: { NODE_DEBUG: 'adaptive-rate-limit' },
    });
    expect(result.stdout).toMatch(/^cuts 2$/m);
    const lines = result.stderr.split('\n').filter((l) => l.startsWith('ADAPTIVE-RATE-LIMIT '));
    // Before: a 429 at minUnitsPerMinute counted a cut (snapshot().cuts, the cuts metric, the
    // event's `cut: true`) and printed nothing, as no `decreased` event came to say it.
    const throttles = lines.filter((l) => l.includes('limiter "floor" (no origin, aimd): throttled'));
    expect(throttles).toHaveLength(2);
    expect(throttles[0]).toContain(
      'throttled (no Retry-After), cut at the floor: the rate stays 60 units/min',
    );
    expect(throttles[1]).toContain('throttled (Retry-After 1000 ms), cut at the floor');
  });
});

describe('enableMetrics', () => {
  it('enabled again on a MeterProvider after disable(), goes on from the totals reported (the requests counter never goes down)', async () => {
    const h = otelHarness();
    const limiter = new AdaptiveRateLimiter({ name: 'again', clock: new ManualClock() });
    const acquired = { [ATTRIBUTES.limiter]: 'again', [ATTRIBUTES.result]: 'acquired' };
    try {
      const first = enableMetrics({ meterProvider: h.provider });
      for (let i = 0; i < 5; i++) (await limiter.acquire()).success();
      expect(sum(await h.collect(), METRICS.requests, acquired)).toBe(5);
      first.disable();
      const second = enableMetrics({ meterProvider: h.provider });
      for (let i = 0; i < 2; i++) (await limiter.acquire()).success();
      // Before: 2, a cumulative counter of the same start time that went down from 5.
      expect(sum(await h.collect(), METRICS.requests, acquired)).toBe(7);
      second.disable();
    } finally {
      limiter.close();
      await h.provider.shutdown();
    }
  });
});
