import { existsSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { RateController } from '../controllers/types.js';
import { UsageError } from './modes.js';
import type { ModeSpec } from './run.js';

function isController(value: unknown): value is RateController {
  if (typeof value !== 'object' || value === null) return false;
  const c = value as Partial<Record<keyof RateController, unknown>>;
  return typeof c.onThrottled === 'function' && typeof c.onSuccess === 'function';
}

/**
 * Loads a user's controller for the `custom` mode: a module (relative to `cwd`) whose default
 * export, or export named `controller`, is an object with `onThrottled` and `onSuccess`, such
 * as `export default aimd({ increaseStep: 600 })` or `export const controller = new StepController(30)`.
 * A module that does not load, or exports no controller, throws {@link UsageError} (one line).
 */
export async function loadControllerModule(path: string, cwd = process.cwd()): Promise<ModeSpec> {
  const file = resolve(cwd, path);
  let module: Record<string, unknown>;
  try {
    module = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    // One line, as for any bad flag: the module's own error, without the loader's stack.
    const missing = (error as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND' && !existsSync(file);
    const message = missing
      ? 'no such file'
      : (String((error as Error).message ?? error).split('\n')[0] ?? '');
    throw new UsageError(`--controller ${path}: cannot load ${file}: ${message}`, { cause: error });
  }
  const candidate = isController(module.default) ? module.default : module.controller;
  if (!isController(candidate)) {
    throw new UsageError(
      `--controller ${path}: the module must export a controller (an object with onThrottled and onSuccess) as its default export or as \`controller\``,
    );
  }
  return { name: 'custom', label: `Custom (${basename(file)})`, controller: candidate, source: path };
}
