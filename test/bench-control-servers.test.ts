// The control bench's servers (bench/control-*.ts): the quota server with its drop, on a manual
// clock, and the nginx config writer (and, where nginx is installed, the server it configures).
import { spawnSync } from 'node:child_process';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { parseControlArgs, parseScaled } from '../bench/control.js';
import { nginxConfig, startNginx } from '../bench/control-nginx.js';
import {
  lognormalMs,
  type QuotaServer,
  refilledBy,
  startQuotaServer,
} from '../bench/control-quota-server.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function get(url: string): Promise<[number, string | undefined]> {
  const res = await request(url);
  await res.body.dump();
  const retryAfter = res.headers['retry-after'];
  return [res.statusCode, Array.isArray(retryAfter) ? retryAfter[0] : retryAfter];
}

describe('refilledBy', () => {
  it('is the quota over time, less the part the drop takes while it lasts', () => {
    const drop = { fromMs: 60_000, toMs: 90_000, takenFraction: 0.5 };
    expect(refilledBy(60_000, 3_000, undefined)).toBe(3_000);
    expect(refilledBy(60_000, 3_000, drop)).toBe(3_000);
    expect(refilledBy(75_000, 3_000, drop)).toBe(3_375);
    expect(refilledBy(150_000, 3_000, drop)).toBe(6_750);
  });
});

describe('lognormalMs', () => {
  const latency = { medianMs: 50, sigma: 1.5, minMs: 5, maxMs: 2_000 };
  it('is the median where the normal draw is 0, and clamped at both ends', () => {
    // cos(2π · 0.25) = 0: Z = 0.
    expect(lognormalMs(latency, sequence([0.5, 0.25]))).toBeCloseTo(50, 9);
    // Z = sqrt(-2 ln(1e-9)) ≈ 6.4: far past 2 s; Z ≈ -6.4: far below 5 ms.
    expect(lognormalMs(latency, sequence([1 - 1e-9, 0]))).toBe(2_000);
    expect(lognormalMs(latency, sequence([1 - 1e-9, 0.5]))).toBe(5);
  });
});

function sequence(values: readonly number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length]!;
}

describe('control bench options', () => {
  it('reads nginx<N>x, capacity<N>x and latency[<N>x] in --only beside the named scenarios', () => {
    expect(parseScaled('nginx10x')).toEqual({ kind: 'nginx', times: 10 });
    expect(parseScaled('capacity100x')).toEqual({ kind: 'capacity', times: 100 });
    expect(parseScaled('latency')).toEqual({ kind: 'latency', times: 1 });
    expect(parseScaled('latency2.5x')).toEqual({ kind: 'latency', times: 2.5 });
    expect(parseScaled('nginx0x')).toBeUndefined();
    expect(parseScaled('nginx')).toBeUndefined();
    const args = parseControlArgs(['--only=nginx,nginx100x']);
    expect([...args.only]).toEqual(['nginx']);
    expect(args.scaled).toEqual([{ kind: 'nginx', times: 100 }]);
    expect(args.parallelGiven).toBe(false);
    expect(parseControlArgs(['--serial']).parallelGiven).toBe(true);
    expect(() => parseControlArgs(['--only=nginx10']).scaled).toThrow(/unknown nginx10/);
  });

  it('runs nginx-noburst only when --only names it', () => {
    expect(parseControlArgs([]).only.has('nginx-noburst')).toBe(false);
    const args = parseControlArgs(['--only=nginx,nginx-noburst']);
    expect([...args.only]).toEqual(['nginx', 'nginx-noburst']);
    expect(args.scaled).toEqual([]);
    expect(() => parseControlArgs(['--only=nginx-nobursts'])).toThrow(
      /unknown nginx-nobursts.*nginx-noburst/,
    );
  });
});

