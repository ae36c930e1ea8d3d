/**
 * The part of a Redis client that a shared budget uses. An ioredis `Redis` (or `Cluster`) has it;
 * the type is written here so that the package's declarations compile without ioredis installed
 * (ioredis is an optional peer dependency).
 */
export interface RedisClient {
  /** Runs a cached Lua script by its SHA-1 (rejects with `NOSCRIPT ...` when not cached). */
  evalsha(sha: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>;
  /** Runs a Lua script (and caches it on the server). */
  eval(script: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>;
  /** Closes the connection after the pending replies (only for a client the budget opened). */
  quit(): Promise<unknown>;
  /**
   * Closes the connection at once, failing the calls queued on it; with `reconnect`, connects
   * again (only for a client the budget opened).
   */
  disconnect(reconnect?: boolean): void;
}
