import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);

describe('a waiting request keeps the process alive', () => {
  it('serves every waiter before the process exits, with no other work pending', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'test/fixtures/keep-alive.ts']);
    expect(stdout).toContain('adaptive served 12');
    expect(stdout).toContain('fixed served 6');
  });
});
