/**
 * nginx `limit_req` for the control bench: a config writer (one `server` per zone, each on its
 * own port of 127.0.0.1 with its own zone, so the bench's rows never share a budget) and a start
 * that installs nginx from Debian's packages when it is missing, writes the config to a temp
 * dir, waits for every port, and stops nginx afterwards.
 *
 * A rejected request gets 429 and `Retry-After` (nginx adds neither by itself: `limit_req_status`
 * and a `map` of `$limit_req_status` do). Content comes from a file (`root`), not `return`, which
 * would run before `limit_req` and bypass it.
 */
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, waitForPort } from './control-net.js';
import { alive, spawnTracked, stop } from './control-procs.js';

/** One rate-limited `server` block. */
export interface NginxZone {
  /** Requests per minute (`rate=N r/m`), an integer > 0. */
  perMinute: number;
  /** `burst=N` with `nodelay`, an integer >= 0 (0: no burst, nginx's default). */
  burst: number;
}

export interface NginxConfigInput {
  /** The temp dir: pid, logs, temp paths and the served file live under it. */
  prefix: string;
  /** Ports on 127.0.0.1, one per zone. */
  ports: readonly number[];
  zones: readonly NginxZone[];
  /** `Retry-After` on a rejected request, whole seconds. */
  retryAfterSeconds: number;
}

/** The path every zone serves ("ok"). */
export const NGINX_PATH = '/ok';

/** The whole nginx.conf: one worker, no access log, 429 + Retry-After on rejection. */
export function nginxConfig(input: NginxConfigInput): string {
  const { prefix, ports, zones, retryAfterSeconds } = input;
  if (ports.length !== zones.length)
    throw new Error(`nginxConfig: ${ports.length} ports for ${zones.length} zones`);
  for (const zone of zones) {
    if (!Number.isInteger(zone.perMinute) || zone.perMinute <= 0) {
      throw new Error(`nginxConfig: perMinute must be an integer > 0, got ${zone.perMinute}`);
    }
    if (!Number.isInteger(zone.burst) || zone.burst < 0) {
      throw new Error(`nginxConfig: burst must be an integer >= 0, got ${zone.burst}`);
    }
  }
  const zoneLines = zones.map(
    (zone, i) => `  limit_req_zone $server_port zone=z${i}:1m rate=${zone.perMinute}r/m;`,
  );
  const servers = zones.map(
    (zone, i) => `  server {
    listen 127.0.0.1:${ports[i]};
    location = ${NGINX_PATH} {
      limit_req zone=z${i}${zone.burst > 0 ? ` burst=${zone.burst} nodelay` : ''};
      add_header Retry-After $retry_after always;
      root ${join(prefix, 'www')};
    }
  }`,
  );
  return `# written by the control bench (bench/control-nginx.ts)
worker_processes 1;
daemon off;
master_process on;
pid ${join(prefix, 'nginx.pid')};
error_log ${join(prefix, 'error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  default_type text/plain;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  client_body_temp_path ${join(prefix, 'tmp', 'body')};
  proxy_temp_path ${join(prefix, 'tmp', 'proxy')};
  fastcgi_temp_path ${join(prefix, 'tmp', 'fastcgi')};
  uwsgi_temp_path ${join(prefix, 'tmp', 'uwsgi')};
  scgi_temp_path ${join(prefix, 'tmp', 'scgi')};
  limit_req_status 429;
  limit_req_log_level info;
  map $limit_req_status $retry_after { REJECTED ${retryAfterSeconds}; default ""; }
${zoneLines.join('\n')}
${servers.join('\n')}
}
`;
}

const BINARY = process.env.NGINX ?? 'nginx';

function hasNginx(): boolean {
  return spawnSync(BINARY, ['-v'], { stdio: 'ignore' }).status === 0;
}

/**
 * nginx on the PATH, or installed with apt (Debian's `nginx-light`) when it is missing and this
 * process may; otherwise the reason it cannot be had.
 */
export function ensureNginx(): true | string {
  if (hasNginx()) return true;
  if (process.getuid?.() !== 0)
    return `${BINARY} not found, and not root to install it (apt-get install -y nginx-light)`;
  if (spawnSync('apt-get', ['--version'], { stdio: 'ignore' }).status !== 0)
    return `${BINARY} not found and no apt-get`;
  console.log('nginx not found: installing nginx-light with apt-get ...');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () =>
    spawnSync('apt-get', ['install', '-y', '-q', 'nginx-light'], { stdio: 'inherit', env });
  if (install().status !== 0) {
    spawnSync('apt-get', ['update', '-q'], { stdio: 'inherit', env });
    install();
  }
  return hasNginx() ? true : `${BINARY} not found, and apt-get install nginx-light failed`;
}

export interface StartedNginx {
  /** `http://127.0.0.1:<port>` of each zone, in order. */
  readonly origins: readonly string[];
  stop(): Promise<void>;
}

/** Writes the config to a temp dir and starts nginx with one server per zone; waits for every port. */
export async function startNginx(
  zones: readonly NginxZone[],
  retryAfterSeconds: number,
): Promise<StartedNginx> {
  const prefix = await mkdtemp(join(tmpdir(), 'arl-bench-nginx-'));
  // Also on Ctrl-C or an error, when the orderly cleanup below does not run.
  const removeSync = (): void => rmSync(prefix, { recursive: true, force: true });
  process.once('exit', removeSync);
  // The workers run as `nobody` when nginx starts as root: they must read the served file.
  await chmod(prefix, 0o755);
  await mkdir(join(prefix, 'www'), { mode: 0o755 });
  await mkdir(join(prefix, 'tmp'));
  await writeFile(join(prefix, 'www', NGINX_PATH.slice(1)), 'ok', { mode: 0o644 });
  const ports: number[] = [];
  for (const _ of zones) ports.push(await freePort());
  const conf = join(prefix, 'nginx.conf');
  await writeFile(conf, nginxConfig({ prefix, ports, zones, retryAfterSeconds }));
  const child = spawnTracked(BINARY, ['-p', prefix, '-c', conf, '-e', join(prefix, 'error.log')]);
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    log += chunk.toString();
  });
  const cleanup = async (): Promise<void> => {
    await stop(child, 'SIGTERM');
    await rm(prefix, { recursive: true, force: true });
    process.off('exit', removeSync);
  };
  try {
    for (const port of ports) await waitForPort(port, 'nginx', () => alive(child));
  } catch (error) {
    await cleanup();
    throw new Error(`${(error as Error).message}\n${log}`);
  }
  return { origins: ports.map((port) => `http://127.0.0.1:${port}`), stop: cleanup };
}
