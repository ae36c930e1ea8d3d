import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

// NODE_DEBUG=adaptive-rate-limit in a child process (Node reads NODE_DEBUG once, at start).

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));

async function child(env: Record<string, string>): Promise<{ stdout: string; stderr: string }> {
  const { NODE_DEBUG: _, ...rest } = process.env;
  return run(process.execPath, ['--import', 'tsx', 'test/helpers/debug-log-run.ts'], {
    cwd: root,
    timeout: 50_000,
    env: { ...rest, ...env },
  });
}

describe('NODE_DEBUG=adaptive-rate-limit', () => {
  it('writes a line per cut, pause, rate change and refusal, naming limiter and origin', {
    timeout: 60_000,
  }, async () => {
    const { stdout, stderr } = await child({ NODE_DEBUG: 'adaptive-rate-limit' });
    const origin = /done (\S+)/.exec(stdout)?.[1] ?? '';
    expect(origin).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const lines = stderr.split('\n').filter((line) => line.startsWith('ADAPTIVE-RATE-LIMIT '));
    const mine = `limiter "${origin}" (origin ${origin}, probe)`;
    expect(lines.some((l) => l.includes(`${mine}: cut `) && l.includes(' units/min after a throttle'))).toBe(
      true,
    );
    expect(
      lines.some((l) => l.includes(`${mine}: paused 5 ms (the server asked for 1000 ms; maxPause)`)),
    ).toBe(true);
    expect(
      lines.some((l) => l.includes('limiter "billing" (no origin, probe): rejected 1 units (queue-full)')),
    ).toBe(true);
    // Every line names its limiter.
    expect(lines.every((l) => /: limiter "[^"]+" \(/.test(l))).toBe(true);
    expect(
      lines.some((l) =>
        l.includes('limiter "https://***@x.example.com/?key=***" (origin https://x.example.com'),
      ),
    ).toBe(true);
    // No secret of the request URLs or of a limiter's name.
    expect(stderr).not.toMatch(/s3cret/);
  });

  it('writes nothing without it', { timeout: 60_000 }, async () => {
    const { stdout, stderr } = await child({});
    expect(stdout).toMatch(/^done /m);
    expect(stderr).not.toMatch(/ADAPTIVE-RATE-LIMIT/);
  });
});
