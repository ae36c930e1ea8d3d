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
