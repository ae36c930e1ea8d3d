import { redactText } from './redact.js';

/** What {@link debugLine} uses of `node:util`. */
interface DebugUtil {
  debuglog(section: string): ((format: string, ...values: unknown[]) => void) & { enabled?: boolean };
  format(format: string, ...values: unknown[]): string;
}

/**
 * `node:util`, taken through `process.getBuiltinModule` so that a module that says a debug line
 * (the shared budget's member, which the simulator and the playground run in a browser too) does
 * not import it: a static `node:util` import left the playground's page blank. `undefined` where
 * there is none (a browser; a Node older than 20.16): no debug lines there.
 */
const util = (
  globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }
).process?.getBuiltinModule?.('node:util') as DebugUtil | undefined;

const debug = typeof util?.debuglog === 'function' ? util.debuglog('adaptive-rate-limit') : undefined;

/**
 * One line under `NODE_DEBUG=adaptive-rate-limit` (through `redactText`), for what is told only
 * there: a diagnostic, not a warning (a shared budget's members lost with an evicted key).
 */
export function debugLine(format: string, ...values: unknown[]): void {
  if (debug?.enabled === true && util !== undefined) debug('%s', redactText(util.format(format, ...values)));
}
