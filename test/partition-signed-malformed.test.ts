import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/clock.js';
import { rateLimitedFetch } from '../src/http/fetch.js';
import { credentialParts } from '../src/http/partition.js';
import { cleanups, serve } from './helpers/interceptor-fixtures.js';

// docs/partitions.md: schemes that sign each request are partitioned by who signs. A value of such
// a scheme that names no signer (a Digest without `username`, a SigV4 without `Credential=`) must
// not make every request a partition of its own: each would start unpaused, at full rate.

describe('a signed authorization that names no signer', () => {
  const cases: [string, (n: number) => string][] = [
    ['Digest without username or realm', (n) => `Digest nonce="${n}", uri="/x", response="r${n}"`],
    [
      'AWS SigV4 without Credential=',
      (n) => `AWS4-HMAC-SHA256 SignedHeaders=host;x-amz-date, Signature=${n.toString(16).padStart(64, '0')}`,
    ],
    ['OAuth 1 without consumer key or token', (n) => `OAuth oauth_nonce="${n}", oauth_signature="s${n}"`],
    ['HTTP Signature without keyId', (n) => `Signature algorithm="hmac-sha256", signature="s${n}"`],
  ];
  for (const [what, value] of cases) {
    it(`${what}: the second request waits out the first one's Retry-After, unsent`, async () => {
      const server = await serve({
        respond: (_req, res) => {
          res.writeHead(429, { 'retry-after': '600' }).end('slow down');
          return true;
        },
      });
      const f = rateLimitedFetch({ clock: new ManualClock(), maxAttempts: 1 });
      cleanups.push(() => f.close());
      const call = (n: number) =>
        f(`${server.origin}/x`, { headers: { authorization: value(n) } }).then(
          (r) => r.status,
          (e: unknown) => (e instanceof Error ? e.name : e),
        );
      expect(await call(1)).toBe(429);
      // Before: a partition of its own (the value changes with each request), unpaused: sent.
      expect(await call(2)).toBe('RateLimitRejectedError');
      expect(await call(3)).toBe('RateLimitRejectedError');
      expect(server.received.length).toBe(1);
      expect(f.registry.names()).toHaveLength(1);
    });
  }
});

describe('a Digest authorization that names its user by username* (RFC 7616)', () => {
  it("one user's Retry-After does not pause another user of the same realm", async () => {
    const digest = (user: string, n: number) =>
      `Digest username*=UTF-8''${user}, realm="api", nonce="${n}", uri="/x", response="r${n}"`;
    const server = await serve({
      respond: (req, res) => {
        if (!String(req.headers.authorization).includes("UTF-8''J%C3%A4s%C3%B8n")) return false;
        res.writeHead(429, { 'retry-after': '600' }).end('slow down');
        return true;
      },
    });
    const f = rateLimitedFetch({ clock: new ManualClock(), maxAttempts: 1 });
    cleanups.push(() => f.close());
    const call = (user: string, n: number) =>
      f(`${server.origin}/x`, { headers: { authorization: digest(user, n) } }).then(
        (r) => r.status,
        (e: unknown) => (e instanceof Error ? e.name : e),
      );
    expect(await call('J%C3%A4s%C3%B8n', 1)).toBe(429);
    expect(await call('J%C3%A4s%C3%B8n', 2)).toBe('RateLimitRejectedError');
    // Before: both users were one partition (the realm alone), and the other user was refused.
    expect(await call('%C3%85sa', 3)).toBe(200);
  });
});

describe('the auth-params that name who signs', () => {
  it('reads a quoted value whole (a comma in it), whatever the order of the params', () => {
    const names = ['authorization'];
    const digest = (user: string, n: number) =>
      `Digest username="${user}", realm="api", nonce="${n}", uri="/x", qop=auth, response="r${n}"`;
    // Before: `username="Doe` for both users, one partition.
    expect(credentialParts({ authorization: digest('Doe, John', 1) }, names)).not.toEqual(
      credentialParts({ authorization: digest('Doe, Jane', 2) }, names),
    );
    expect(credentialParts({ authorization: digest('Doe, John', 1) }, names)).toEqual([
      'authorization',
      'digest username=Doe, John realm=api',
    ]);
    expect(
      credentialParts({ authorization: 'Digest realm="api", nonce="2", username="Doe, John"' }, names),
    ).toEqual(credentialParts({ authorization: digest('Doe, John', 1) }, names));
    expect(credentialParts({ authorization: 'Digest username="a\\"b", realm=api' }, names)).toEqual([
      'authorization',
      'digest username=a"b realm=api',
    ]);
    // A hostile value is read in linear time: many commas before an `=`.
    const hostile = `OAuth ${','.repeat(200_000)}oauth_token=t`;
    expect(credentialParts({ authorization: hostile }, names)).toEqual([
      'authorization',
      'oauth oauth_token=t',
    ]);
  });
});
