import { ConfigError, LIMITER_SOURCE } from '../errors.js';
import { type AimdOptions, aimd } from './aimd.js';
import { type CubicOptions, cubic } from './cubic.js';
import { type ProbeOptions, probe } from './probe.js';
import type { RateController } from './types.js';

export type { AimdOptions } from './aimd.js';
export { aimd } from './aimd.js';
export type { CubicOptions } from './cubic.js';
export { cubic, cubicCurve, cubicK } from './cubic.js';
export type { ProbeOptions } from './probe.js';
export { cutReadingsOf, FAST_REQUESTS, probe } from './probe.js';
export type { DecreaseRecord, RateController, RateControllerState } from './types.js';

const defaultAimd = aimd();
const defaultCubic = cubic();
const defaultProbe = probe();

/** The `controller` option: a built-in controller by name, or your own. */
export type ControllerSpec = 'aimd' | 'cubic' | 'probe' | RateController;

/**
 * The name metrics and `NODE_DEBUG` show for a `controller` option: `'aimd'`, `'cubic'`,
 * `'probe'`, or a custom controller's `name` property (`'custom'` without one).
 */
export function controllerNameOf(controller: unknown): string {
  if (typeof controller === 'string') return controller;
  const name = (controller as { name?: unknown } | undefined)?.name;
  return typeof name === 'string' && name !== '' ? name : 'custom';
}

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
  if (spec === 'aimd') return keepsNoState(options.aimd === undefined ? defaultAimd : aimd(options.aimd));
  if (spec === 'cubic')
    return keepsNoState(options.cubic === undefined ? defaultCubic : cubic(options.cubic));
  if (spec === 'probe')
    return keepsNoState(options.probe === undefined ? defaultProbe : probe(options.probe));
  if (isController(spec)) return spec;
  throw new ConfigError(
    [
      {
        path: 'controller',
        message: "must be 'aimd', 'cubic', 'probe' or an object with onThrottled and onSuccess functions",
        received: spec,
      },
    ],
    LIMITER_SOURCE,
  );
}

function isController(value: unknown): value is RateController {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as Partial<Record<keyof RateController, unknown>>;
  return typeof candidate.onThrottled === 'function' && typeof candidate.onSuccess === 'function';
}

/** The controllers known to keep nothing of a state once they answered (see `keepsNoState`). */
const stateless = new WeakSet<RateController>();

/**
 * Marks `controller` as one that reads the state it is given only while it answers and keeps
 * none of it: the limiter may then hand it one state object, rewritten for each question,
 * instead of a new one per success. The built-in controllers by name are; a custom controller is
 * never assumed to be (it may keep the state it was given).
 */
export function keepsNoState<C extends RateController>(controller: C): C {
  stateless.add(controller);
  return controller;
}

/** Whether `controller` was marked by `keepsNoState`. */
export function mayReuseState(controller: RateController): boolean {
  return stateless.has(controller);
}
