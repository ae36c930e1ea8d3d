// `node --import ./test/helpers/no-otel.mjs`: `@opentelemetry/*` cannot be found, as when the
// optional peer dependency is not installed.
import { register } from 'node:module';

const hooks = `
export async function resolve(specifier, context, next) {
  if (specifier.startsWith('@opentelemetry/')) {
    const error = new Error("Cannot find package '" + specifier + "' (not installed)");
    error.code = 'ERR_MODULE_NOT_FOUND';
    throw error;
  }
  return next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);
