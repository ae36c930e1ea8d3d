import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { expect, it } from 'vitest';

// `adaptive-rate-limit/fetch` (src/fetch.ts) is for runtimes without undici or a file system:
// none of the modules it loads imports undici, node:fs, node:module, node:http or node:stream
// (type imports aside, which are gone once compiled). test/runtimes.test.ts loads it on Deno,
// Bun and workerd.

const FORBIDDEN = /^(undici|node:fs|node:fs\/promises|node:module|node:http|node:https|node:stream)$/;

/** The modules `file` loads at run time, followed through relative imports. */
function runtimeImports(file: string, seen = new Set<string>(), out = new Map<string, string>()) {
  if (seen.has(file)) return out;
  seen.add(file);
  const text = readFileSync(file, 'utf8');
  for (const [, specifier] of text.matchAll(/^(?:import|export)\s+(?!type\s)[^;]*?\sfrom\s+'([^']+)'/gms)) {
    const spec = specifier as string;
    if (spec.startsWith('.')) runtimeImports(resolve(dirname(file), spec.replace(/\.js$/, '.ts')), seen, out);
    else out.set(spec, file);
  }
  for (const [, spec] of text.matchAll(/^import\s+'([^']+)'/gm)) {
    if ((spec as string).startsWith('.'))
      runtimeImports(resolve(dirname(file), (spec as string).replace(/\.js$/, '.ts')), seen, out);
  }
  return out;
}

it('loads neither undici nor node:fs, node:module, node:http or node:stream', () => {
  const root = resolve('src');
  const imports = runtimeImports(join(root, 'fetch.ts'));
  expect(imports.has('zod')).toBe(true); // the walk does reach the limiter's modules
  const forbidden = [...imports]
    .filter(([spec]) => FORBIDDEN.test(spec))
    .map(([spec, from]) => `${spec} <- ${from}`);
  expect(forbidden).toEqual([]);
  // The root does load the interceptor (and so the undici version check's node:module).
  expect([...runtimeImports(join(root, 'index.ts')).keys()].some((spec) => FORBIDDEN.test(spec))).toBe(true);
});
