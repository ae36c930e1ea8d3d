import { ManualClock } from '../../src/clock.js';
import { RateLimiterRegistry, type RegistryOptions } from '../../src/registry/index.js';

/** A registry on a manual clock of its own, with `options`. */
export function manualRegistry(options: RegistryOptions = {}) {
  const clock = new ManualClock();
  const registry = new RateLimiterRegistry({ clock, ...options });
  return { clock, registry };
}
