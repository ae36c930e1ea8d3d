import { ConfigError } from '../errors.js';
import { type AimdOptions, aimd } from './aimd.js';
import { type CubicOptions, cubic } from './cubic.js';
import { type ProbeOptions, probe } from './probe.js';
import type { RateController } from './types.js';

export type { AimdOptions } from './aimd.js';
export { aimd } from './aimd.js';
export type { CubicOptions } from './cubic.js';
export { cubic, cubicCurve, cubicK } from './cubic.js';
export type { ProbeOptions } from './probe.js';
export { probe } from './probe.js';
export type { DecreaseRecord, RateController, RateControllerState } from './types.js';

const defaultAimd = aimd();
const defaultCubic = cubic();
const defaultProbe = probe();

/** The `controller` option: a built-in controller by name, or your own. */
export type ControllerSpec = 'aimd' | 'cubic' | 'probe' | RateController;

/**
 * Builds the named built-in controller with its options, or checks and returns a custom one.
 * Throws `ConfigError` naming `controller` for anything else, or naming the bad option.
 */
export function resolveController(
  spec: ControllerSpec,
  options: {
    aimd?: AimdOptions | undefined;
    cubic?: CubicOptions | undefined;
    probe?: ProbeOptions | undefined;
  } = {},
): RateController {
  // Controllers are pure: limiters with the default options share one.
  if (spec === 'aimd') return options.aimd === undefined ? defaultAimd : aimd(options.aimd);
  if (spec === 'cubic') return options.cubic === undefined ? defaultCubic : cubic(options.cubic);
  if (spec === 'probe') return options.probe === undefined ? defaultProbe : probe(options.probe);
  if (isController(spec)) return spec;
  throw new ConfigError([
    {
      path: 'controller',
      message: "must be 'aimd', 'cubic', 'probe' or an object with onThrottled and onSuccess functions",
      received: spec,
    },
  ]);
}

function isController(value: unknown): value is RateController {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as Partial<Record<keyof RateController, unknown>>;
  return typeof candidate.onThrottled === 'function' && typeof candidate.onSuccess === 'function';
}
