import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { RedisBudgetStore } from '../src/redis/redis-store.js';
import { describeRedis, freePort, heartbeatRequest, RedisServer, waitFor } from './helpers/redis-server.js';

// The budget's own client connects through its one-write Connector (src/redis/connector.ts):
// over TLS, a Unix socket, with AUTH and SELECT, and again after the server restarts.

const dir = mkdtempSync(join(tmpdir(), 'arl-connector-'));

function startRedis(args: string[]): Promise<ChildProcess> {
  const child = spawn('redis-server', ['--save', '', '--appendonly', 'no', '--dir', dir, ...args], {
    stdio: 'ignore',
  });
  return Promise.resolve(child);
}

async function stopRedis(child: ChildProcess | undefined): Promise<void> {
  if (child === undefined || child.exitCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await exited;
}

function canConnect(where: { port: number } | { path: string }): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(where as never);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

// A redis-server built with TLS, and openssl to make a certificate.
const hasTls =
  spawnSync('openssl', ['version'], { stdio: 'ignore' }).status === 0 &&
  // A config error names the first directive it cannot read: `tls-port` on a build without TLS.
  !(
    spawnSync('redis-server', ['--tls-port', '0', '--port', '0', '--not-a-directive'], {
      encoding: 'utf8',
      timeout: 2_000,
    }).stdout ?? ''
  ).includes("'tls-port");

let n = 0;
const name = () => `connector-${process.pid}-${n++}`;

async function heartbeatOf(url: string): Promise<string> {
  const store = new RedisBudgetStore({ redis: url, name: name(), keyPrefix: 'arl:', redisTimeout: 2_000 });
  try {
    const reply = await store.heartbeat(heartbeatRequest('a'));
    return `members ${reply.members}`;
  } catch (e) {
    return (e as Error).message;
  } finally {
    await store.close();
  }
}

describeRedis("a shared budget's own client, through its one-write connector", () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.runIf(hasTls)('connects over TLS (rediss://)', async () => {
    const cert = join(dir, 'cert.pem');
    const key = join(dir, 'key.pem');
    const made = spawnSync(
      'openssl',
      [
        ...['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1'],
        ...['-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'],
      ],
      { stdio: 'ignore' },
    );
    expect(made.status).toBe(0);
    const port = await freePort();
    const child = await startRedis([
      ...['--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1'],
      ...[
        '--tls-cert-file',
        cert,
        '--tls-key-file',
        key,
        '--tls-ca-cert-file',
        cert,
        '--tls-auth-clients',
        'no',
      ],
    ]);
    const before = process.env.NODE_TLS_REJECT_UNAUTHORIZED;
    // The self-signed certificate: ioredis's URL gives no CA, so trust is turned off for this test.
    process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
    try {
      await waitFor('the TLS port', () => canConnect({ port }));
      expect(readFileSync(cert, 'utf8')).toContain('BEGIN CERTIFICATE');
      expect(await heartbeatOf(`rediss://127.0.0.1:${port}`)).toBe('members 1');
      // 3 at once, 5 times: each connects.
      for (let i = 0; i < 5; i++) {
        const told = await Promise.all([0, 1, 2].map(() => heartbeatOf(`rediss://127.0.0.1:${port}`)));
        expect(told).toEqual(['members 1', 'members 1', 'members 1']);
      }
      // At its maxclients (the admin connection holds the one): over TLS the refusal cannot be
      // read (redis-server writes it before the TLS handshake, in clear, and closes), so each call
      // fails with the TLS socket's own error, never an unhandled one. Seen: 'Client network socket
      // disconnected before secure TLS connection was established' 24 of 30, 'read ECONNRESET' 6.
      const admin = new Redis({ port, host: '127.0.0.1', tls: { rejectUnauthorized: false } });
      try {
        await admin.config('SET', 'maxclients', '1');
        for (let i = 0; i < 10; i++) {
          const all = await Promise.all([0, 1, 2].map(() => heartbeatOf(`rediss://127.0.0.1:${port}`)));
          for (const m of all) expect(m).toMatch(/^not connected to Redis: /);
        }
      } finally {
        admin.disconnect();
      }
    } finally {
      if (before === undefined) delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
      else process.env.NODE_TLS_REJECT_UNAUTHORIZED = before;
      await stopRedis(child);
    }
  });

  it('connects over a Unix socket (path=)', async () => {
    const path = join(dir, 'redis.sock');
    const child = await startRedis(['--port', '0', '--unixsocket', path, '--unixsocketperm', '700']);
    try {
      await waitFor('the socket', () => canConnect({ path }));
      expect(await heartbeatOf(`redis://localhost?path=${encodeURIComponent(path)}`)).toBe('members 1');
    } finally {
      await stopRedis(child);
    }
  });

  it("sends AUTH and SELECT of a URL's password and database, and reads a wrong password's refusal", async () => {
    const port = await freePort();
    const child = await startRedis([
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--requirepass',
      's3cret',
    ]);
    const redis = new Redis({ port, host: '127.0.0.1', password: 's3cret', db: 3, lazyConnect: true });
    try {
      await waitFor('the port', () => canConnect({ port }));
      expect(await heartbeatOf(`redis://:s3cret@127.0.0.1:${port}/3`)).toBe('members 1');
      await redis.connect();
      expect((await redis.keys('arl:*')).length).toBeGreaterThan(0);
      expect(await heartbeatOf(`redis://:wrong@127.0.0.1:${port}/3`)).toMatch(/WRONGPASS|invalid/i);
      // At its maxclients (the suite's client holds the one), AUTH and SELECT go out in the one
      // write too: each call names the refusal.
      await redis.config('SET', 'maxclients', '1');
      for (let i = 0; i < 10; i++) {
        const all = await Promise.all(
          [0, 1, 2].map(() => heartbeatOf(`redis://:s3cret@127.0.0.1:${port}/3`)),
        );
        for (const m of all)
          expect(m).toMatch(/the server refused the connection: ERR max number of clients reached/);
      }
    } finally {
      redis.disconnect();
      await stopRedis(child);
    }
  });

  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(() => server.stop());

  it('connects again after the server restarts', async () => {
    const store = new RedisBudgetStore({
      redis: server.url,
      name: name(),
      keyPrefix: 'arl:',
      redisTimeout: 1_000,
    });
    try {
      expect((await store.heartbeat(heartbeatRequest('a'))).members).toBe(1);
      await server.kill();
      await expect(store.heartbeat(heartbeatRequest('a'))).rejects.toThrow();
      await server.restart();
      let answered = false;
      await waitFor('a heartbeat answered after the restart', async () => {
        answered = await store.heartbeat(heartbeatRequest('a')).then(
          () => true,
          () => false,
        );
        return answered;
      });
      expect(answered).toBe(true);
      await sleep(0);
    } finally {
      await store.close();
    }
  });
});
