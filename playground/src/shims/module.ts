// `node:module` in the browser: only the Redis store loads ioredis through it, and the page opens none.

export function createRequire(): never {
  throw new Error('createRequire is not available in the playground');
}
