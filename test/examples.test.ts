import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

// Runs each example as its users do (`node --import tsx examples/<name>.ts`) and checks that it
// exits 0 and prints its summary. They run at the same time: each starts its own server on port 0.

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));

/** Each example, with a line of its output that says it did its job. */
const examples: Record<string, RegExp> = {
  'global-dispatcher.ts': /^global fetch: 60 of 60 requests answered 200/m,
  'per-client.ts':
    /^pool: 40 of 40 requests answered 200\n[\s\S]*^agent \(dns, rate limit, redirect, retry\): 20 of 20 requests answered 200/m,
  'per-origin-config.ts':
    /^rate-limits\.json and appsettings\.json load into the same config\n[\s\S]*^orders-api \(cubic\): 40 of 40 answered 200/m,
  'custom-controller.ts': /^rate \(units\/min\): 300 -> 480 -> /m,
  'fetch-wrapper.ts': /^rateLimitedFetch: 50 of 50 POSTs answered 200 with their body intact/m,
  'wrap-function.ts': /^wrap\(limiter, fn\): 60 of 60 calls returned an order, 0 threw/m,
  'prometheus-metrics.ts':
    /^prometheus example: 60 of 60 requests answered 200\n[\s\S]*^ {2}adaptive_rate_limit_request_time_in_queue_count\{[^}]*server_address="127\.0\.0\.1"[^}]*\} \d+$/m,
};

describe('examples', () => {
  it('lists every example file', () => {
    const files = readdirSync(new URL('../examples/', import.meta.url)).filter(
      (f) => f.endsWith('.ts') && f !== 'server.ts',
    );
    expect(files.sort()).toEqual(Object.keys(examples).sort());
  });

  it.concurrent.for(Object.entries(examples))(
    '%s exits 0 and prints its summary',
    // Each example starts Node with tsx and runs a real server for a few seconds; on a loaded CI
    // machine (the matrix runs suites side by side with other jobs) that took over 20 s.
    { timeout: 120_000 },
    async ([file, line], t) => {
      const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', `examples/${file}`], {
        cwd: root,
        timeout: 110_000,
      });
      t.expect(stderr).toBe('');
      t.expect(stdout).toMatch(line);
      t.expect(stdout).toMatch(/429/);
    },
  );
});
