/**
 * A promise's outcome as state a test can read without awaiting it: `done` once it settled, with
 * its `value` or its `error`. For requests that must still be waiting (assert `done` is false)
 * and then end (wait until `done`).
 */
export function settled<T>(promise: Promise<T>): { value?: T; error?: unknown; done: boolean } {
  const state: { value?: T; error?: unknown; done: boolean } = { done: false };
  promise.then(
    (value) => Object.assign(state, { value, done: true }),
    (error: unknown) => Object.assign(state, { error, done: true }),
  );
  return state;
}
