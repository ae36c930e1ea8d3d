/**
 * What `import 'adaptive-rate-limit'` loads: the package's modules and bytes (and of them, Redis's
 * and the simulator's), and its dependencies'. Reads the build: `npm run build` first, then
 *   node --import tsx bench/root-import.ts [entry, default dist/index.js]
 */
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const entry = process.argv[2] ?? 'dist/index.js';
// A loader hook that writes the URL of every file module loaded on stderr, one a line.
const hook =
  "export async function load(url, context, next) { if (url.startsWith('file:')) process.stderr.write(url + '\\n'); return next(url, context); }";
const register = `import { register } from 'node:module'; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(hook)}`)});`;
const run = spawnSync(
  process.execPath,
  [
    '--import',
    `data:text/javascript,${encodeURIComponent(register)}`,
    '--input-type=module',
    '-e',
    `await import(${JSON.stringify(`./${entry}`)});`,
  ],
  { encoding: 'utf8' },
);
if (run.status !== 0) throw new Error(`node exited with ${run.status}: ${run.stderr}`);
const files = run.stderr
  .split('\n')
  .filter((line) => line.startsWith('file:'))
  .map((url) => fileURLToPath(url));
const own = files.filter((file) => !file.includes('/node_modules/'));
const deps = files.filter((file) => file.includes('/node_modules/'));
const bytes = (list: string[]) => list.reduce((sum, file) => sum + statSync(file).size, 0);
const count = (part: string) => own.filter((file) => file.includes(part)).length;
console.log(
  `${entry}: ${own.length} modules of the package (${bytes(own)} bytes; Redis ${count('/redis/')}, ` +
    `simulator ${count('/simulate/')}), ${deps.length} of its dependencies (${bytes(deps)} bytes)`,
);
