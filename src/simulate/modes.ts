import { builtInMode, headersMode, type ModeSpec, sharedMode } from './run.js';
import type { ModeName } from './scenarios.js';

/** A bad flag: the message names it and the value received. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/**
 * The modes to run: `names` (`custom` is the `--controller` module's), the custom mode added
 * when `addCustom` and not named, with `shared` each limited mode's shared variant after it, and
 * with `headers` the variants against the API announcing its quota after those.
 */
export function modesFor(
  names: readonly ModeName[],
  custom: ModeSpec | undefined,
  addCustom: boolean,
  shared: boolean,
  headers = false,
): ModeSpec[] {
  const specs: ModeSpec[] = [];
  for (const name of names) {
    if (name !== 'custom') specs.push(builtInMode(name));
    else if (custom) specs.push(custom);
    else throw new UsageError('--modes custom needs --controller PATH');
  }
  if (custom && addCustom && !names.includes('custom')) specs.push(custom);
  if (!shared && !headers) return specs;
  // Each limited mode, then the same mode with one shared budget, then against the announcing API.
  return specs.flatMap((spec) => {
    const variants = [spec, shared ? sharedMode(spec) : undefined];
    if (headers) variants.push(...variants.map((v) => (v === undefined ? undefined : headersMode(v))));
    return variants.filter((v) => v !== undefined);
  });
}
