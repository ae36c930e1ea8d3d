import type { OutgoingHttpHeaders } from 'node:http';

/**
 * The headers of a GitHub-like API's answer for its `core` resource (5,000 an hour): `left` of the
 * window's calls left, its reset at `resetSeconds` (epoch seconds), and a `Date` of `nowMs`.
 */
export function githubCoreHeaders(nowMs: number, left: number, resetSeconds: number): OutgoingHttpHeaders {
  return {
    date: new Date(nowMs).toUTCString(),
    'x-ratelimit-limit': '5000',
    'x-ratelimit-remaining': String(left),
    'x-ratelimit-reset': String(resetSeconds),
    'x-ratelimit-resource': 'core',
  };
}
