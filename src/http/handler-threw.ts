import { warnThrown } from '../warning.js';

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
  warnThrew(
    thrown,
    (detail) =>
      `the handler of a request to ${origin} threw after it was told the request's end (${detail}); the request had ended, the throw is reported here`,
  );
}

/**
 * Reports a throw of the correction of an LLM call's estimate by the usage its answer told (the
 * meter's reading or the charge), the same way (`ARL_HANDLER_THREW`): the caller is still told
 * the answer's end, the call is not lost; the estimate it was charged stands.
 */
export function warnCorrectionThrew(thrown: unknown, limiter: string): void {
  warnThrew(
    thrown,
    (detail) =>
      `correcting the estimate of a call through limiter "${limiter}" by the usage its answer told threw (${detail}); the caller was told the answer's end, the estimate stands`,
  );
}

function warnThrew(thrown: unknown, text: (detail: string) => string): void {
  warnThrown(HANDLER_THREW_WARNING, thrown, text);
}
