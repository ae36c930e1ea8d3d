import { ConfigError } from '../../src/errors.js';

/** Runs `fn` and returns the ConfigError it throws; fails when it throws nothing or something else. */
export function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected a ConfigError');
}
