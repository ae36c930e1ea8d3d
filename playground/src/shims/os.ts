// `node:os` in the browser: the shared budget names its members by host.

export function hostname(): string {
  return 'browser';
}
