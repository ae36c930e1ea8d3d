// `node:crypto` in the browser: the simulator's shared budget only asks for random ids.

/** A random RFC 4122 version 4 id; works outside secure contexts too (plain http hosting). */
export function randomUUID(): string {
  const c = globalThis.crypto;
  if (typeof c.randomUUID === 'function' && globalThis.isSecureContext) return c.randomUUID();
  const bytes = c.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Only the Redis store hashes: the SHA-1 of its Lua scripts, when its module loads. The page
 * never opens a Redis store, so the digest is a placeholder that no server will ever see.
 */
export function createHash(_algorithm: string) {
  const hash = {
    update: (_data: string) => hash,
    digest: (_encoding: string) => 'no-sha1-in-the-playground',
  };
  return hash;
}
