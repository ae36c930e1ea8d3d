import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

/**
 * The undici majors this package supports, each with the oldest Node it runs on (undici's own
 * `engines`). undici 8 does not even load on Node 20: it binds `zlib.createZstdDecompress`,
 * which Node 20 lacks.
 */
const SUPPORTED_UNDICI: Readonly<Record<number, string>> = { 7: '20.18.1', 8: '22.19.0' };

/** The warning's `code`, for `process.on('warning')` and `--disable-warning`. */
export const UNSUPPORTED_UNDICI_WARNING = 'ARL_UNSUPPORTED_UNDICI';

/**
 * What is wrong with this pair of undici and Node versions, or `undefined` when it is supported
 * (see {@link SUPPORTED_UNDICI}; also `undefined` when undici is not installed).
 */
export function unsupportedPair(undici: string | undefined, node: string): string | undefined {
  if (undici === undefined) return undefined;
  const major = Number(undici.split('.')[0]);
  const minNode = SUPPORTED_UNDICI[major];
  if (minNode === undefined) {
    return `adaptive-rate-limit supports undici 7 and 8; undici ${undici} is installed: npm install undici@7 (Node >= 20.18.1) or undici@8 (Node >= 22.19)`;
  }
  if (compareVersions(node, minNode) < 0) {
    const fix = major === 8 ? 'npm install undici@7, or run Node >= 22.19' : `run Node >= ${minNode}`;
    return `undici ${undici} needs Node >= ${minNode} and this process runs Node ${node} (undici 8 fails to load on Node 20): ${fix}`;
  }
  return undefined;
}

/** The version of the undici this package resolves (the application's), if installed. */
export function installedUndici(): string | undefined {
  try {
    const file = createRequire(import.meta.url).resolve('undici/package.json');
    return (JSON.parse(readFileSync(file, 'utf8')) as { version?: unknown }).version as string | undefined;
  } catch {
    return undefined;
  }
}

let warned = false;

/**
 * Emits one process warning (`ARL_UNSUPPORTED_UNDICI`) when the installed undici does not run on
 * this Node, so that the cause is named before undici's own load error (which says only
 * "Cannot read properties of undefined (reading 'bind')").
 */
export function warnOnUnsupportedUndici(undici = installedUndici(), node = process.versions.node): void {
  const problem = unsupportedPair(undici, node);
  if (problem === undefined || warned) return;
  warned = true;
  // Emitted synchronously (emitWarning waits for the next tick): undici 8 on Node 20 throws while
  // it loads, and the process would exit before the warning printed. Node's own listener still
  // prints it, and `--no-warnings` / `--disable-warning=ARL_UNSUPPORTED_UNDICI` still hide it.
  const warning = Object.assign(new Error(problem), { name: 'Warning', code: UNSUPPORTED_UNDICI_WARNING });
  process.emit('warning', warning);
}

function compareVersions(a: string, b: string): number {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
