import { redactText } from './redact.js';

/**
 * Emits a process warning with `code` whose `cause` is `thrown`, for a throw of the user's code
 * the library reports instead of letting it out (a handler, a listener, a correction): the
 * message is `adaptive-rate-limit: ` and `text(detail)`, its secrets masked. Where there is no
 * `process.emitWarning` (a browser), the warning goes to `console.warn`.
 */
export function warnThrown(code: string, thrown: unknown, text: (detail: string) => string): void {
  const detail = thrown instanceof Error ? `${thrown.name}: ${thrown.message}` : String(thrown);
  const warning = new Error(redactText(`adaptive-rate-limit: ${text(detail)}`), { cause: thrown });
  warning.name = 'Warning';
  Object.assign(warning, { code });
  const host = (globalThis as { process?: { emitWarning?: unknown } }).process;
  if (typeof host?.emitWarning === 'function') host.emitWarning(warning);
  else console.warn(warning);
}
