import { copyWith, MASK } from '../redact.js';

/** Nested errors read too: a cluster's `lastNodeError`, a wrapped error's `cause`. */
const NESTED = ['lastNodeError', 'cause'] as const;

/**
 * A Redis client's error with the credentials of its command masked, for the `degraded` event and
 * the `cause` of `SharedBudgetUnavailableError`. ioredis's answer to a refused login is a
 * `ReplyError` whose `command` holds the password: `{ name: 'auth', args: [password] }` or
 * `{ name: 'hello', args: ['3', 'AUTH', user, password] }`, which `console.log(event)` and
 * `JSON.stringify(event)` print. An error without such a command is returned as it is; one with
 * it, as a copy (same class, message, stack and fields) whose `args` after `AUTH` (all of an
 * `auth` command's) are `***`. The client's own error is never changed.
 */
export function withoutCredentials(error: unknown, depth = 0): unknown {
  if (typeof error !== 'object' || error === null || depth > 3) return error;
  const source = error as Record<string, unknown>;
  const command = maskedCommand(source.command);
  const nested = NESTED.map((key) => [key, withoutCredentials(source[key], depth + 1)] as const).filter(
    ([key, value]) => value !== source[key],
  );
  if (command === undefined && nested.length === 0) return error;
  const replaced = new Map<PropertyKey, unknown>(command === undefined ? [] : [['command', command]]);
  for (const [key, value] of nested) replaced.set(key, value);
  return copyWith(error, replaced);
}

/** `command` with its credentials masked, or `undefined` when it holds none. */
function maskedCommand(command: unknown): Record<string, unknown> | undefined {
  if (typeof command !== 'object' || command === null) return undefined;
  const { name, args } = command as { name?: unknown; args?: unknown };
  if (!Array.isArray(args) || args.length === 0) return undefined;
  const whole = typeof name === 'string' && name.toLowerCase() === 'auth';
  let changed = false;
  let after = 0;
  const masked = args.map((arg: unknown) => {
    if (whole || after > 0) {
      after = Math.max(0, after - 1);
      changed = true;
      return MASK;
    }
    // HELLO 3 AUTH user password; MIGRATE ... AUTH password, AUTH2 user password.
    if (typeof arg === 'string' && /^auth2?$/i.test(arg)) after = 2;
    return arg;
  });
  return changed ? { ...(command as Record<string, unknown>), args: masked } : undefined;
}
