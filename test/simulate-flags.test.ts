import { describe, expect, it } from 'vitest';
import { cli } from './helpers/simulate-cli.js';

// Flags a hostile but realistic user gives the simulator: each bad value exits 2 with a line that
// names the flag and the value, before anything runs. Every case is refused before a run starts
// (a short run with one mode, should it not be).
const quick = ['--minutes', '1', '--modes', 'none'];

async function refused(args: string[]) {
  const { code, stderr, stdout } = await cli([...args, ...quick]);
  return { code, line: stderr.split('\n')[0], stdout };
}

describe('simulate flags: values read as given', () => {
  it('refuses a seed past 32 bits, which ran the same as a smaller seed', async () => {
    // 4294967338 = 2^32 + 42: the generator took it as 42, and printed "seed 4294967338".
    expect(await refused(['--seed', '4294967338'])).toEqual({
      code: 2,
      line: 'simulate: --seed: expected a whole number from 0 to 4294967295 (the generator takes 32 bits), received "4294967338"',
      stdout: '',
    });
    // 99999999999999999999 is 1e20 as a number: two seeds, one run.
    expect((await refused(['--seed', '99999999999999999999'])).code).toBe(2);
    expect((await refused(['--seed', '4294967295'])).code).toBe(0);
  });

  it('refuses an empty --demand entry, which ran as a demand of 0', async () => {
    expect(await refused(['--demand='])).toEqual({
      code: 2,
      line: 'simulate: --demand: expected numbers >= 0 separated by commas, received ""',
      stdout: '',
    });
    expect((await refused(['--demand', '100,,100'])).line).toBe(
      'simulate: --demand: expected numbers >= 0 separated by commas, received "100,,100"',
    );
    expect((await refused(['--demand', '100, 0'])).code).toBe(0);
  });

  it('reads numbers as decimals only: 0x10 is no quota of 16', async () => {
    expect(await refused(['--quota', '0x10'])).toEqual({
      code: 2,
      line: 'simulate: --quota: expected a number > 0, received "0x10"',
      stdout: '',
    });
    expect((await refused(['--instances', '0b11'])).line).toBe(
      'simulate: --instances: expected a whole number from 1 to 1000, received "0b11"',
    );
    expect((await refused(['--demand', '0o7'])).code).toBe(2);
    expect((await refused(['--quota', '1e3'])).code).toBe(0);
  });
});
