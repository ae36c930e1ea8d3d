/**
 * `promise`, or a rejection with `signal`'s reason as soon as it aborts (at once if it has): for
 * a wait that comes before a limiter's own (the code of a shared budget, still loading), which an
 * abort must end as it ends a wait in the line. The abort listener is removed when `promise`
 * settles first. No signal, or an object that is not one (the limiter refuses it by name): the
 * promise itself.
 */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | null | undefined): Promise<T> {
  if (signal == null || typeof signal.addEventListener !== 'function') return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    const settled = (): void => signal.removeEventListener('abort', onAbort);
    promise.then(
      (value) => {
        settled();
        resolve(value);
      },
      (error: unknown) => {
        settled();
        reject(error);
      },
    );
  });
}
