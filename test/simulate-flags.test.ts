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
      line: 'simulate: --seed: must be a whole number from 0 to 4294967295 (the generator takes 32 bits), received "4294967338"',
      stdout: '',
    });
    // 99999999999999999999 is 1e20 as a number: two seeds, one run.
    expect((await refused(['--seed', '99999999999999999999'])).code).toBe(2);
    expect((await refused(['--seed', '4294967295'])).code).toBe(0);
  });

  it('refuses an empty --demand entry, which ran as a demand of 0', async () => {
    expect(await refused(['--demand='])).toEqual({
      code: 2,
      line: 'simulate: --demand: must be numbers >= 0 separated by commas, received ""',
      stdout: '',
    });
    expect((await refused(['--demand', '100,,100'])).line).toBe(
      'simulate: --demand: must be numbers >= 0 separated by commas, received "100,,100"',
    );
    expect((await refused(['--demand', '100, 0'])).code).toBe(0);
  });

  it('refuses more --demand values than instances, which dropped the last in silence', async () => {
    expect(await refused(['--demand', '100,200,300'])).toEqual({
      code: 2,
      line: 'simulate: --demand: 3 values for the 2 instances of scenario steady (its own; --instances sets it), received "100,200,300"; give at most one per instance',
      stdout: '',
    });
    // Several scenarios: the first whose instances are fewer is named (many-instances has 10).
    expect((await refused(['--demand', '1,2,3,4,5', '--scenario', 'many-instances,staggered'])).line).toBe(
      'simulate: --demand: 5 values for the 4 instances of scenario staggered (its own; --instances sets it), received "1,2,3,4,5"; give at most one per instance',
    );
    expect((await refused(['--demand', '1,2,3', '--instances', '2'])).line).toBe(
      'simulate: --demand: 3 values for 2 instances (--instances "2"), received "1,2,3"; give at most one per instance',
    );
    expect((await refused(['--demand', '100,200,300', '--instances', '3'])).code).toBe(0);
    expect((await refused(['--demand', '100', '--instances', '3'])).code).toBe(0);
  });

  it('refuses a quota under a unit a minute and a latency sigma past 5, which printed noise', async () => {
    expect((await refused(['--quota', '1e-300'])).line).toBe(
      'simulate: --quota: must be a number from 1 to 1e9 (units/min), received "1e-300"',
    );
    expect((await refused(['--latency-sigma', '1e6'])).line).toBe(
      'simulate: --latency-sigma: must be a number from 0 to 5, received "1e6"',
    );
    expect((await refused(['--api-burst-seconds', '1e9'])).line).toBe(
      'simulate: --api-burst-seconds: must be a number > 0 and <= 3600 (an hour), received "1e9"',
    );
  });

  it('reads numbers as decimals only: 0x10 is no quota of 16', async () => {
    expect(await refused(['--quota', '0x10'])).toEqual({
      code: 2,
      line: 'simulate: --quota: must be a number from 1 to 1e9 (units/min), received "0x10"',
      stdout: '',
    });
    expect((await refused(['--instances', '0b11'])).line).toBe(
      'simulate: --instances: must be a whole number from 1 to 1000, received "0b11"',
    );
    expect((await refused(['--demand', '0o7'])).code).toBe(2);
    expect((await refused(['--quota', '1e3'])).code).toBe(0);
  });

  it('tells a negative value after a space by its range, as after =', async () => {
    // parseArgs called "--quota -5" ambiguous and asked for "--quota=-XYZ".
    expect(await refused(['--quota', '-5'])).toEqual({
      code: 2,
      line: 'simulate: --quota: must be a number from 1 to 1e9 (units/min), received "-5"',
      stdout: '',
    });
    expect((await refused(['--seed', '-1'])).line).toBe(
      'simulate: --seed: must be a whole number from 0 to 4294967295 (the generator takes 32 bits), received "-1"',
    );
  });
});

