/**
 * Whether a value a user's callback answered is a promise or any thenable (an object or function
 * with a `then` method), which the library reads as "answered later", or refuses where a callback
 * must answer at once.
 */
export function isThenable<T = unknown>(value: unknown): value is PromiseLike<T> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/**
 * Whether `value` is a thenable that a callback which must answer at once returned (an `async`
 * function): its rejection is then handled, as its caller refuses it with an error of its own
 * (left unhandled, a rejection ends a Node process).
 */
export function answeredLater(value: unknown): boolean {
  if (!isThenable(value)) return false;
  try {
    value.then(undefined, () => {});
  } catch {
    // A `then` that throws has no rejection to handle.
  }
  return true;
}

/** What a callback that must answer at once is told to have returned when it was `async`. */
export function promiseAnswer(callback: string): string {
  return `a promise (${callback} must answer at once: not an async function)`;
}
