import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

/**
 * The playground: a static page that runs the simulator (src/simulate) in the browser.
 * `npm run playground:build` writes it to playground/dist; `base: './'` lets that folder be
 * hosted under any path, or opened from a static file server as it is.
 *
 * The library is written for Node: its limiter's events and the shared budget import a few
 * built-ins. In the browser `events` (Node's EventEmitter, as a package) stands in for
 * `node:events`, and small shims for `node:crypto`, `node:os` and `node:module` (a member's id,
 * the Redis store's script hashes and its on-demand ioredis: none of them runs in the page).
 */
export default defineConfig({
  root: here('.'),
  base: './',
  resolve: {
    alias: {
      'node:events': 'events',
      'node:crypto': here('src/shims/crypto.ts'),
      'node:os': here('src/shims/os.ts'),
      'node:module': here('src/shims/module.ts'),
    },
  },
  // The shared budget names a member by host, pid and a random id; nothing counts on it.
  define: { 'process.pid': '0' },
  build: {
    outDir: here('dist'),
    emptyOutDir: true,
    target: 'es2022',
    chunkSizeWarningLimit: 1000,
  },
  preview: { host: '127.0.0.1' },
  server: { host: '127.0.0.1' },
});
