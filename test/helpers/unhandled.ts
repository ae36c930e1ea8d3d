import { afterEach, beforeEach, expect } from 'vitest';

/** Lets the callbacks queued behind the current ones run (a `setImmediate` turn). */
export const flush = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Registers, in the calling test file, hooks that fail each test after which a promise rejection
 * went unhandled (one turn of the event loop after the test, so that late ones are seen).
 */
export function failOnUnhandledRejections(): void {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });
  afterEach(async () => {
    await flush();
    process.off('unhandledRejection', onUnhandled);
    expect(unhandled).toEqual([]);
  });
}
