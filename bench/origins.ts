/**
 * Suite `origins`: hostile hosts. Each new origin gets its per-origin limiter through the HTTP
 * adapters' runtime (the route look-up every request makes: registry, route cache), sends one
 * request and is answered `429 Retry-After: 600`, so its limiter is paused for `maxPause`
 * (10 min), which outlasts the run (the system clock, so that pause timers cost what they cost a
 * user: a manual clock's timer list is a plain array). Measured at 1k, 10k
 * and 100k such origins, each count on a fresh registry with the defaults (`maxOriginLimiters`
 * 1,000, `maxPausedOrigins` 10,000):
 *
 * - heap retained after a full GC, in all and per origin, and what the registry keeps (limiters,
 *   pause records, whether the overflow limiter was needed);
 * - time per new origin over the whole run, and over its last 1,000 origins: constant work per new
 *   origin shows as the same figure at every count.
 *
 * Then the heap of one pause record alone: 10,000 paused origins with `maxOriginLimiters: 1`.
 *
 * Then the same for partitions, in the same run: one origin and 1k, 10k, 100k credentials (each
 * request `authorization: Bearer <its own token>`, partitioned by default), each answered
 * `429 Retry-After: 600`; the look-up is the adapters' (the origin's route, then the partition's,
 * with the keyed hash of the token). Heap and CPU per new partition beside those per new origin.
 */
import { systemClock } from '../src/clock.js';
import { resolveInterceptorOptions } from '../src/http/options.js';
import { HttpRuntime } from '../src/http/runtime.js';
import { OVERFLOW, RateLimiterRegistry, type RegistryOptions } from '../src/registry/index.js';
import { formatBytes, formatMicros, hasGc, nowMs } from './harness.js';

const COUNTS = [1_000, 10_000, 100_000] as const;
const LAST = 1_000;

function collect(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  gc?.();
}

interface Figures {
  heapBytes: number;
  usPerOrigin: number;
  wallUsPerOrigin: number;
  usPerLastOrigins: number;
  limiters: number;
  overflow: boolean;
}

/**
 * `count` hostile origins (or, with `partitions`, `count` credentials on one origin) through one
 * runtime; the runtime is kept alive until the heap is read.
 */
function hostile(count: number, registryOptions: RegistryOptions = {}, partitions = false): Figures {
  const registry = new RateLimiterRegistry({ clock: systemClock, ...registryOptions });
  const runtime = new HttpRuntime(resolveInterceptorOptions({ registry }));
  collect();
  const before = process.memoryUsage().heapUsed;
  const cpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  const w0 = nowMs();
  const t0 = cpu();
  let tLast = t0;
  for (let i = 0; i < count; i++) {
    if (i === count - LAST) tLast = cpu();
    const origin = partitions ? 'https://api.hostile.test' : `https://host-${i}.hostile.test`;
    const base = runtime.route(origin);
    const route =
      partitions && base !== undefined
        ? runtime.partitionRoute(origin, base, {
            headers: { authorization: `Bearer tok-${i}-0123456789abcdef0123456789` },
            request: () => {
              throw new Error('not asked: the default partitions by headers');
            },
          })
        : base;
    const permit = route?.limiter.tryAcquire();
    permit?.throttled(600_000);
  }
  const t1 = cpu();
  const wallMs = nowMs() - w0;
  collect();
  const heapBytes = process.memoryUsage().heapUsed - before;
  const figures: Figures = {
    heapBytes,
    usPerOrigin: ((t1 - t0) * 1000) / count,
    wallUsPerOrigin: (wallMs * 1000) / count,
    usPerLastOrigins: ((t1 - tLast) * 1000) / Math.min(LAST, count),
    limiters: registry.names().filter((n) => n !== OVERFLOW).length,
    overflow: registry.get(OVERFLOW) !== undefined,
  };
  runtime.close();
  registry.close();
  return figures;
}

export async function originsSuite(): Promise<void> {
  if (!hasGc) console.log('(no --expose-gc: heap figures are noise)');
  hostile(2_000); // warm-up
  console.log(
    '\n| hostile origins (429, Retry-After: 600) | heap retained | per origin | CPU per new origin | last 1,000 | wall per new origin | limiters kept | overflow used |',
  );
  console.log('| --: | --: | --: | --: | --: | --: | --: | --- |');
  const byOrigin: Figures[] = [];
  for (const count of COUNTS) {
    const f = hostile(count);
    byOrigin.push(f);
    console.log(
      `| ${count.toLocaleString('en')} | ${(f.heapBytes / 2 ** 20).toFixed(2)} MiB | ${formatBytes(f.heapBytes / count)} | ${formatMicros(f.usPerOrigin)} | ${formatMicros(f.usPerLastOrigins)} | ${formatMicros(f.wallUsPerOrigin)} | ${f.limiters} | ${f.overflow ? 'yes' : 'no'} |`,
    );
  }
  const records = 10_000;
  const r = hostile(records + 1, { maxOriginLimiters: 1, maxPausedOrigins: records });
  console.log(
    `\nheap per pause record (${records.toLocaleString('en')} paused origins, maxOriginLimiters 1): ${formatBytes(r.heapBytes / records)}`,
  );

  // Partitions: one origin, a credential per request, each answered 429; beside the origins above.
  hostile(2_000, {}, true); // warm-up
  console.log(
    '\n| hostile credentials on one origin (429, Retry-After: 600) | heap retained | per partition | CPU per new partition | last 1,000 | wall per new partition | limiters kept | overflow used | heap / per origin | CPU / per origin |',
  );
  console.log('| --: | --: | --: | --: | --: | --: | --: | --- | --: | --: |');
  for (const [i, count] of COUNTS.entries()) {
    const f = hostile(count, {}, true);
    const o = byOrigin[i] as Figures;
    console.log(
      `| ${count.toLocaleString('en')} | ${(f.heapBytes / 2 ** 20).toFixed(2)} MiB | ${formatBytes(f.heapBytes / count)} | ${formatMicros(f.usPerOrigin)} | ${formatMicros(f.usPerLastOrigins)} | ${formatMicros(f.wallUsPerOrigin)} | ${f.limiters} | ${f.overflow ? 'yes' : 'no'} | ${(f.heapBytes / o.heapBytes).toFixed(2)}x | ${(f.usPerOrigin / o.usPerOrigin).toFixed(2)}x |`,
    );
  }
}
