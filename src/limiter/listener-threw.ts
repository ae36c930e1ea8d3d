import { warnThrown } from '../warning.js';

/** The warning's `code`, for `process.on('warning')` and `--disable-warning`. */
export const LISTENER_THREW_WARNING = 'ARL_LISTENER_THREW';

/**
 * Reports a throw of a limiter event's listener (a metrics or logging bug) as a process warning
 * (`ARL_LISTENER_THREW`) whose `cause` is the throw, in place of letting it out of the limiter:
 * out of a grant it left the waiter being granted, and every waiter behind it, never settled (no
 * timer armed again), out of `close()` every waiter. The listeners after the one that threw are
 * not called for that event. Secrets in the throw's message are masked.
 */
export function warnListenerThrew(thrown: unknown, limiter: string, event: string): void {
  warnThrown(
    LISTENER_THREW_WARNING,
    thrown,
    (detail) =>
      `a listener of limiter "${limiter}"'s "${event}" event threw (${detail}); the limiter went on, the throw is reported here`,
  );
}
