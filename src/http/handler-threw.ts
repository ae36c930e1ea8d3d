import { redactText } from '../redact.js';

/** The warning's `code`, for `process.on('warning')` and `--disable-warning`. */
export const HANDLER_THREW_WARNING = 'ARL_HANDLER_THREW';

/**
 * Reports a throw of a request's own handler that reached the interceptor where no undici call
 * is on the stack to take it (a promise handler or a microtask, after a wait or a retry): a
 * process warning (`ARL_HANDLER_THREW`) whose `cause` is the throw, in place of an unhandled
 * rejection or an uncaught exception, which would end the process. The request had been told
 * its end (its `onResponseError` is what threw). Secrets in the throw's message are masked.
 */
export function warnHandlerThrew(thrown: unknown, origin: string): void {
  const detail = thrown instanceof Error ? `${thrown.name}: ${thrown.message}` : String(thrown);
  const warning = new Error(
    redactText(
      `adaptive-rate-limit: the handler of a request to ${origin} threw after it was told the request's end (${detail}); the request had ended, the throw is reported here`,
    ),
    { cause: thrown },
  );
  warning.name = 'Warning';
  process.emitWarning(Object.assign(warning, { code: HANDLER_THREW_WARNING }));
}