describe('quota server', () => {
  async function serve(t: { now: number }, drop?: { fromMs: number; toMs: number; takenFraction: number }) {
    const server: QuotaServer = await startQuotaServer({
      perMinute: 60,
      burstSeconds: 2,
      ...(drop === undefined ? {} : { drop }),
      now: () => t.now,
    });
    cleanups.push(() => server.close());
    return server;
  }

  it('serves its burst, then answers 429 with the seconds until the next unit; 429s take no unit', async () => {
    const t = { now: 0 };
    const server = await serve(t);
    expect(await get(server.url)).toEqual([200, undefined]);
    expect(await get(server.url)).toEqual([200, undefined]);
    expect(await get(server.url)).toEqual([429, '1']);
    expect(await get(server.url)).toEqual([429, '1']);
    t.now = 1_000;
    expect(await get(server.url)).toEqual([200, undefined]);
    expect(await get(server.url)).toEqual([429, '1']);
    expect([server.accepted, server.throttled]).toEqual([3, 3]);
    server.reset();
    expect([server.accepted, server.throttled]).toEqual([0, 0]);
    expect(await get(server.url)).toEqual([200, undefined]);
  });

  it('refills only with what the other client leaves while the drop lasts', async () => {
    const t = { now: 0 };
    const server = await serve(t, { fromMs: 10_000, toMs: 20_000, takenFraction: 0.5 });
    await get(server.url);
    await get(server.url);
    t.now = 10_000; // 10 s at 1/s: the bucket is full again (2)
    await get(server.url);
    await get(server.url);
    t.now = 12_000; // 2 s at 0.5/s: one unit
    expect(await get(server.url)).toEqual([200, undefined]);
    expect(await get(server.url)).toEqual([429, '2']);
    t.now = 13_000; // half a unit
    expect(await get(server.url)).toEqual([429, '1']);
  });

  it('never throttles at perMinute: Infinity', async () => {
    const server = await startQuotaServer({ perMinute: Number.POSITIVE_INFINITY, burstSeconds: 1 });
    cleanups.push(() => server.close());
    for (let i = 0; i < 20; i++) expect((await get(server.url))[0]).toBe(200);
    expect(server.accepted).toBe(20);
  });
});

describe('nginx config', () => {
  it('writes one limit_req zone and server per port, with 429 and Retry-After on rejection only', () => {
    const conf = nginxConfig({
      prefix: '/tmp/p',
      ports: [8001, 8002],
      zones: [
        { perMinute: 3_000, burst: 10 },
        { perMinute: 600, burst: 0 },
      ],
      retryAfterSeconds: 1,
    });
    expect(conf).toContain('limit_req_zone $server_port zone=z0:1m rate=3000r/m;');
    expect(conf).toContain('limit_req_zone $server_port zone=z1:1m rate=600r/m;');
    expect(conf).toContain('listen 127.0.0.1:8001;');
    expect(conf).toContain('limit_req zone=z0 burst=10 nodelay;');
    expect(conf).toContain('limit_req zone=z1;');
    expect(conf).toContain('limit_req_status 429;');
    expect(conf).toContain('map $limit_req_status $retry_after { REJECTED 1; default ""; }');
    expect(conf).toContain('add_header Retry-After $retry_after always;');
    expect(conf).not.toMatch(/\breturn\b/); // `return` would bypass limit_req
  });

  it('names the bad value', () => {
    const input = { prefix: '/tmp/p', ports: [1], retryAfterSeconds: 1 };
    expect(() => nginxConfig({ ...input, zones: [{ perMinute: 2.5, burst: 1 }] })).toThrow(/perMinute.*2\.5/);
    expect(() => nginxConfig({ ...input, zones: [{ perMinute: 60, burst: -1 }] })).toThrow(/burst.*-1/);
    expect(() => nginxConfig({ ...input, ports: [], zones: [{ perMinute: 60, burst: 1 }] })).toThrow(
      /0 ports/,
    );
  });
});

const hasNginx = spawnSync(process.env.NGINX ?? 'nginx', ['-v'], { stdio: 'ignore' }).status === 0;

describe.skipIf(!hasNginx)('nginx limit_req as configured (real nginx)', () => {
  it('lets burst + 1 through, then answers 429 with Retry-After; each zone on its own port', async () => {
    // One request a minute: nothing refills while the test runs.
    const nginx = await startNginx(
      [
        { perMinute: 1, burst: 2 },
        { perMinute: 1, burst: 0 },
      ],
      1,
    );
    cleanups.push(() => nginx.stop());
    const [a, b] = nginx.origins.map((o) => `${o}/ok`);
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push(await get(a!));
    expect(statuses).toEqual([
      [200, undefined],
      [200, undefined],
      [200, undefined],
      [429, '1'],
    ]);
    expect(await get(b!)).toEqual([200, undefined]);
    expect(await get(b!)).toEqual([429, '1']);
  });
});
