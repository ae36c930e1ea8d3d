/**
 * The symbols of `using` and `await using` (explicit resource management). Node 20 and later
 * define them; where a runtime does not (an older browser running the fetch wrapper), Node's own
 * registered symbols stand in, so that no object gets a method named "undefined".
 */
export const DISPOSE: typeof Symbol.dispose =
  Symbol.dispose ?? (Symbol.for('nodejs.dispose') as typeof Symbol.dispose);

export const ASYNC_DISPOSE: typeof Symbol.asyncDispose =
  Symbol.asyncDispose ?? (Symbol.for('nodejs.asyncDispose') as typeof Symbol.asyncDispose);