describe('simulate flags: none does nothing in silence', () => {
  it('refuses a quota drop or a demand burst that the flags start after the run’s end', async () => {
    expect(await refused(['--drop-at', '2h'])).toEqual({
      code: 2,
      line: 'simulate: --drop-at "2h": the quota drop would start at 7200 s, not before the run\'s end (1 min), so it would change nothing; give --drop-at within the run',
      stdout: '',
    });
    // The default burst starts at 5 min: --burst-factor alone changed nothing in a 1-minute run.
    expect((await refused(['--burst-factor', '3'])).line).toBe(
      'simulate: --burst-factor "3": the demand burst would start at 300 s (the scenario\'s or the default --burst-at), not before the run\'s end (1 min), so it would change nothing; give --burst-at within the run',
    );
    expect((await refused(['--burst-at', '30s', '--burst-factor', '3'])).code).toBe(0);
    // A scenario's own event past a shorter run stays allowed when no flag names it.
    expect((await cli(['--scenario', 'quota-drop', ...quick])).code).toBe(0);
  });

  it('refuses --series without --json, an empty --controller, and a mode or scenario given twice', async () => {
    expect((await refused(['--series'])).line).toBe(
      'simulate: --series: only with --json (the time series goes in its JSON; --html draws its own)',
    );
    expect((await refused(['--controller='])).line).toBe(
      'simulate: --controller: must be the path of a module, received ""',
    );
    const modes = await cli(['--modes', 'aimd, aimd', '--minutes', '1']);
    expect(modes.code).toBe(2);
    expect(modes.stderr.split('\n')[0]).toBe('simulate: --modes: "aimd" given twice, received "aimd, aimd"');
    expect((await refused(['--scenario', 'steady,steady'])).line).toBe(
      'simulate: --scenario: "steady" given twice, received "steady,steady"',
    );
  });
});

describe('simulate flags: a limiter option refused names its flag', () => {
  it('names the flag and its value, and the mode, where the limiter refuses an option', async () => {
    const { code, stderr } = await cli(['--increase-interval', '0', '--modes', 'aimd', '--minutes', '1']);
    expect(code).toBe(2);
    expect(stderr.split('\n').slice(0, 2)).toEqual([
      'simulate: invalid limiter options of steady / AIMD:',
      '  - --increase-interval "0" (aimd.increaseInterval): must be a finite number > 0 (received 0)',
    ]);
  });

  it('names the flag of an option the scenario set, and the mode it failed in', async () => {
    const max = await cli(['--max-units-per-minute', '1000', '--modes', 'aimd', '--minutes', '1']);
    expect(max.stderr.split('\n')[1]).toBe(
      '  - initialUnitsPerMinute (--initial-units-per-minute): must be within minUnitsPerMinute (1) and maxUnitsPerMinute (1000); set by --max-units-per-minute "1000" (maxUnitsPerMinute) (received 1500)',
    );
    // The flag given is named, not only the option it conflicts with (the scenario's initial rate).
    const min = await cli(['--min-units-per-minute', '5000', '--modes', 'aimd', '--minutes', '1']);
    expect(min.stderr.split('\n')[1]).toBe(
      '  - initialUnitsPerMinute (--initial-units-per-minute): must be within minUnitsPerMinute (5000) and maxUnitsPerMinute (5625); set by --min-units-per-minute "5000" (minUnitsPerMinute) (received 1500)',
    );
    const fixed = await cli([
      '--fixed-units-per-minute',
      '1e300',
      '--queue-limit',
      '1e20',
      '--modes',
      'fixed',
    ]);
    expect(fixed.code).toBe(2);
    expect(fixed.stderr.split('\n').slice(0, 2)).toEqual([
      'simulate: invalid limiter options of steady / Fixed rate:',
      '  - --queue-limit "1e20" (queueLimit): must be an integer >= 0 and <= 9007199254740991 (Number.MAX_SAFE_INTEGER) (received 100000000000000000000)',
    ]);
  });
});
