import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

// With @opentelemetry/api absent (a resolve hook hides it), the root import works, loads nothing
// of OpenTelemetry and watches no limiter; only `adaptive-rate-limit/otel` needs the package.

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));

it('imports the root without @opentelemetry/api, at no cost', { timeout: 60_000 }, async () => {
  const { stdout } = await run(
    process.execPath,
    ['--import', 'tsx', '--import', './test/helpers/no-otel.mjs', 'test/helpers/root-without-otel.ts'],
    { cwd: root, timeout: 50_000 },
  );
  const result = JSON.parse(stdout.trim().split('\n').pop() ?? '{}');
  expect(result).toMatchObject({ granted: true, status: 200, loaded: [], watchers: 0 });
  expect(result.otel).toMatch(/@opentelemetry\/api/);
});
