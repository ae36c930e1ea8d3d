// The README's quick start, run as a new user runs it: node .ci/smoke/quick-start.mjs TARBALL UNDICI
// makes a fresh project (`npm init -y`, so CommonJS), installs the packed tarball and undici,
// takes every block the README marks `<!-- quick-start: FILE -->` from the README inside the
// installed package (the one users read), writes each to FILE and runs `node FILE`. Each block
// starts its own local server: no network, no token. Fails when a block is missing, exits with an
// error, takes over two minutes, or does not print the limiter's snapshot line. Blocks marked
// `<!-- syntax-checked: FILE -->` (they call real APIs) are checked with `node --check`.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const [tarball, undici] = process.argv.slice(2);
if (!tarball || !undici) throw new Error('usage: quick-start.mjs TARBALL UNDICI_VERSION');

const dir = mkdtempSync(join(tmpdir(), 'arl-quick-start-'));
const sh = (cmd, args, timeout = 300_000) =>
  execFileSync(cmd, args, { cwd: dir, encoding: 'utf8', timeout, stdio: ['ignore', 'pipe', 'inherit'] });
try {
  sh('npm', ['init', '-y']);
  const type = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).type ?? 'commonjs';
  sh('npm', [
    'install',
    '--no-audit',
    '--no-fund',
    '--prefer-offline',
    '--loglevel=error',
    resolve(tarball),
    `undici@${undici}`,
  ]);

  const readme = readFileSync(join(dir, 'node_modules/adaptive-rate-limit/README.md'), 'utf8');
  const blocks = [...readme.matchAll(/<!-- quick-start: (\S+) -->\s*```\w*\n([\s\S]*?)```/g)];
  const files = blocks.map(([, file]) => file);
  for (const wanted of ['index.js', 'index.mjs']) {
    if (!files.includes(wanted))
      throw new Error(`README: no quick-start block for ${wanted} (found: ${files.join(', ')})`);
  }
  for (const [, file, code] of blocks) {
    writeFileSync(join(dir, file), code);
    const out = sh(process.execPath, [file], 120_000);
    process.stdout.write(`${out.trimEnd().replace(/^/gm, `  ${file}: `)}\n`);
    if (
      !/^answers: \d+ x 200 of 30$/m.test(out) ||
      !/^limiter: \d+ requests\/min after \d+ 429s/m.test(out)
    ) {
      throw new Error(`${file}: did not print its answers and the limiter's snapshot`);
    }
  }
  // The configuration example for real APIs needs the network: checked for syntax only.
  const checked = [...readme.matchAll(/<!-- syntax-checked: (\S+) -->\s*```\w*\n([\s\S]*?)```/g)];
  for (const [, file, code] of checked) {
    writeFileSync(join(dir, file), code);
    sh(process.execPath, ['--check', file]);
  }
  console.log(
    `README quick start (${files.join(', ')}; ${checked.map(([, f]) => f).join(', ')} syntax only) in a fresh "type": "${type}" project: ok`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
